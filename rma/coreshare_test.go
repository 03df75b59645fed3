package rma_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestCoreShareRank is one rank's side of TestCoreShare: after Init, the
// rank runs with its node's share of the cores, min(NumCPU, NumCPU/n + 1)
// for n ranks on the node, whatever launched it (rmarun no longer sets
// GOMAXPROCS).
func TestCoreShareRank(t *testing.T) {
	if os.Getenv("RMAGO_TEST_CORESHARE") == "" {
		t.Skip("run by TestCoreShare")
	}
	w, err := rma.Init()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cpu := runtime.NumCPU()
	want := min(cpu, cpu/w.Size()+1)
	if got := runtime.GOMAXPROCS(0); got != want {
		t.Fatalf("rank %d of %d on %d cores: GOMAXPROCS %d, want %d", w.Rank(), w.Size(), cpu, got, want)
	}
	fmt.Println("CORESHARE-OK", w.Rank(), runtime.GOMAXPROCS(0))
}

func TestCoreShare(t *testing.T) {
	if testing.Short() || rmatest.InProcesses() {
		t.Skip("in -short mode, or already a rank")
	}
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set: the ranks keep it")
	}
	rmarun, suite := buildRanks(t)
	for _, n := range []int{1, runtime.NumCPU() + 1} {
		cmd := exec.Command(rmarun, "-n", strconv.Itoa(n), "-provider", "soft", "-timeout", "2m",
			suite, "-test.run", "^TestCoreShareRank$", "-test.v")
		cmd.Env = append(os.Environ(), "RMAGO_TEST_CORESHARE=1")
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Count(string(out), "CORESHARE-OK") != n {
			t.Fatalf("rmarun -n %d: %v\n%s", n, err, out)
		}
	}
}
