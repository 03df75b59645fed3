// Command heat runs explicit steps of the 2-D heat equation (a Jacobi
// sweep of the 5-point stencil) on an n×n grid split into a 2-D block
// decomposition of the ranks (2×2 with 4 ranks), exchanging halos with
// Put under post-start-complete-wait with the four neighbours:
//
//	rmarun -n 4 ./heat [-n 1024] [-steps 200] [-cols pack|vector] [-reps 1] [-json]
//
// Halo rows are contiguous and go straight into the neighbours' grids.
// Halo columns are not: with -cols pack (the default) a rank packs each
// column into a contiguous buffer, puts it into a landing area of the
// neighbour's window in one transfer, and the neighbour unpacks it after
// Wait; with -cols vector it puts every element into its place, one Put
// each. The result is verified bit for bit against the sequential run on
// rank 0, which is also timed for the speed-up.
package main

import (
	"flag"
	"fmt"

	"github.com/rmago/rmago/apps/internal/cli"
	"github.com/rmago/rmago/apps/internal/report"
	"github.com/rmago/rmago/rma"
)

func main() {
	n := flag.Int("n", 1024, "grid size (n×n points, the fixed boundary included)")
	steps := flag.Int("steps", 200, "time steps")
	cols := flag.String("cols", "pack", "halo columns: pack (one put of a packed buffer) or vector (one put per element)")
	reps := flag.Int("reps", 1, "run this many times (the sequential version too); report the best times")
	asJSON := flag.Bool("json", false, "print the result as one JSON object")
	cli.Parse("rmarun -n 4 ./heat [-n 1024] [-steps 200] [-cols pack|vector] [-reps 1] [-json]")
	cfg := config{n: *n, steps: *steps, cols: *cols, reps: *reps}
	report.Run("heat", *asJSON, func(w *rma.World) (*report.Result, string, error) {
		o, err := run(w, cfg)
		if err != nil {
			return nil, "", err
		}
		r := report.New(w, "heat", "pscw-"+cfg.cols)
		r.N, r.Size = cfg.n, fmt.Sprintf("%d×%d grid", cfg.n, cfg.n)
		r.Iterations, r.IterUnit = cfg.steps, "time steps"
		r.Verified = o.verified
		r.Finish(o.elapsed, o.seq)
		return r, o.why, nil
	})
}
