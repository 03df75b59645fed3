// Command computing measures how long a rank's peers wait for what it
// sends when it computes, without calling rmago, right after its part of
// an exchange (docs/benchmarks.md, "What a computing rank held back").
// Each round starts at a barrier; rank 0 or 1 computes (a busy loop) for
// -compute after its part, and the other rank times its own part:
//
//	pscw     rank 0 Start, Put, Complete, computes; rank 1 times Post + Wait
//	lock     rank 1 polls its flag, then computes; rank 0 times an
//	         exclusive Lock, Put, Flush, the flag's Accumulate and Unlock
//	passive  rank 1 computes; rank 0 times 5 shared Lock, Put, Unlock to it,
//	         200 µs apart
//
// Usage: bin/rmarun -n 2 -provider soft bin/computing -mode pscw [-compute 5ms] [-rounds 40] [-all]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/rmago/rmago/rma"
)

func main() {
	mode := flag.String("mode", "pscw", "pscw, lock or passive")
	compute := flag.Duration("compute", 5*time.Millisecond, "how long the computing rank computes after its part")
	rounds := flag.Int("rounds", 40, "rounds")
	all := flag.Bool("all", false, "print every timed part, in order")
	flag.Parse()
	if err := run(*mode, *compute, *rounds, *all); err != nil {
		fmt.Fprintln(os.Stderr, "computing:", err)
		os.Exit(1)
	}
}

func run(mode string, compute time.Duration, rounds int, all bool) (err error) {
	w, err := rma.Init()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	if w.Size() != 2 {
		return fmt.Errorf("runs with 2 ranks, not %d", w.Size())
	}
	win, err := rma.Allocate[float64](w, 16)
	if err != nil {
		return err
	}
	const flag = 8
	var times []time.Duration
	for r := 1; r <= rounds && err == nil; r++ {
		if err = w.Barrier(); err != nil {
			break
		}
		start := time.Now()
		timed := false
		switch {
		case mode == "pscw" && w.Rank() == 0:
			err = errors.Join(win.Start([]int{1}, 0), win.Put([]float64{float64(r)}, 1, 0), win.Complete())
			busy(compute)
		case mode == "pscw":
			err, timed = errors.Join(win.Post([]int{0}, 0), win.Wait()), true
		case mode == "lock" && w.Rank() == 0:
			err = errors.Join(win.Lock(1, rma.Exclusive, 0), win.Put([]float64{1}, 1, 0), win.Flush(1),
				win.Accumulate([]float64{float64(r)}, 1, flag, rma.Replace), win.Unlock(1))
			timed = true
		case mode == "lock":
			err = win.AwaitLocal(flag, func(v float64) bool { return v == float64(r) })
			busy(compute)
		case mode == "passive" && w.Rank() == 0:
			time.Sleep(50 * time.Microsecond)
			for range 5 {
				t := time.Now()
				if err = errors.Join(win.Lock(1, rma.Shared, 0), win.Put([]float64{1}, 1, 0), win.Unlock(1)); err != nil {
					break
				}
				times = append(times, time.Since(t))
				time.Sleep(200 * time.Microsecond)
			}
		case mode == "passive":
			busy(compute)
		default:
			return fmt.Errorf("-mode %q: want pscw, lock or passive", mode)
		}
		if timed {
			times = append(times, time.Since(start))
		}
	}
	if err != nil || len(times) == 0 {
		return errors.Join(err, win.Free())
	}
	if all {
		fmt.Println(times)
	}
	sorted := slices.Sorted(slices.Values(times))
	fmt.Printf("rank %d, %s, %v computing: median %v, 90th percentile %v, max %v of %d\n", w.Rank(), mode, compute,
		sorted[len(sorted)/2], sorted[len(sorted)*9/10], sorted[len(sorted)-1], len(sorted))
	return win.Free()
}

// busy keeps the processor for d without calling rmago.
func busy(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}
