package transport

import (
	"errors"
	"math/bits"
	"time"

	"github.com/rmago/rmago/verbs"
)

// Driving several completion queues (a mixed job: contexts.go) without a
// goroutine per queue and without burning a core: a waiter polls every
// queue, then blocks on one for a short slice, polling the others between
// slices; the slice doubles from mixedSlice to mixedSliceMax while nothing
// arrives. It blocks on the context that serves the ranks it waits for
// (the rank of a request, or every rank a notification wait expects) when
// they share one, else on each in turn. Each provider's Wait spins a
// little before it sleeps (shm on its futex, soft on its channel), so a
// slice costs a short spin and then sleeps. With one context the waiter
// simply blocks in its Wait.

const (
	mixedSlice    = 50 * time.Microsecond
	mixedSliceMax = time.Millisecond
)

// pollLocked polls every context's completion queue once without
// blocking and dispatches what it finds; f.mu held, nobody polling. It
// reports whether anything arrived.
func (f *Fabric) pollLocked() (bool, error) {
	got := false
	for _, c := range f.ctxs {
		n, err := c.cq.Poll(c.wcs)
		if err != nil {
			return got, err
		}
		if n > 0 {
			f.dispatch(c, c.wcs[:n])
			got = true
		}
	}
	return got, nil
}

// waitMask is the set of contexts (bit i: f.ctxs[i]) serving the ranks a
// wait is for: rank, or (rank < 0) those from lists; 0 when unknown.
// f.mu held. It allocates nothing.
func (f *Fabric) waitMask(rank int, from func(yield func(int) bool)) uint8 {
	switch {
	case !f.multi:
		return 1
	case rank >= 0 && rank < f.size:
		return 1 << f.via[rank]
	case from == nil:
		return 0
	}
	f.scanMask = 0
	from(f.maskFn)
	return f.scanMask
}

// addMask is waitMask's yield function; f.mu held.
func (f *Fabric) addMask(r int) bool {
	f.scanMask |= 1 << f.via[r]
	return true
}

// waitCQs blocks until some context has completions (left in its wcs[:got]
// for the caller to dispatch under f.mu) or end passes (ErrTimeout). mask
// is waitMask's. The caller is the poller (f.polling) and does not hold
// f.mu.
func (f *Fabric) waitCQs(end time.Time, mask uint8) error {
	if !f.multi {
		c := f.ctxs[0]
		n, err := c.cq.Wait(c.wcs, end)
		c.got = n
		return err
	}
	pref := -1 // block on each context in turn
	if mask != 0 && mask&(mask-1) == 0 {
		pref = bits.TrailingZeros8(mask)
	}
	slice := mixedSlice
	for i := 0; ; i++ {
		got := false
		for _, c := range f.ctxs {
			n, err := c.cq.Poll(c.wcs)
			c.got = n
			if err != nil {
				return err
			}
			got = got || n > 0
		}
		if got {
			return nil
		}
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return verbs.ErrTimeout
		}
		c := f.ctxs[i%len(f.ctxs)]
		if pref >= 0 {
			c = f.ctxs[pref]
		}
		dl := now.Add(slice)
		if !end.IsZero() && end.Before(dl) {
			dl = end
		}
		n, err := c.cq.Wait(c.wcs, dl)
		if n > 0 {
			c.got = n
			return nil
		}
		if err != nil && !errors.Is(err, verbs.ErrTimeout) {
			return err
		}
		slice = min(2*slice, mixedSliceMax)
	}
}

// dispatchGot dispatches what waitCQs left in the contexts' wcs; f.mu held.
func (f *Fabric) dispatchGot() {
	for _, c := range f.ctxs {
		if c.got > 0 {
			f.dispatch(c, c.wcs[:c.got])
			c.got = 0
		}
	}
}
