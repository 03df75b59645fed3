package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoalsPooledAndPerRound: three rounds in which the machine's speed
// moved both systems, rmago twice faster and once slower: the pooled
// medians' ratio and the median of the rounds' ratios differ as they
// must, and a goal no file measures says so.
func TestGoalsPooledAndPerRound(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw")
	if err := os.Mkdir(raw, 0o755); err != nil {
		t.Fatal(err)
	}
	rmago := []float64{10, 40, 45}
	ompi := []float64{20, 100, 25}
	for i := range rmago {
		r := Result{Bench: "oneone", Sync: "fence3", Window: "allocate", Ranks: 2, Elements: 1, Bytes: 8, Metric: MetricRTT, Iters: 10, Verified: true}
		r.summarize([]float64{rmago[i]})
		rep := Report{Meta: Meta{System: "rmago soft", Library: "rmago", Ranks: 2}, Results: []Result{r}}
		if err := writeJSON(filepath.Join(raw, fmt.Sprintf("rmago-soft.oneone.fence3.n2.r%d.json", i+1)), &rep); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("Open MPI v4.1.4,oneone,fence3,2,1,8,10,1,ok,%g\n", ompi[i])
		if err := os.WriteFile(filepath.Join(raw, fmt.Sprintf("ompi-tcp.oneone.fence3.n2.r%d.csv", i+1)), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := loadRounds(raw)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := writeGoals(&out, runs); err != nil {
		t.Fatal(err)
	}
	var soft8, shm string
	for _, l := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "| soft 8 B"):
			soft8 = l
		case strings.HasPrefix(l, "| shm one-to-many"):
			shm = l
		}
	}
	// Pooled: 40 / 25; per round: 0.5, 0.4, 1.8.
	if want := "| fence3 1.60 | fence3 0.50 | no, yes |"; !strings.HasSuffix(soft8, want) {
		t.Errorf("soft 8 B goal: %q, want it to end %q", soft8, want)
	}
	if !strings.Contains(shm, "not run") {
		t.Errorf("a goal without results: %q", shm)
	}
}
