// Command hashtable builds a distributed hash table with open addressing
// (linear probing) whose slots are spread over all ranks, then looks every
// key up, all with one-sided operations under LockAll:
//
//	rmarun -n 4 ./hashtable [-keys 5000] [-slots 10000] [-json]
//
// An insert claims a slot with CompareAndSwap(empty → key) on the owner's
// NIC, probing on if another key holds it, and stops if its own key is
// already there; the value follows with a Put. A lookup Gets each probed
// slot's key (and then the value) with Flush. Consecutive ranks insert
// half of the same keys, in different orders, so ranks race for the same
// keys and slots. The run checks that every key is found with its value,
// that absent keys are not, that the table holds each key exactly once,
// and that exactly one insert of each key succeeded.
package main

import (
	"flag"
	"fmt"

	"github.com/rmago/rmago/apps/internal/cli"
	"github.com/rmago/rmago/apps/internal/report"
	"github.com/rmago/rmago/rma"
)

func main() {
	keys := flag.Int("keys", 5000, "keys each rank inserts (half shared with each neighbour rank)")
	slots := flag.Int("slots", 0, "slots per rank (0: 2×keys)")
	asJSON := flag.Bool("json", false, "print the result as one JSON object")
	cli.Parse("rmarun -n 4 ./hashtable [-keys 5000] [-slots 10000] [-json]")
	cfg := config{keys: *keys, slots: *slots}
	if cfg.slots == 0 {
		cfg.slots = 2 * cfg.keys
	}
	report.Run("hashtable", *asJSON, func(w *rma.World) (*report.Result, string, error) {
		o, err := run(w, cfg)
		if err != nil {
			return nil, "", err
		}
		ops := float64(cfg.keys * w.Size())
		r := report.New(w, "hashtable", "cas")
		r.N, r.Size = cfg.slots*w.Size(), fmt.Sprintf("%d slots", cfg.slots*w.Size())
		r.Iterations, r.IterUnit = cfg.keys, "keys inserted per rank"
		r.NoPerIter = true // the ranks' inserts run concurrently
		r.Verified = o.verified
		r.Extra = map[string]float64{
			"inserts/s":     ops / o.insert.Seconds(),
			"lookups/s":     ops * 1.25 / o.lookup.Seconds(),
			"distinct keys": float64(o.inserted),
		}
		r.Finish(o.insert+o.lookup, o.seq)
		return r, o.why, nil
	})
}
