// Package wait polls a condition, for a rank that waits for a flag a peer
// sets in its window (rma has no call that blocks until local memory
// changes).
//
// Until polls a few times, yielding to the Go scheduler in between, then
// sleeps a microsecond between polls. Spinning longer is worse, not
// better: rmarun gives each rank its share of the cores (GOMAXPROCS 1 with
// 2 ranks on 2 cores), and a goroutine that only yields keeps that one
// processor from ever polling the network, so the soft provider's
// goroutine that would read the peer's flag off its socket does not run
// (measured: the SOR lock variant took 2.2 ms an iteration that way, 0.6
// ms with sleeps). While this goroutine sleeps the idle processor blocks
// in the network poller, which wakes as soon as data arrives on a socket
// (or when the timer fires: a 1 µs sleep with nothing arriving takes about
// a third of a millisecond here), so a short sleep is in effect a wait for
// the fabric.
package wait

import (
	"errors"
	"os"
	"runtime"
	"time"
)

// ErrTimeout is returned by Until when the condition did not hold in time.
var ErrTimeout = errors.New("wait: timed out")

// spins is how many polls Until makes, yielding, before it sleeps.
const spins = 16

// Until calls cond until it returns true, or fails with ErrTimeout after
// timeout (0: no limit).
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

// Timeout is the job's bound on blocking waits: RMAGO_TIMEOUT (a Go
// duration, as rma uses it), else 2 minutes.
func Timeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("RMAGO_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Minute
}
