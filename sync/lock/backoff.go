package lock

import (
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/rmago/rmago/internal/spin"
)

// Backoff bounds. A failed attempt waits about d before the next, d starting
// at backoffMin and doubling up to backoffMax; each wait is drawn uniformly
// from [d/2, d] (jitter), so that ranks that collided once are unlikely to
// collide again in step. Waits shorter than spinBelow yield the processor
// (runtime.Gosched) until they have passed instead of sleeping; longer
// ones sleep in the kernel (spin.Sleep), not on Go's timers, which turn
// any sleep under a millisecond into about one (1.06 ms for 10-200 µs
// here, go1.26): a 64 µs backoff then lasted 1 ms, and an exclusive lock
// on a busy target was retried only every millisecond. On a crowded node
// (transport.Fabric.Crowded) they still sleep on Go's timers: there the
// longer sleep leaves the cores to the holder and the target.
const (
	backoffMin = time.Microsecond
	backoffMax = time.Millisecond
	spinBelow  = 50 * time.Microsecond
)

// backoff is one blocking call's retry schedule and deadline. It allocates
// nothing, and reads the clock only once it has to wait: an uncontended
// lock never does.
type backoff struct {
	d        time.Duration
	timeout  time.Duration // 0: no deadline
	deadline time.Time     // set at the first pause
	coarse   bool          // sleep on Go's timers (a crowded node)
}

// reset starts a schedule bounded by timeout (0: unbounded), counted from
// the first pause; coarse: its sleeps are Go's timer sleeps.
func (b *backoff) reset(timeout time.Duration, coarse bool) {
	b.d = backoffMin
	b.timeout = timeout
	b.deadline = time.Time{}
	b.coarse = coarse
}

// pause waits once and lengthens the next wait. It returns false, without
// waiting, once the deadline has passed; a wait never extends past it.
func (b *backoff) pause() bool {
	w := b.d/2 + rand.N(b.d/2+1)
	now := time.Now()
	if b.timeout > 0 {
		if b.deadline.IsZero() {
			b.deadline = now.Add(b.timeout)
		}
		left := b.deadline.Sub(now)
		if left <= 0 {
			return false
		}
		w = min(w, left)
	}
	if w < spinBelow {
		for end := now.Add(w); time.Now().Before(end); {
			runtime.Gosched()
		}
	} else if b.coarse {
		time.Sleep(w)
	} else {
		spin.Sleep(w)
	}
	b.d = min(2*b.d, backoffMax)
	return true
}
