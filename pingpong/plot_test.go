package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"
)

// A system keeps its colour in every panel and every plot of the same
// files, even in a panel where a system before it has no line.
func TestPlotStyleBySystem(t *testing.T) {
	res := func(sync string, bytes int) Result {
		return Result{Bench: "oneone", Sync: sync, Window: "allocate", Ranks: 2, Bytes: bytes, Metric: MetricRTT, Mean: 10, Median: 10}
	}
	a := &Report{Meta: Meta{System: "A"}, Results: []Result{res("fence3", 8), res("fence3", 16)}}
	b := &Report{Meta: Meta{System: "B"}, Results: []Result{res("fence3", 8), res("fence3", 16), res("fence2", 8), res("fence2", 16)}}
	reps := []*Report{a, b}
	o := plotOpts{x: "bytes", stat: "mean", cols: 2, width: 14, height: 10}

	idx, names := styles(reps, o.panels(reps))
	if idx["A"] != 0 || idx["B"] != 1 || !slices.Equal(names, []string{"A", "B"}) {
		t.Errorf("both panels: styles %v, legend %v", idx, names)
	}

	// Only fence2, where A has no line: B is still drawn in its second
	// style, and the legend lists only B.
	o.syncMode = "fence2"
	panels := o.panels(reps)
	idx, names = styles(reps, panels)
	if idx["B"] != 1 || !slices.Equal(names, []string{"B"}) {
		t.Errorf("fence2 only: styles %v, legend %v", idx, names)
	}
	path := filepath.Join(t.TempDir(), "p.svg")
	if err := o.save(panels, idx, names, path, true); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "stroke:"+hex(plotutil.Color(1))) || strings.Contains(string(svg), "stroke:"+hex(plotutil.Color(0))) {
		t.Errorf("fence2 panel: B not drawn in %s alone (A's colour %s)", hex(plotutil.Color(1)), hex(plotutil.Color(0)))
	}
}

// hex writes c as vgsvg does: #RRGGBB.
func hex(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02X%02X%02X", r>>8, g>>8, b>>8)
}

// A table has columns only for the systems with results in it.
func TestTableSkipsAbsentSystems(t *testing.T) {
	res := func(sync string, mean float64) Result {
		return Result{Bench: "put_latency", Sync: sync, Window: "allocate", Ranks: 2, Bytes: 8, Metric: MetricLatency, Mean: mean}
	}
	a := &Report{Meta: Meta{System: "A"}, Results: []Result{res("fence", 30), res("flush", 20)}}
	b := &Report{Meta: Meta{System: "B"}, Results: []Result{res("fence", 15)}}
	var out strings.Builder
	if err := writeTables(&out, []*Report{a, b}, "", nil, "", ""); err != nil {
		t.Fatal(err)
	}
	want := "\n**put_latency fence, 2 ranks** (mean latency, µs; ratio = A / other)\n\n" +
		"| bytes | A | B | ratio vs B |\n|---|---|---|---|\n| 8 | 30.0 | 15.0 | 2.00 |\n" +
		"\n**put_latency flush, 2 ranks** (mean latency, µs)\n\n" +
		"| bytes | A |\n|---|---|\n| 8 | 20.0 |\n"
	if out.String() != want {
		t.Errorf("tables:\n%s\nwant:\n%s", out.String(), want)
	}
}
