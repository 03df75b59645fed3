// Command lockmix measures passive-target locking at scale: every rank runs
// rounds of a mix of exclusive locks (incrementing a target's pair of
// counters one word at a time, with a flush in between), shared locks
// (reading a target's pair) and lock_all (reading every rank's pair), and
// checks that no reader ever sees a torn pair and that every pair ends at
// exactly the number of increments it received.
//
//	rmarun -n 32 ./lockmix [-rounds 200] [-hot] [-json] [-v]
//
// Round i of rank r is lock_all if (i+r)%3 == 0, exclusive if 1, shared if
// 2; its target is (r+i)%n for the exclusive lock and (r+7i+1)%n for the
// shared one; with -hot, every exclusive and shared lock targets rank 0.
// docs/reliability.md ("Lock scaling") records its figures.
package main

import (
	"flag"
	"fmt"

	"github.com/rmago/rmago/apps/internal/cli"
	"github.com/rmago/rmago/apps/internal/report"
	"github.com/rmago/rmago/rma"
)

func main() {
	rounds := flag.Int("rounds", 200, "rounds per rank")
	asJSON := flag.Bool("json", false, "print the result as one JSON object")
	verbose := flag.Bool("v", false, "every rank prints its time waiting for locks (stderr)")
	hot := flag.Bool("hot", false, "every exclusive and shared lock targets rank 0")
	cli.Parse("rmarun -n 32 ./lockmix [-rounds 200] [-hot] [-json] [-v]")
	report.Run("lockmix", *asJSON, func(w *rma.World) (*report.Result, string, error) {
		cfg := config{rounds: *rounds, hot: *hot, verbose: *verbose}
		o, err := run(w, cfg)
		if err != nil {
			return nil, "", err
		}
		variant := "mixed"
		if cfg.hot {
			variant = "hot"
		}
		r := report.New(w, "lockmix", variant)
		r.N, r.Size = w.Size(), fmt.Sprintf("%d counter pairs (one per rank)", w.Size())
		r.Iterations, r.IterUnit = *rounds, "lock rounds per rank"
		r.Verified = o.verified
		r.Extra = map[string]float64{
			"locks/s":               float64(*rounds) * float64(w.Size()) / o.elapsed.Seconds(),
			"max_round_seconds":     o.maxRound.Seconds(),
			"max_lock_wait_seconds": o.lockWait.Seconds(),
		}
		r.Finish(o.elapsed, 0) // no sequential version
		return r, o.why, nil
	})
}
