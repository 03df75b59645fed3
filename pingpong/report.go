package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"

	"github.com/rmago/rmago/rma"
)

// Report is what -json writes: one system's results with the metadata
// needed to compare them with another's.
type Report struct {
	Meta    Meta     `json:"meta"`
	Results []Result `json:"results"`
}

// Meta describes the system and the run that produced a Report.
type Meta struct {
	System   string `json:"system"`           // label: one line per system on plots
	Library  string `json:"library"`          // "rmago", "Open MPI v4.1.4", ...
	Provider string `json:"provider"`         // rmago provider of rank 0's peers (soft, ibv, shm; shm+soft when they differ), or the MPI's transport
	Device   string `json:"device,omitempty"` // verbs device
	// PeerProviders (rmago) is the provider that carried rank 0's
	// operations to each rank, by rank (a mixed job reaches node-local
	// peers through shm).
	PeerProviders []string `json:"peer_providers,omitempty"`
	Ranks         int      `json:"ranks"`          // job size
	Host          string   `json:"host"`           // hostname
	CPUs          int      `json:"cpus,omitempty"` // logical CPUs of the host
	GoVersion     string   `json:"go_version,omitempty"`
	GOMAXPROCS    int      `json:"gomaxprocs,omitempty"`
	Time          string   `json:"time"`              // start of the run, RFC 3339
	Command       []string `json:"command,omitempty"` // the command line
	SettleMS      float64  `json:"settle_ms"`         // busy time before the first measurement (-settle), ms
}

// Metric names a Result's unit.
const (
	MetricRTT     = "rtt_us"         // round-trip time, µs
	MetricLatency = "latency_us"     // one-way latency per operation, µs
	MetricBW      = "bandwidth_MBps" // MB/s (10^6 bytes per second)
)

// Result is one benchmark at one size.
type Result struct {
	Bench    string    `json:"bench"`              // oneone, onemany, lat, put_latency, put_bw, ...
	Sync     string    `json:"sync"`               // fence3, lock, flush, ...
	Window   string    `json:"window,omitempty"`   // allocate or create
	Ranks    int       `json:"ranks"`              // ranks taking part
	Elements int       `json:"elements,omitempty"` // float64 elements (ping-pongs)
	Bytes    int       `json:"bytes"`              // message size
	Metric   string    `json:"metric"`             // MetricRTT, MetricLatency or MetricBW
	Iters    int       `json:"iters"`              // operations or round trips per repetition
	Reps     int       `json:"reps"`               // timed repetitions
	Mean     float64   `json:"mean"`               // mean of the repetitions without the fastest and slowest (all if fewer than 3)
	Min      float64   `json:"min"`
	Median   float64   `json:"median"`
	Max      float64   `json:"max"`
	Samples  []float64 `json:"samples,omitempty"` // the repetitions, in order
	// Typical (lat) is the median latency of single operations over the
	// timed repetitions, each timed by the CPU's cycle counter, as
	// perftest's t_typical; Mean and the others are per repetition (its
	// time over its operations), so they include the stalls a median
	// leaves out.
	Typical  float64 `json:"typical,omitempty"`
	Verified bool    `json:"verified"` // the data moved was checked
}

// summarize fills the statistics from samples: with 3 or more the fastest
// and slowest are dropped for the mean.
func (r *Result) summarize(samples []float64) {
	r.Samples = slices.Clone(samples)
	r.Reps = len(samples)
	s := slices.Clone(samples)
	slices.Sort(s)
	kept := s
	if len(s) >= 3 {
		kept = s[1 : len(s)-1]
	}
	var sum float64
	for _, v := range kept {
		sum += v
	}
	r.Mean = sum / float64(len(kept))
	r.Min, r.Max = s[0], s[len(s)-1]
	if len(s)%2 == 1 {
		r.Median = s[len(s)/2]
	} else {
		r.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
}

// job is a running benchmark: the world, rank 0's report and output.
type job struct {
	w      *rma.World
	opt    *common
	report Report
	out    io.Writer
	prog   *progress
	head   string // the table header last printed
	prof   *cpuProfile
	// settled: the rank has kept busy for opt.settle (settleOnce).
	settled bool
}

// startJob joins the rmarun job and checks its size.
func startJob(opt *common, name string, minRanks, maxRanks int) (*job, error) {
	start := time.Now()
	w, err := rma.Init()
	if err != nil {
		return nil, err
	}
	if n := w.Size(); n < minRanks || (maxRanks > 0 && n > maxRanks) {
		w.Close()
		if minRanks == maxRanks {
			return nil, usagef("%s runs with %d ranks (rmarun -n %d), not %d", name, minRanks, minRanks, n)
		}
		return nil, usagef("%s needs at least %d ranks (rmarun -n N), not %d", name, minRanks, n)
	}
	dev := w.Provider()
	peers, prov := peerProviders(w)
	host, _ := os.Hostname()
	label := opt.label
	if label == "" {
		label = "rmago " + prov
	}
	j := &job{w: w, opt: opt, out: io.Discard}
	j.report.Meta = Meta{
		System: label, Library: "rmago", Provider: prov, Device: dev.Name, PeerProviders: peers,
		Ranks: w.Size(), Host: host, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), Time: start.Format(time.RFC3339), Command: os.Args,
		SettleMS: ms(opt.settle),
	}
	if w.Rank() == 0 {
		j.out = os.Stdout
		fmt.Fprintf(j.out, "# rmago %s, provider %s (%s), %d ranks, %s, %s\n", name, prov, dev.Name, w.Size(), runtime.Version(), host)
		fmt.Fprintf(j.out, "# rank 0 reaches %s\n", describePeers(peers))
	}
	j.prog = newProgress(w.Rank() == 0 && !opt.noProg, os.Stderr)
	if j.prof, err = startCPUProfile(opt.cpuProf, w.Rank()); err != nil {
		w.Close()
		return nil, err
	}
	return j, nil
}

// add records a result and prints its table row (rank 0).
func (j *job) add(r Result) {
	if j.w.Rank() != 0 {
		return
	}
	j.report.Results = append(j.report.Results, r)
	printRow(j.out, &r, &j.head)
}

// finish writes the files (rank 0) and leaves the job.
func (j *job) finish(runErr error) error {
	if j.w.Rank() == 0 && len(j.report.Results) > 0 {
		if j.opt.jsonPath != "" {
			if err := writeJSON(j.opt.jsonPath, &j.report); err != nil && runErr == nil {
				runErr = err
			}
		}
		if j.opt.csvPath != "" {
			if err := writeCSV(j.opt.csvPath, j.report.Results); err != nil && runErr == nil {
				runErr = err
			}
		}
	}
	j.prog.done()
	if err := j.prof.stop(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		// Leave at once: the other ranks may be stuck in a collective that
		// this rank will never join; rmarun stops them when this one exits.
		return runErr
	}
	return j.w.Close()
}

// printRow prints r as a table row, with a header when the kind of table
// changes. A result of one repetition (the OSU-style suite's default) has
// one value; min, median and max are shown only when there are several.
func printRow(w io.Writer, r *Result, last *string) {
	unit := "us"
	if r.Metric == MetricBW {
		unit = "MB/s"
	}
	var head string
	switch {
	case r.Metric == MetricRTT:
		head = fmt.Sprintf("\n# %s %s, %d ranks, window %s: round-trip time, each rep the mean of iters round trips; %d reps (fastest and slowest dropped for the mean)\n%10s %10s %12s %12s %12s %12s %7s\n",
			r.Bench, r.Sync, r.Ranks, r.Window, r.Reps, "elements", "bytes", "mean_us", "min_us", "median_us", "max_us", "iters")
	case r.Reps <= 1:
		name := "latency_us"
		if r.Metric == MetricBW {
			name = "MB/s"
		}
		head = fmt.Sprintf("\n# %s, sync %s, window %s, %d ranks: %s\n%10s %12s %9s\n",
			r.Bench, r.Sync, r.Window, r.Ranks, r.Metric, "bytes", name, "iters")
	case r.Typical > 0:
		head = fmt.Sprintf("\n# %s, sync %s, window %s, %d ranks: %s, %d reps (each the mean of its operations); typical: the median operation\n%10s %12s %12s %12s %12s %12s %9s\n",
			r.Bench, r.Sync, r.Window, r.Ranks, r.Metric, r.Reps, "bytes", "mean_"+unit, "min_"+unit, "median_"+unit, "max_"+unit, "typical_"+unit, "iters")
	default:
		head = fmt.Sprintf("\n# %s, sync %s, window %s, %d ranks: %s, %d reps\n%10s %12s %12s %12s %12s %9s\n",
			r.Bench, r.Sync, r.Window, r.Ranks, r.Metric, r.Reps, "bytes", "mean_"+unit, "min_"+unit, "median_"+unit, "max_"+unit, "iters")
	}
	if head != *last {
		fmt.Fprint(w, head)
		*last = head
	}
	switch {
	case r.Metric == MetricRTT:
		fmt.Fprintf(w, "%10d %10d %12.2f %12.2f %12.2f %12.2f %7d\n", r.Elements, r.Bytes, r.Mean, r.Min, r.Median, r.Max, r.Iters)
	case r.Reps <= 1:
		fmt.Fprintf(w, "%10d %12.2f %9d\n", r.Bytes, r.Mean, r.Iters)
	case r.Typical > 0:
		fmt.Fprintf(w, "%10d %12.2f %12.2f %12.2f %12.2f %12.2f %9d\n", r.Bytes, r.Mean, r.Min, r.Median, r.Max, r.Typical, r.Iters)
	default:
		fmt.Fprintf(w, "%10d %12.2f %12.2f %12.2f %12.2f %9d\n", r.Bytes, r.Mean, r.Min, r.Median, r.Max, r.Iters)
	}
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// readJSON reads a Report that -json or import wrote.
func readJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &rep, nil
}

// writeCSV writes the CSV of the one-to-one benchmark's original method
// (docs/benchmarks.md): a header row, then per size the element count
// (bytes for the OSU-style and latency tests), the number of ranks and
// every repetition's value, plus the benchmark, sync mode, bytes and the
// metric (the unit of the repetitions: rtt_us, latency_us or
// bandwidth_MBps), so one file can hold several modes. Rows with fewer
// repetitions than the most any row has leave the missing cells empty, so
// every row has the header's columns.
func writeCSV(path string, results []Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := csvTo(f, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// csvTo writes results as writeCSV's CSV to w.
func csvTo(w io.Writer, results []Result) error {
	reps := 0
	first := "elements"
	for _, r := range results {
		reps = max(reps, len(r.Samples))
		if r.Elements == 0 {
			first = "size"
		}
	}
	cw := csv.NewWriter(w)
	head := []string{first, "ranks"}
	for i := 1; i <= reps; i++ {
		head = append(head, "rep"+strconv.Itoa(i))
	}
	if err := cw.Write(append(head, "bench", "sync", "bytes", "metric")); err != nil {
		return err
	}
	for _, r := range results {
		size := r.Elements
		if size == 0 {
			size = r.Bytes
		}
		fields := []string{strconv.Itoa(size), strconv.Itoa(r.Ranks)}
		for i := range reps {
			v := ""
			if i < len(r.Samples) {
				v = strconv.FormatFloat(r.Samples[i], 'f', 6, 64)
			}
			fields = append(fields, v)
		}
		if err := cw.Write(append(fields, r.Bench, r.Sync, strconv.Itoa(r.Bytes), r.Metric)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// peerProviders lists the provider that carries this rank's operations
// to each rank, and names the job's: the one provider of every other rank,
// or the distinct ones, sorted and joined with + (shm+soft).
func peerProviders(w *rma.World) ([]string, string) {
	peers := make([]string, w.Size())
	var distinct []string
	for r := range peers {
		p, err := w.ProviderOf(r)
		if err != nil {
			p = "?"
		}
		peers[r] = p
		if r != w.Rank() || w.Size() == 1 {
			if !slices.Contains(distinct, p) {
				distinct = append(distinct, p)
			}
		}
	}
	slices.Sort(distinct)
	return peers, strings.Join(distinct, "+")
}

// describePeers says which ranks each provider reaches: "ranks 0-1
// through shm, ranks 2-3 through soft".
func describePeers(peers []string) string {
	var parts []string
	for i := 0; i < len(peers); {
		j := i
		for j+1 < len(peers) && peers[j+1] == peers[i] {
			j++
		}
		if i == j {
			parts = append(parts, fmt.Sprintf("rank %d through %s", i, peers[i]))
		} else {
			parts = append(parts, fmt.Sprintf("ranks %d-%d through %s", i, j, peers[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
