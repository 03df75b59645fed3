// Package wcring is the completion ring the software providers (soft, shm)
// share: a first-in first-out queue of work completions that starts small,
// grows by doubling up to the depth its completion queue was created with,
// and, once full, drops what comes and records an overrun, which the next
// poll reports, as a NIC's completion queue does. A queue sized for every
// peer a job might talk to grows only as completions actually pile up, so
// its memory follows the peers in use.
//
// A Ring is not safe for concurrent use: its completion queue's mutex
// guards it.
package wcring

import (
	"fmt"

	"github.com/rmago/rmago/verbs"
)

// Initial is the entries a ring starts with (fewer if its depth is less).
const Initial = 1024

// Ring is a completion queue's entries.
type Ring struct {
	buf     []verbs.WC
	head, n int
	depth   int
	overrun bool
}

// New returns an empty ring that holds up to depth completions.
func New(depth int) Ring {
	return Ring{buf: make([]verbs.WC, min(depth, Initial)), depth: depth}
}

// Push adds wc at the tail, growing the ring if it is full and below its
// depth; a ring full at its depth drops wc and records the overrun.
func (r *Ring) Push(wc verbs.WC) {
	if r.n == len(r.buf) && len(r.buf) < r.depth {
		r.grow()
	}
	if r.n == len(r.buf) {
		r.overrun = true
		return
	}
	r.buf[(r.head+r.n)%len(r.buf)] = wc
	r.n++
}

// grow doubles the ring, up to its depth.
func (r *Ring) grow() {
	buf := make([]verbs.WC, min(2*len(r.buf), r.depth))
	for i := range r.n {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

// Pop moves up to len(dst) completions, oldest first, into dst and
// returns how many it moved.
func (r *Ring) Pop(dst []verbs.WC) int {
	k := 0
	for k < len(dst) && r.n > 0 {
		dst[k] = r.buf[r.head]
		r.head = (r.head + 1) % len(r.buf)
		r.n--
		k++
	}
	return k
}

// Len is the number of completions in the ring.
func (r *Ring) Len() int { return r.n }

// Err reports an overrun (wrapping verbs.ErrQueueFull), for every poll
// after it: completions were lost, and the queue cannot be trusted again.
func (r *Ring) Err() error {
	if r.overrun {
		return fmt.Errorf("%w: completion queue overrun", verbs.ErrQueueFull)
	}
	return nil
}
