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

// TestSequential checks the solver: heat flows in from the hot edge and
// no value leaves [0, 100].
func TestSequential(t *testing.T) {
	n := 20
	g := make([]float64, n*n)
	for i := range n {
		for j := range n {
			g[i*n+j] = initial(n, i, j)
		}
	}
	sequential(config{n: n, steps: 51}, g)
	if g[1*n+n/2] <= 0 || g[(n-2)*n+n/2] <= 0 {
		t.Fatalf("no heat reached the interior: %v, %v", g[1*n+n/2], g[(n-2)*n+n/2])
	}
	for _, v := range g {
		if v < 0 || v > 100 {
			t.Fatalf("value %v out of range", v)
		}
	}
}

// TestBlocks runs the app in-process on 1×1, 2×1, 3×1 and 2×2 rank
// grids, sizes not divisible by the grid, and both column methods.
func TestBlocks(t *testing.T) {
	for _, cols := range []string{"pack", "vector"} {
		for _, c := range []struct{ ranks, n, steps int }{{1, 8, 5}, {2, 13, 9}, {3, 10, 6}, {4, 4, 3}, {4, 23, 12}} {
			t.Run(fmt.Sprintf("%s/%dranks/n%d", cols, c.ranks, c.n), func(t *testing.T) {
				rmatest.Run(t, c.ranks, func(w *rma.World) error {
					o, err := run(w, config{n: c.n, steps: c.steps, cols: cols, reps: 1 + c.ranks%2})
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
	apptest.Run(t, 4, "-n", "65", "-steps", "20")
	apptest.Run(t, 2, "-n", "30", "-steps", "7", "-cols", "vector")
}
