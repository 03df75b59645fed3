package pscw

import "time"

// Polling schedule. Start and Wait poll this rank's own control words
// (the peers' atomics land there), never a remote one. A poll that finds
// nothing sleeps d before the next, d starting at pollMin and doubling up
// to pollMax. Sleeping, even briefly, rather than spinning with
// runtime.Gosched matters: a goroutine that only yields keeps its
// processor out of the network poller, so with the soft provider the very
// socket reads that would change the word can be starved. Go stretches
// short sleeps (to a few tens of microseconds below ~20 µs, to about a
// millisecond above that on an idle process), so the first polls come
// every few tens of microseconds and later ones about every millisecond.
// No jitter: the polled words are local, so pollers never contend.
const (
	pollMin = time.Microsecond
	pollMax = time.Millisecond
)

// backoff is one blocking call's polling schedule and deadline. It
// allocates nothing.
type backoff struct {
	d        time.Duration
	deadline time.Time // zero: no deadline
}

// reset starts a schedule bounded by timeout (0: unbounded).
func (b *backoff) reset(timeout time.Duration) {
	b.d = pollMin
	b.deadline = time.Time{}
	if timeout > 0 {
		b.deadline = time.Now().Add(timeout)
	}
}

// pause sleeps once and lengthens the next sleep. It returns false,
// without sleeping, once the deadline has passed; a sleep never extends
// past it.
func (b *backoff) pause() bool {
	w := b.d
	if !b.deadline.IsZero() {
		left := time.Until(b.deadline)
		if left <= 0 {
			return false
		}
		w = min(w, left)
	}
	time.Sleep(w)
	b.d = min(2*b.d, pollMax)
	return true
}
