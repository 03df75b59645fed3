package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/rmago/rmago/apps/internal/apptest"
	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

func TestSequential(t *testing.T) {
	for _, n := range []int{1, 5, 33, 70} {
		a := make([]float64, n*n)
		b := make([]float64, n*n)
		for i := range a {
			a[i] = float64(i)
		}
		transposeSeq(b, a, n)
		for i := range n {
			for j := range n {
				if b[i*n+j] != a[j*n+i] {
					t.Fatalf("n %d: b[%d][%d] = %v", n, i, j, b[i*n+j])
				}
			}
		}
	}
}

// TestModes runs both modes in-process, with sizes not divisible by the
// ranks (blocks of unequal height) and one-row blocks.
func TestModes(t *testing.T) {
	for _, mode := range []string{"blocks", "rows"} {
		for _, c := range []struct{ ranks, n int }{{1, 7}, {2, 10}, {3, 31}, {4, 4}, {4, 67}} {
			t.Run(fmt.Sprintf("%s/%dranks/n%d", mode, c.ranks, c.n), func(t *testing.T) {
				rmatest.Run(t, c.ranks, func(w *rma.World) error {
					o, err := run(w, config{n: c.n, reps: 3, mode: mode})
					if err == nil && !o.verified {
						err = fmt.Errorf("not verified: %s", o.why)
					}
					return err
				})
			})
		}
	}
}

func TestProcesses(t *testing.T) {
	apptest.Run(t, 3, "-n", "101", "-reps", "2")
	apptest.Run(t, 4, "-n", "50", "-reps", "2", "-mode", "rows")
}
