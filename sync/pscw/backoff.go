package pscw

import (
	"math/rand/v2"
	"runtime"
	"time"
)

// Polling schedule. Start and Wait poll this rank's own control words
// (the peers' atomics land there), never a remote one. A poll that finds
// nothing waits about d before the next, d starting at backoffMin and
// doubling up to backoffMax; each wait is drawn uniformly from [d/2, d].
// Waits shorter than spinBelow yield the processor (runtime.Gosched) until
// they have passed instead of sleeping: Go's timers turn a sleep of a few
// tens of microseconds into about a millisecond on an idle process. So the
// gap between polls grows from 1 µs to about 300 µs in the first ~0.4 ms
// of a wait, spent yielding (other goroutines run; an idle processor
// spins), and is about a millisecond of sleep after that.
const (
	backoffMin = time.Microsecond
	backoffMax = time.Millisecond
	spinBelow  = 300 * time.Microsecond
)

// backoff is one blocking call's retry schedule and deadline. It allocates
// nothing.
type backoff struct {
	d        time.Duration
	deadline time.Time // zero: no deadline
}

// reset starts a schedule bounded by timeout (0: unbounded).
func (b *backoff) reset(timeout time.Duration) {
	b.d = backoffMin
	b.deadline = time.Time{}
	if timeout > 0 {
		b.deadline = time.Now().Add(timeout)
	}
}

// pause waits once and lengthens the next wait. It returns false, without
// waiting, once the deadline has passed; a wait never extends past it.
func (b *backoff) pause() bool {
	w := b.d/2 + rand.N(b.d/2+1)
	now := time.Now()
	if !b.deadline.IsZero() {
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
	} else {
		time.Sleep(w)
	}
	b.d = min(2*b.d, backoffMax)
	return true
}
