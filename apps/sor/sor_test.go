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

// TestSequentialConverges checks the solver itself: the residual falls
// below the tolerance well before the iteration limit.
func TestSequentialConverges(t *testing.T) {
	p := problem{n: 34, iters: 1000, check: 1, tol: 1e-9, omega: optimalOmega(34)}
	g := make([]float64, p.n*p.n)
	initGrid(g, p.n)
	it, resid := sequential(p, g)
	if it >= p.iters || resid >= p.tol {
		t.Fatalf("%d iterations, residual %v", it, resid)
	}
	// Interior values of a harmonic function lie between the boundary's.
	for _, v := range g {
		if v < 0 || v > 1 {
			t.Fatalf("value %v outside [0, 1]", v)
		}
	}
	t.Logf("n %d: %d iterations, residual %v", p.n, it, resid)
}

// TestVariants runs every variant in-process and checks the result is
// bit-identical to the sequential run: several sizes and rank counts,
// stripes of unequal height (n not divisible by the ranks), one-row
// stripes, and stopping by convergence.
func TestVariants(t *testing.T) {
	cases := []struct {
		ranks int
		p     problem
		reps  int
	}{
		{1, problem{n: 9, iters: 7, check: 1}, 1},
		{2, problem{n: 16, iters: 12, check: 1}, 2},
		{3, problem{n: 17, iters: 10, check: 3}, 1},             // 6, 6, 5 rows
		{4, problem{n: 4, iters: 5, check: 2}, 1},               // one row each
		{4, problem{n: 30, iters: 400, check: 1, tol: 1e-5}, 1}, // stops by convergence; 8, 8, 7, 7 rows
		{3, problem{n: 23, iters: 24, check: 4, omega: 1.3}, 2}, // 8, 8, 7 rows
	}
	for _, v := range variantNames() {
		for _, c := range cases {
			c.p.omega = cmpOr(c.p.omega, optimalOmega(c.p.n))
			t.Run(fmt.Sprintf("%s/%dranks/n%d", v, c.ranks, c.p.n), func(t *testing.T) {
				rmatest.Run(t, c.ranks, func(w *rma.World) error {
					o, err := run(w, c.p, v, c.reps)
					if err != nil {
						return err
					}
					if !o.verified {
						return fmt.Errorf("not verified: %s", o.why)
					}
					if c.p.tol > 0 && (o.iters >= c.p.iters || o.resid >= c.p.tol) {
						return fmt.Errorf("did not converge: %d iterations, residual %v", o.iters, o.resid)
					}
					return nil
				})
			})
		}
	}
}

func cmpOr(a, b float64) float64 {
	if a != 0 {
		return a
	}
	return b
}

// TestProcesses runs the command under rmarun, one rank per process.
func TestProcesses(t *testing.T) {
	for _, c := range []struct {
		ranks   int
		variant string
	}{{2, "big"}, {3, "split"}, {4, "get"}, {3, "lock"}, {4, "pscw"}} {
		apptest.Run(t, c.ranks, "-variant", c.variant, "-n", "61", "-iters", "40", "-check", "5")
	}
}
