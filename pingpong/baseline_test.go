package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The OSU figures make compare plots beside rmago's
// (ci/compare/baseline/osu-*.json) are the table in docs/baselines.md,
// value for value.
func TestBaselineJSONMatchesDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/baselines.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "| configuration | benchmark | 8 B | 1 KiB | 64 KiB | 1 MiB |")
	if !ok {
		t.Fatal("docs/baselines.md: no OSU table")
	}
	files := map[string]string{"Open MPI shm": "osu-ompi-shm.json", "Open MPI TCP": "osu-ompi-tcp.json", "MPICH TCP": "osu-mpich-tcp.json"}
	sizes := []int{8, 1024, 65536, 1048576}
	want := map[string]map[string]float64{} // file → "sync/bytes" → µs
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		file, ok := files[cells[0]]
		if !ok || len(cells) != 6 || !strings.HasPrefix(cells[1], "put ") {
			t.Fatalf("docs/baselines.md: unexpected OSU row %q", line)
		}
		if want[file] == nil {
			want[file] = map[string]float64{}
		}
		for i, b := range sizes {
			v, err := strconv.ParseFloat(cells[2+i], 64)
			if err != nil {
				t.Fatalf("docs/baselines.md: row %q: %v", line, err)
			}
			want[file][fmt.Sprintf("%s/%d", strings.TrimPrefix(cells[1], "put "), b)] = v
		}
	}
	if len(want) != len(files) {
		t.Fatalf("docs/baselines.md: OSU rows for %d configurations, want %d", len(want), len(files))
	}
	for file, vals := range want {
		rep, err := readJSON("../ci/compare/baseline/" + file)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, r := range rep.Results {
			if r.Bench != "put_latency" || r.Window != "allocate" || r.Ranks != 2 || r.Metric != MetricLatency || r.Mean != r.Median {
				t.Errorf("%s: unexpected result %+v", file, r)
			}
			got[fmt.Sprintf("%s/%d", r.Sync, r.Bytes)] = r.Mean
		}
		if fmt.Sprint(got) != fmt.Sprint(vals) {
			t.Errorf("%s: %v, docs/baselines.md says %v", file, got, vals)
		}
	}
}
