// Package wait polls a condition, for a rank that waits for a flag a peer
// sets in its window (rma has no call that blocks until local memory
// changes).
//
// Sleeping is the wrong tool for short waits here: Go's timers stretch a
// sleep of a few microseconds to a third of a millisecond or more on this
// kind of virtual machine, and anything over ~20 µs to about a
// millisecond, far longer than a soft-provider round trip (~50 µs). So
// Until polls without sleeping for the first couple of milliseconds,
// yielding the processor between polls: to the Go scheduler
// (runtime.Gosched, so this rank's own fabric goroutines run) and to the
// operating system (sched_yield, so that when ranks outnumber cores the
// rank that will set the flag gets the core). Only a longer wait falls back
// to sleeping.
package wait

import (
	"errors"
	"os"
	"runtime"
	"time"
)

// ErrTimeout is returned by Until when the condition did not hold in time.
var ErrTimeout = errors.New("wait: timed out")

// spinFor is how long Until polls before it starts sleeping.
const spinFor = 2 * time.Millisecond

// Until calls cond until it returns true, or fails with ErrTimeout after
// timeout (0: no limit).
func Until(cond func() bool, timeout time.Duration) error {
	if cond() {
		return nil
	}
	start := time.Now()
	for i := 1; ; i++ {
		if cond() {
			return nil
		}
		if i%64 != 0 {
			runtime.Gosched()
			continue
		}
		el := time.Since(start)
		if timeout > 0 && el > timeout {
			return ErrTimeout
		}
		if el < spinFor {
			yieldThread()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// Timeout is the job's bound on blocking waits: RMAGO_TIMEOUT (a Go
// duration, as rma uses it), else 2 minutes.
func Timeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("RMAGO_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Minute
}
