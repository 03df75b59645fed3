// Package wait polls a condition with backoff: spin briefly (cheap when the
// peer answers within microseconds), then yield, then sleep, so that a
// rank waiting for a flag does not take the core from the rank that will
// set it when ranks outnumber cores.
package wait

import (
	"errors"
	"os"
	"runtime"
	"time"
)

// ErrTimeout is returned by Until when the condition did not hold in time.
var ErrTimeout = errors.New("wait: timed out")

// Until calls cond until it returns true, or fails with ErrTimeout after
// timeout (0: no limit).
func Until(cond func() bool, timeout time.Duration) error {
	var deadline time.Time
	for i := 0; ; i++ {
		if cond() {
			return nil
		}
		switch {
		case i < 64:
			// spin
		case i < 1024:
			runtime.Gosched()
		default:
			if deadline.IsZero() && timeout > 0 {
				deadline = time.Now().Add(timeout)
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				return ErrTimeout
			}
			time.Sleep(20 * time.Microsecond)
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
