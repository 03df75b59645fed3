// Command transpose transposes a distributed n×n matrix of float64 (rows
// split in blocks over the ranks, B = Aᵀ distributed the same way) with Get
// under fence, and verifies every element:
//
//	rmarun -n 4 ./transpose [-n 2048] [-reps 10] [-mode blocks|rows] [-json]
//
// -mode blocks is the all-to-all step of a distributed FFT: every rank packs
// one contiguous piece per destination, and each rank gets one piece from
// every rank (size gets). -mode rows gets straight from A's rows, n small
// gets per rank. Rank 0 also times the sequential (tiled) transpose for the
// speed-up.
package main

import (
	"flag"
	"fmt"

	"github.com/rmago/rmago/apps/internal/cli"
	"github.com/rmago/rmago/apps/internal/report"
	"github.com/rmago/rmago/rma"
)

func main() {
	n := flag.Int("n", 2048, "matrix size (n×n float64)")
	reps := flag.Int("reps", 10, "transposes to time")
	mode := flag.String("mode", "blocks", "blocks (pack, one get per rank) or rows (one get per matrix row)")
	asJSON := flag.Bool("json", false, "print the result as one JSON object")
	cli.Parse("rmarun -n 4 ./transpose [-n 2048] [-reps 10] [-mode blocks|rows] [-json]")
	cfg := config{n: *n, reps: *reps, mode: *mode}
	report.Run("transpose", *asJSON, func(w *rma.World) (*report.Result, string, error) {
		o, err := run(w, cfg)
		if err != nil {
			return nil, "", err
		}
		r := report.New(w, "transpose", cfg.mode)
		r.N, r.Size = cfg.n, fmt.Sprintf("%d×%d matrix", cfg.n, cfg.n)
		r.Iterations, r.IterUnit = cfg.reps, "transposes"
		r.Verified = o.verified
		r.Extra = map[string]float64{"GB/s": 8 * float64(cfg.n) * float64(cfg.n) * float64(cfg.reps) / o.elapsed.Seconds() / 1e9}
		r.Finish(o.elapsed, o.seq)
		return r, o.why, nil
	})
}
