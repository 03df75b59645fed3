// Command idlecpu measures the CPU a rank uses while it is blocked in a
// synchronization call: rank 0 waits in Fence, then in PSCW's Wait, while
// rank 1 sleeps for -hold before its matching call. It prints rank 0's
// process CPU time (user + system, getrusage, every thread of the
// process) over the wait's wall time. Run it under rmarun:
//
//	rmarun -n 2 -provider shm idlecpu -hold 1s
//
// With more than two ranks, every rank other than 1 waits, and each prints
// its own line.
package main

import (
	"flag"
	"fmt"
	"log"
	"syscall"
	"time"

	"github.com/rmago/rmago/rma"
)

func main() {
	hold := flag.Duration("hold", time.Second, "how long rank 1 keeps the others waiting")
	rounds := flag.Int("rounds", 3, "waits of each kind")
	flag.Parse()
	w, err := rma.Init()
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	win, err := rma.Allocate[int64](w, 8)
	if err != nil {
		log.Fatal(err)
	}
	me := w.Rank()
	others := make([]int, 0, w.Size())
	for r := range w.Size() {
		if r != 1 {
			others = append(others, r)
		}
	}
	for i := range *rounds {
		if err := win.Fence(rma.NoPrecede); err != nil { // line up
			log.Fatal(err)
		}
		// Fence.
		if me == 1 {
			time.Sleep(*hold)
		}
		c0, t0 := cpu(), time.Now()
		if err := win.Fence(0); err != nil {
			log.Fatal(err)
		}
		if me != 1 {
			report("fence", i, c0, t0)
		}
		if err := win.Fence(rma.NoSucceed); err != nil {
			log.Fatal(err)
		}
		// PSCW: the others expose to rank 1, which accesses them late.
		if me == 1 {
			time.Sleep(*hold)
			if err := win.Start(others, 0); err != nil {
				log.Fatal(err)
			}
			if err := win.Complete(); err != nil {
				log.Fatal(err)
			}
			continue
		}
		c0, t0 = cpu(), time.Now()
		if err := win.Post([]int{1}, 0); err != nil {
			log.Fatal(err)
		}
		if err := win.Wait(); err != nil {
			log.Fatal(err)
		}
		report("pscw-wait", i, c0, t0)
	}
	if err := win.Free(); err != nil {
		log.Fatal(err)
	}
}

func report(what string, round int, c0 time.Duration, t0 time.Time) {
	wall, used := time.Since(t0), cpu()-c0
	fmt.Printf("%s round %d: blocked %.3f s, CPU %.4f s = %.2f%% of a core\n", what, round, wall.Seconds(), used.Seconds(), 100*used.Seconds()/wall.Seconds())
}

// cpu is the process's user + system CPU time (getrusage, every thread;
// /proc/self/stat has the same in 10 ms ticks).
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
