// Command histogram builds a histogram whose bins are spread over all
// ranks (in blocks): every rank scatters its updates into the bins of
// every rank with Accumulate(Sum) under LockAll, which the target's NIC
// applies atomically (a fetch-and-add per update, posted without waiting;
// UnlockAll completes them). Every bin count is checked exactly.
//
//	rmarun -n 4 ./histogram [-bins 4096] [-updates 200000] [-batch] [-json]
//
// A quarter of the updates hit the 16 hottest bins, which every rank
// updates at once. -batch counts locally first and sends one Accumulate of
// a whole block of bins per rank instead (the fast way, for comparison).
package main

import (
	"flag"
	"fmt"

	"github.com/rmago/rmago/apps/internal/cli"
	"github.com/rmago/rmago/apps/internal/report"
	"github.com/rmago/rmago/rma"
)

func main() {
	bins := flag.Int("bins", 4096, "number of bins, spread over the ranks")
	updates := flag.Int("updates", 200000, "updates per rank")
	batch := flag.Bool("batch", false, "count locally, then one Accumulate per rank")
	seed := flag.Uint64("seed", 1, "random seed")
	asJSON := flag.Bool("json", false, "print the result as one JSON object")
	cli.Parse("rmarun -n 4 ./histogram [-bins 4096] [-updates 200000] [-batch] [-json]")
	cfg := config{bins: *bins, updates: *updates, batch: *batch, seed: *seed}
	report.Run("histogram", *asJSON, func(w *rma.World) (*report.Result, string, error) {
		o, err := run(w, cfg)
		if err != nil {
			return nil, "", err
		}
		variant := "scatter"
		if cfg.batch {
			variant = "batch"
		}
		total := float64(cfg.updates) * float64(w.Size())
		r := report.New(w, "histogram", variant)
		r.N, r.Size = cfg.bins, fmt.Sprintf("%d bins", cfg.bins)
		r.Iterations, r.IterUnit = cfg.updates, "updates per rank"
		r.NoPerIter = true // the ranks' updates run concurrently
		r.Verified = o.verified
		r.Extra = map[string]float64{"updates/s": total / o.elapsed.Seconds()}
		r.Finish(o.elapsed, o.seq)
		return r, o.why, nil
	})
}
