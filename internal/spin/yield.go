package spin

import (
	"runtime"
	"time"
)

// GoschedGap is how long a spinning waiter keeps its processor between two
// yields to the process's other goroutines when the process has
// processors to spare (GOMAXPROCS above 1).
//
// runtime.Gosched puts the caller on the global run queue and, if a
// processor is idle, wakes an OS thread to look for work. In a rank that
// waits alone with GOMAXPROCS 2, every Gosched therefore started a thread
// that found nothing, and on a node with a core per rank that thread took
// its core from the peer the wait was for. shm ping-pongs (2 ranks on 2
// cores, unbound, 8 B), where a wait yielded every 2.5 µs: in runs of 60
// repetitions of 200 round trips, up to 13 repetitions had a mean round
// trip of 4-62 µs against 0.6-1.8 µs (stalls of milliseconds); pacing the
// yields left none above 2.7 µs in the same minutes. With GOMAXPROCS 1
// there is no idle processor to wake, and the goroutines a waiter must let
// run (those its own processor would run) get it at every yield, as
// before.
const GoschedGap = 100 * time.Microsecond

// Yielder paces one spinning wait's yields to the process's other
// goroutines. The zero value yields at every call; set Procs to
// runtime.GOMAXPROCS(0), read once (it takes the scheduler's lock).
type Yielder struct {
	Procs int
	last  time.Time
}

// Yield calls runtime.Gosched if the process has one processor, or if
// GoschedGap has passed since this wait's last yield (now is the caller's
// clock; the first call of a wait with processors to spare only starts
// the count). It reports whether it yielded.
func (y *Yielder) Yield(now time.Time) bool {
	if y.Procs > 1 {
		if y.last.IsZero() {
			y.last = now
			return false
		}
		if now.Sub(y.last) < GoschedGap {
			return false
		}
		y.last = now
	}
	runtime.Gosched()
	return true
}

// Alone reports whether the process has one processor: a spinning waiter
// that cannot read the clock yet yields then (runtime.Gosched), so that
// goroutines readied meanwhile run; with processors to spare they run on
// another one.
func (y *Yielder) Alone() bool { return y.Procs <= 1 }
