// Command sor is red-black successive over-relaxation on an n×n grid split
// into row stripes, one per rank, in five variants of one-sided halo
// exchange (the application of section 5.2 of X. Shi, "Safe, Fast and
// Elegant Communication in Rust", Leiden University, 2024; docs/apps.md):
//
//	rmarun -n 4 ./sor [-variant big|split|lock|pscw|get] [-n 1024] [-iters 200] [-tol 0] [-check 1] [-reps 1] [-json]
//
// Each iteration relaxes the red points, then the black ones; before each
// half a rank sends its first row to rank-1 and its last row to rank+1.
// Every check iterations the largest change is reduced over the ranks
// (an allreduce built on RMA, apps/internal/coll) and the run stops when it
// is below tol. The result is then verified bit for bit against the
// sequential solver on rank 0, which is also timed for the speed-up.
// Rank 0 prints one line (or one JSON object with -json) ending in
// "verified"; a run whose result differs exits 1.
//
// Variants:
//
//	big    fence, one window over the whole stripe, puts from the window (zero copy)
//	split  fence, two windows created over the halo rows only (two fences a phase)
//	lock   exclusive lock + put + unlock, then an atomic notification flag the
//	       neighbour polls with LoadLocal: no collective call per phase
//	pscw   post/start/complete/wait with the two neighbours as the groups
//	get    fence, each rank gets its halos from the neighbours (two fences a phase)
package main

import (
	"flag"

	"github.com/rmago/rmago/apps/internal/cli"
	"github.com/rmago/rmago/apps/internal/report"
	"github.com/rmago/rmago/rma"
)

func main() {
	variant := flag.String("variant", "big", "halo exchange: big, split, lock, pscw or get")
	n := flag.Int("n", 1024, "grid size (n×n points, boundary included)")
	iters := flag.Int("iters", 200, "maximum number of iterations")
	tol := flag.Float64("tol", 0, "stop when an iteration changes no point by more than this (0: run all iterations)")
	check := flag.Int("check", 1, "reduce the residual every this many iterations")
	omega := flag.Float64("omega", 0, "over-relaxation factor (0: the optimum for n)")
	reps := flag.Int("reps", 1, "solve this many times (and the sequential version too); report the best times")
	asJSON := flag.Bool("json", false, "print the result as one JSON object")
	cli.Parse("rmarun -n 4 ./sor [-variant big|split|lock|pscw|get] [-n 1024] [-iters 200] [-tol 0] [-check 1] [-reps 1] [-json]")
	p := problem{n: *n, iters: *iters, check: *check, tol: *tol, omega: *omega}
	if p.omega == 0 && p.n > 2 {
		p.omega = optimalOmega(p.n)
	}

	report.Run("sor", *asJSON, func(w *rma.World) (*report.Result, string, error) {
		o, err := run(w, p, *variant, *reps)
		if err != nil {
			return nil, "", err
		}
		return result(w, p, *variant, o), o.why, nil
	})
}
