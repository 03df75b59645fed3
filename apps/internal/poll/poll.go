// Package poll polls a condition on a rank's own memory: the SOR lock
// variant (apps/sor/lock.go) waits until two counters in its window, which
// its neighbours increment with remote atomics, reach a phase's count. For
// a condition on one element, rma's Window.AwaitLocal is the call to use:
// it drives the fabric while it waits. Until is a plain loop outside rma,
// so with the soft provider the neighbours' increments are applied by the
// provider's reader goroutine, not by the waiting one (with shm, by the
// neighbours themselves).
//
// Until checks the condition, yielding to the Go scheduler
// (runtime.Gosched) between the first 16 checks, then sleeps a microsecond
// between checks, looking at the clock every 64 of them for the timeout.
// It sleeps rather than only yielding because a goroutine that only yields
// keeps its processor busy: with one processor per rank (GOMAXPROCS 1,
// which rmarun gave 2 ranks on 2 cores when this was measured; it now
// gives cores/N + 1) the reader goroutine that applies the peer's
// increment never ran (the SOR lock variant took 2.2 ms an iteration that
// way, 0.6 ms with sleeps). While this goroutine sleeps, an idle processor
// blocks in the network poller, which wakes as soon as data arrives on a
// socket (or when the timer fires: a 1 µs sleep with nothing arriving
// takes about a third of a millisecond here), so a short sleep is in
// effect a wait for the fabric.
package poll

import (
	"errors"
	"runtime"
	"time"
)

// ErrTimeout is returned by Until when the condition did not hold in time.
var ErrTimeout = errors.New("poll: timed out")

// spins is how many polls Until makes, yielding, before it sleeps.
const spins = 16

// Until calls cond until it returns true, or fails with ErrTimeout once
// timeout (0: no limit) has passed since it started sleeping between
// checks.
func Until(cond func() bool, timeout time.Duration) error {
	var start time.Time
	for i := 0; ; i++ {
		if cond() {
			return nil
		}
		if i < spins {
			runtime.Gosched()
			continue
		}
		if i == spins {
			start = time.Now()
		} else if timeout > 0 && i%64 == 0 && time.Since(start) > timeout {
			return ErrTimeout
		}
		time.Sleep(time.Microsecond)
	}
}
