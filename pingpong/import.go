package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// runImport converts (and merges) the CSV of the C ping-pong (ci/compare/pp.c) into a
// Report, so MPI results plot and compare beside rmago's. Each CSV line is
//
//	lib,bench,mode,ranks,n_doubles,bytes,iters,reps,ok,t1,...,tR
//
// with the repetitions' round-trip times in µs; lines starting with
// "lib," or "#" are skipped. JSON files that pingpong wrote are merged
// too: results of the same benchmark, mode, window, ranks and size from
// several files (the interleaved rounds of make compare) become one, with
// every file's repetitions. A line whose ok field is not "ok" (the C
// program saw wrong data) makes the import fail.
func runImport(args []string) error {
	fs := newFlagSet("import", "pingpong import -o out.json -system NAME [-provider tcp|shm] file.csv ...")
	out := fs.String("o", "", "output JSON `file`")
	system := fs.String("system", "", "system name on plots (default: the library, then the provider)")
	provider := fs.String("provider", "", "the transport the MPI used (tcp, shm)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return usagef("import: need -o FILE and at least one CSV file")
	}
	host, _ := os.Hostname()
	// ci/compare/pp.c settles as pingpong does by default.
	rep := Report{Meta: Meta{Provider: *provider, Host: host, CPUs: runtime.NumCPU(),
		Time: time.Now().Format(time.RFC3339), Command: os.Args, SettleMS: ms(defaultSettle)}}
	for _, path := range fs.Args() {
		var err error
		if strings.HasSuffix(path, ".json") {
			err = importJSON(path, &rep)
		} else {
			err = importCSV(path, &rep)
		}
		if err != nil {
			return err
		}
	}
	rep.Results = mergeResults(rep.Results)
	if len(rep.Results) == 0 {
		return fmt.Errorf("import: no results in %s", strings.Join(fs.Args(), ", "))
	}
	if *system != "" {
		rep.Meta.System = *system
	} else if rep.Meta.System == "" {
		rep.Meta.System = strings.TrimSpace(rep.Meta.Library + " " + *provider)
	}
	return writeJSON(*out, &rep)
}

func importCSV(path string, rep *Report) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") || strings.HasPrefix(text, "lib,") {
			continue
		}
		fields := strings.Split(text, ",")
		if len(fields) < 10 || (fields[1] != "oneone" && fields[1] != "onemany") {
			// mpirun's own messages (a job that hung at exit and was
			// killed prints a banner on stdout): not results.
			fmt.Fprintf(os.Stderr, "pingpong import: %s:%d: skipping %q\n", path, line, text)
			continue
		}
		var nums [5]int
		for i := range nums {
			if nums[i], err = strconv.Atoi(fields[3+i]); err != nil {
				return fmt.Errorf("%s:%d: field %d: %v", path, line, 4+i, err)
			}
		}
		if fields[8] != "ok" {
			return fmt.Errorf("%s:%d: DATA VERIFICATION FAILED in the C run (%s %s %s, %d bytes)", path, line, fields[0], fields[1], fields[2], nums[2])
		}
		var samples []float64
		for _, s := range fields[9:] {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return fmt.Errorf("%s:%d: %v", path, line, err)
			}
			samples = append(samples, v)
		}
		if len(samples) != nums[4] {
			return fmt.Errorf("%s:%d: %d repetitions, the line says %d", path, line, len(samples), nums[4])
		}
		rep.Meta.Library = fields[0]
		rep.Meta.Ranks = max(rep.Meta.Ranks, nums[0])
		r := Result{Bench: fields[1], Sync: fields[2], Window: "allocate", Ranks: nums[0], Elements: nums[1],
			Bytes: nums[2], Metric: MetricRTT, Iters: nums[3], Verified: true}
		r.summarize(samples)
		rep.Results = append(rep.Results, r)
	}
	return sc.Err()
}

// importJSON adds a pingpong JSON file's results; the first file's
// metadata is kept.
func importJSON(path string, rep *Report) error {
	r, err := readJSON(path)
	if err != nil {
		return err
	}
	for _, res := range r.Results {
		if !res.Verified {
			return fmt.Errorf("%s: %s %s, %d bytes: data not verified", path, res.Bench, res.Sync, res.Bytes)
		}
	}
	if rep.Meta.Library == "" {
		keep := rep.Meta
		rep.Meta = r.Meta
		rep.Meta.Command = keep.Command
		if keep.Provider != "" {
			rep.Meta.Provider = keep.Provider
		}
	}
	rep.Meta.Ranks = max(rep.Meta.Ranks, r.Meta.Ranks)
	rep.Results = append(rep.Results, r.Results...)
	return nil
}

// mergeResults joins results of the same benchmark, mode, window, ranks
// and size, in first-seen order, pooling their repetitions.
func mergeResults(in []Result) []Result {
	type key struct {
		bench, syncMode, window string
		ranks, nbytes           int
	}
	idx := map[key]int{}
	var out []Result
	for _, r := range in {
		k := key{r.Bench, r.Sync, r.Window, r.Ranks, r.Bytes}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, r)
			continue
		}
		m := &out[i]
		samples := append(slices.Clone(m.Samples), r.Samples...)
		m.Iters = max(m.Iters, r.Iters)
		m.Verified = m.Verified && r.Verified
		m.summarize(samples)
	}
	return out
}
