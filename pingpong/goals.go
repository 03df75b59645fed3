package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// runGoals prints the performance goals of the project's issues against
// one make compare run, as a Markdown table:
//
//	pingpong goals DIR
//
// DIR is make compare's OUT: raw/ holds one file per system, benchmark,
// mode, job size and round (SYSTEM.BENCH.MODE.nN.rR.json, or .csv for
// the MPIs) and one put_bw file per system (osu.SYSTEM.put_bw.json).
//
// Each goal is a ratio of rmago to an MPI, taken two ways. Pooled: the
// median of every repetition of every round of one system over the
// other's, as the tables of make compare. Per round: in each round the
// two systems ran minutes apart, and this machine changes speed from one
// run to the next (docs/benchmarks.md) and moves both alike; the median
// of the rounds' ratios leaves out what the rounds had in common.
func runGoals(args []string) error {
	fs := newFlagSet("goals", "pingpong goals DIR (make compare's OUT)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("goals: name make compare's OUT directory")
	}
	runs, err := loadRounds(filepath.Join(fs.Arg(0), "raw"))
	if err != nil {
		return err
	}
	return writeGoals(os.Stdout, runs)
}

// goal is one line of an issue's goals: rmago's results over an MPI's
// (the faster of several, per round), at most limit (at least, for
// bandwidths).
type goal struct {
	text   string
	rmago  string   // make compare's system name
	mpi    []string // the anchor: the fastest of these
	bench  string
	modes  []string
	ranks  []int
	bytes  []int
	limit  float64
	higher bool // a bandwidth: the ratio must be at least limit
}

const mib = 1 << 20

var oneoneModes = []string{"fence3", "fence2", "pscw", "lock", "lockall", "get"}

// goals are those of the shared-memory issue and of the network
// protocols issue, in the issues' words (ibv's, beside perftest, are
// measured by make test-rdma: docs/rdma.md).
var goals = []goal{
	{text: "soft 8 B fence3, lock, PSCW, get ≤ 0.5 × Open MPI TCP", rmago: "rmago-soft", mpi: []string{"ompi-tcp"},
		bench: "oneone", modes: []string{"fence3", "lock", "pscw", "get"}, ranks: []int{2}, bytes: []int{8}, limit: 0.5},
	{text: "soft 1-8 MiB, every mode ≤ 1.0", rmago: "rmago-soft", mpi: []string{"ompi-tcp"},
		bench: "oneone", modes: oneoneModes, ranks: []int{2}, bytes: []int{mib, 2 * mib, 4 * mib, 8 * mib}, limit: 1},
	{text: "soft one-to-many N = 2, 3, 4 ≤ 0.7", rmago: "rmago-soft", mpi: []string{"ompi-tcp"},
		bench: "onemany", modes: []string{"fence3"}, ranks: []int{2, 3, 4}, bytes: []int{8}, limit: 0.7},
	{text: "soft 8-byte `put_bw` ≥ Open MPI TCP's", rmago: "rmago-soft", mpi: []string{"ompi-tcp"},
		bench: "put_bw", modes: []string{"flush"}, ranks: []int{2}, bytes: []int{8}, limit: 1, higher: true},
	{text: "shm 8 B fence3, lock, PSCW, get ≤ 1.0 × Open MPI shm", rmago: "rmago-shm", mpi: []string{"ompi-shm"},
		bench: "oneone", modes: []string{"fence3", "lock", "pscw", "get"}, ranks: []int{2}, bytes: []int{8}, limit: 1},
	{text: "shm 8 MiB put and get ≥ the faster MPI's shm", rmago: "rmago-shm", mpi: []string{"ompi-shm", "mpich-shm"},
		bench: "oneone", modes: oneoneModes, ranks: []int{2}, bytes: []int{8 * mib}, limit: 1},
	{text: "shm one-to-many N = 3, 4 ≤ 1.0", rmago: "rmago-shm", mpi: []string{"ompi-shm"},
		bench: "onemany", modes: []string{"fence3"}, ranks: []int{3, 4}, bytes: []int{8}, limit: 1},
}

// point names one measurement of one system.
type point struct {
	system, bench, mode string
	ranks, bytes        int
}

// rounds holds each point's repetitions by round (0 for a run made once).
type rounds map[point]map[int][]float64

var rawName = regexp.MustCompile(`^(.+)\.(oneone|onemany)\.([a-z0-9_]+)\.n([0-9]+)\.r([0-9]+)\.(json|csv)$`)
var bwName = regexp.MustCompile(`^osu\.(.+)\.put_bw\.json$`)

// loadRounds reads make compare's raw results.
func loadRounds(dir string) (rounds, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	runs := rounds{}
	for _, e := range entries {
		name := e.Name()
		system, round := "", 0
		if m := rawName.FindStringSubmatch(name); m != nil {
			system = m[1]
			round, _ = strconv.Atoi(m[5])
		} else if m := bwName.FindStringSubmatch(name); m != nil {
			system = m[1]
		} else {
			continue
		}
		var rep Report
		path := filepath.Join(dir, name)
		if strings.HasSuffix(name, ".csv") {
			err = importCSV(path, &rep)
		} else {
			err = importJSON(path, &rep)
		}
		if err != nil {
			return nil, err
		}
		for _, r := range rep.Results {
			p := point{system, r.Bench, r.Sync, r.Ranks, r.Bytes}
			if runs[p] == nil {
				runs[p] = map[int][]float64{}
			}
			runs[p][round] = append(runs[p][round], r.Samples...)
		}
	}
	return runs, nil
}

// ratio is one point of a goal, both ways.
type ratio struct {
	label            string
	pooled, paired   float64
	pooledOK, pairOK bool
}

// writeGoals prints one line per goal: its points' ratios, pooled and per
// round, and whether the goal is met each way.
func writeGoals(w io.Writer, runs rounds) error {
	fmt.Fprintln(w, "| goal | pooled medians, rmago / MPI | median of the rounds' ratios | met (pooled, per round) |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, g := range goals {
		var rs []ratio
		for _, mode := range g.modes {
			for _, n := range g.ranks {
				for _, b := range g.bytes {
					r, ok := g.ratio(runs, mode, n, b)
					if ok {
						rs = append(rs, r)
					}
				}
			}
		}
		if len(rs) == 0 {
			fmt.Fprintf(w, "| %s | not run | not run | - |\n", g.text)
			continue
		}
		pooled, paired := summary(rs, g, false), summary(rs, g, true)
		met := func(ok func(ratio) bool) string {
			for _, r := range rs {
				if !ok(r) {
					return "no"
				}
			}
			return "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s, %s |\n", g.text, pooled, paired,
			met(func(r ratio) bool { return r.pooledOK }), met(func(r ratio) bool { return r.pairOK }))
	}
	return nil
}

// ratio computes a goal's point: rmago's median over the fastest anchor's,
// pooled and per round.
func (g *goal) ratio(runs rounds, mode string, n, b int) (ratio, bool) {
	mine := runs[point{g.rmago, g.bench, mode, n, b}]
	if len(mine) == 0 {
		return ratio{}, false
	}
	// The anchor: per round, the fastest MPI that ran it.
	best := func(round int, pooled bool) (float64, bool) {
		v, found := 0.0, false
		for _, sys := range g.mpi {
			reps := runs[point{sys, g.bench, mode, n, b}]
			var s []float64
			if pooled {
				for _, x := range reps {
					s = append(s, x...)
				}
			} else {
				s = reps[round]
			}
			if len(s) == 0 {
				continue
			}
			m := median(slices.Clone(s))
			if !found || g.better(m, v) {
				v, found = m, true
			}
		}
		return v, found
	}
	var all []float64
	var per []float64
	for round, s := range mine {
		all = append(all, s...)
		if a, ok := best(round, false); ok && len(s) > 0 {
			per = append(per, median(slices.Clone(s))/a)
		}
	}
	anchor, ok := best(0, true)
	if !ok || len(per) == 0 {
		return ratio{}, false
	}
	r := ratio{label: pointLabel(g, mode, n, b), pooled: median(all) / anchor, paired: median(per)}
	r.pooledOK, r.pairOK = g.meets(r.pooled), g.meets(r.paired)
	return r, true
}

// better reports whether a is faster than b.
func (g *goal) better(a, b float64) bool {
	if g.higher {
		return a > b
	}
	return a < b
}

func (g *goal) meets(r float64) bool {
	if g.higher {
		return r >= g.limit
	}
	return r <= g.limit
}

// pointLabel names a point within its goal by what varies there.
func pointLabel(g *goal, mode string, n, b int) string {
	var parts []string
	if len(g.modes) > 1 {
		parts = append(parts, mode)
	}
	if len(g.ranks) > 1 {
		parts = append(parts, "N = "+strconv.Itoa(n))
	}
	if len(g.bytes) > 1 {
		parts = append(parts, bytesLabel(b))
	}
	return strings.Join(parts, " ")
}

// bytesLabel writes a message size as 8 B, 64 KiB or 8 MiB.
func bytesLabel(b int) string {
	l := sizeLabel(int64(b))
	if u := l[len(l)-1]; u == 'K' || u == 'M' || u == 'G' {
		return l[:len(l)-1] + " " + string(u) + "iB"
	}
	return l + " B"
}

// summary writes a goal's points one way: each with its ratio when they
// are few, else the range and the points that miss.
func summary(rs []ratio, g goal, paired bool) string {
	val := func(r ratio) float64 {
		if paired {
			return r.paired
		}
		return r.pooled
	}
	ok := func(r ratio) bool {
		if paired {
			return r.pairOK
		}
		return r.pooledOK
	}
	if len(rs) <= 4 {
		var parts []string
		for _, r := range rs {
			parts = append(parts, strings.TrimSpace(r.label+" "+fmt.Sprintf("%.2f", val(r))))
		}
		return strings.Join(parts, ", ")
	}
	vals := make([]float64, len(rs))
	var miss []string
	for i, r := range rs {
		vals[i] = val(r)
		if !ok(r) {
			miss = append(miss, fmt.Sprintf("%s %.2f", r.label, val(r)))
		}
	}
	s := fmt.Sprintf("%.2f-%.2f", slices.Min(vals), slices.Max(vals))
	if len(miss) > 0 {
		s += "; missing: " + strings.Join(miss, ", ")
	}
	return s
}
