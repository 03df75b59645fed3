// Command startup measures what joining a job costs: the wall time of
// rma.Init (from the process's start) and of the first Barrier after it,
// which, with lazy connections, also connects every pair (a barrier
// notifies every rank). Rank 0 prints the slowest rank's of each:
//
//	startup: size=N init slowest T (rank R) first-barrier slowest T (rank R)
//
// Run it as bin/rmarun -n N bin/startup; RMAGO_CONNECT=eager (rmarun -x)
// measures connecting every pair in Init instead. docs/launch.md, "Start-up
// cost", records the figures.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/rmago/rmago/rma"
)

func main() {
	start := time.Now()
	w, err := rma.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "startup:", err)
		os.Exit(1)
	}
	initTime := time.Since(start)
	t0 := time.Now()
	if err := w.Barrier(); err != nil {
		fmt.Fprintf(os.Stderr, "startup: rank %d: %v\n", w.Rank(), err)
		os.Exit(1)
	}
	barTime := time.Since(t0)
	if err := report(w, initTime, barTime); err != nil {
		fmt.Fprintf(os.Stderr, "startup: rank %d: %v\n", w.Rank(), err)
		os.Exit(1)
	}
	if err := w.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "startup: rank %d: %v\n", w.Rank(), err)
		os.Exit(1)
	}
}

// report gathers every rank's two times in rank 0's window and prints the
// slowest of each.
func report(w *rma.World, initTime, barTime time.Duration) (err error) {
	me, size := w.Rank(), w.Size()
	win, err := rma.Allocate[int64](w, 2*size)
	if err != nil {
		return err
	}
	defer func() {
		if ferr := win.Free(); err == nil {
			err = ferr
		}
	}()
	if err := win.Fence(0); err != nil {
		return err
	}
	if err := win.Put([]int64{int64(initTime), int64(barTime)}, 0, 2*me); err != nil {
		return err
	}
	if err := win.Fence(rma.NoSucceed); err != nil {
		return err
	}
	if me != 0 {
		return nil
	}
	all := win.Local()
	var slowInit, slowBar int64
	initRank, barRank := 0, 0
	for r := range size {
		if all[2*r] > slowInit {
			slowInit, initRank = all[2*r], r
		}
		if all[2*r+1] > slowBar {
			slowBar, barRank = all[2*r+1], r
		}
	}
	fmt.Printf("startup: size=%d init slowest %v (rank %d) first-barrier slowest %v (rank %d)\n",
		size, time.Duration(slowInit).Round(10*time.Microsecond), initRank, time.Duration(slowBar).Round(10*time.Microsecond), barRank)
	return nil
}
