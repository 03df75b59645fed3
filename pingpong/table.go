package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// runTable prints Markdown tables that set several systems' results side
// by side, with the ratio of the first system (or -base) to each other:
//
//	pingpong table [-base SYSTEM] [-bytes 8,1024,...] [-bench B] [-sync S] a.json b.json ...
//
// A ratio above 1 means the base system is slower (for times) or faster
// (for bandwidths: the ratio is still base/other).
func runTable(args []string) error {
	fs := newFlagSet("table", "pingpong table [-base SYSTEM] [-bytes 8,1024,...] [-bench B,...] [-sync S,...] a.json b.json ...")
	base := fs.String("base", "", "the system the ratios are taken of (default: the first file's)")
	sizes := fs.String("bytes", "8,64,1024,8192,65536,1048576,8388608", "the message sizes (bytes) to list, or all")
	bench := fs.String("bench", "", "only these benchmarks (comma-separated)")
	syncs := fs.String("sync", "", "only these synchronization modes (comma-separated)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("table: name one or more JSON files")
	}
	var reps []*Report
	for _, p := range fs.Args() {
		r, err := readJSON(p)
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	var want []int
	if *sizes != "all" {
		for _, f := range strings.Split(*sizes, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return usagef("-bytes: %v", err)
			}
			want = append(want, v)
		}
	}
	return writeTables(os.Stdout, reps, *base, want, *bench, *syncs)
}

func writeTables(w io.Writer, reps []*Report, base string, sizes []int, bench, syncs string) error {
	if base == "" {
		base = reps[0].Meta.System
	}
	keep := func(list, v string) bool { return list == "" || slices.Contains(strings.Split(list, ","), v) }
	type group struct {
		bench, syncMode, window string
		ranks                   int
		metric                  string
	}
	var groups []group
	var systems []string
	val := map[string]map[group]map[int]float64{} // system → group → bytes → mean
	for _, rep := range reps {
		sys := rep.Meta.System
		if !slices.Contains(systems, sys) {
			systems = append(systems, sys)
			val[sys] = map[group]map[int]float64{}
		}
		for _, r := range rep.Results {
			if !keep(bench, r.Bench) || !keep(syncs, r.Sync) {
				continue
			}
			g := group{r.Bench, r.Sync, r.Window, r.Ranks, r.Metric}
			if !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
			if val[sys][g] == nil {
				val[sys][g] = map[int]float64{}
			}
			val[sys][g][r.Bytes] = r.Mean
		}
	}
	if !slices.Contains(systems, base) {
		return fmt.Errorf("table: no system %q (have %s)", base, strings.Join(systems, ", "))
	}
	for _, g := range groups {
		// The other systems with results in this group: no columns of
		// dashes for a system that did not run this benchmark.
		others := slices.DeleteFunc(slices.Clone(systems), func(s string) bool { return s == base || len(val[s][g]) == 0 })
		unit := "mean round-trip time, µs"
		switch g.metric {
		case MetricLatency:
			unit = "mean latency, µs"
		case MetricBW:
			unit = "bandwidth, MB/s"
		}
		ratio := ""
		if len(others) > 0 {
			ratio = fmt.Sprintf("; ratio = %s / other", base)
		}
		fmt.Fprintf(w, "\n**%s %s, %d ranks** (%s%s)\n\n", g.bench, g.syncMode, g.ranks, unit, ratio)
		head := []string{"bytes", base}
		head = append(head, others...)
		for _, o := range others {
			head = append(head, "ratio vs "+o)
		}
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
		var rows []int
		for _, sys := range systems {
			for b := range val[sys][g] {
				if (sizes == nil || slices.Contains(sizes, b)) && !slices.Contains(rows, b) {
					rows = append(rows, b)
				}
			}
		}
		slices.Sort(rows)
		for _, b := range rows {
			cells := []string{sizeLabel(int64(b))}
			bv, bok := val[base][g][b]
			for _, sys := range append([]string{base}, others...) {
				cells = append(cells, num(val[sys][g], b))
			}
			for _, o := range others {
				ov, ook := val[o][g][b]
				if bok && ook && ov > 0 {
					cells = append(cells, fmt.Sprintf("%.2f", bv/ov))
				} else {
					cells = append(cells, "–")
				}
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
	}
	return nil
}

func num(m map[int]float64, b int) string {
	v, ok := m[b]
	if !ok {
		return "–"
	}
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
