package lock

import (
	"fmt"
	"testing"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/sync/control/controltest"
)

// rank is one rank of an in-process test job (sync/control/controltest).
type rank = controltest.Rank

// stageOff is where each rank's staging area starts in its data region.
const stageOff = controltest.StageOff

type jobOpts struct {
	timeout   time.Duration // fabric timeout; default 20s
	noBarrier bool          // skip the final barrier and checks (ranks die)
}

// runJob runs fn on n in-process ranks and checks at the end that every lock word is back to zero.
func runJob(t testing.TB, n int, opts jobOpts, fn func(r *rank) error) {
	t.Helper()
	controltest.Run(t, n, controltest.Options{Timeout: opts.timeout, NoBarrier: opts.noBarrier,
		Check: func(r *rank) error {
			if v := r.C.Load(control.Lock); v != 0 {
				return fmt.Errorf("lock word %#x at the end, want 0", v)
			}
			return nil
		}}, fn)
}

// hangGuard is how far past the fabric's timeout a failure with a dead
// peer may come before a test calls it a hang. It is deliberately loose:
// the tests assert that the error arrives (no hang), not how fast.
const hangGuard = 30 * time.Second
