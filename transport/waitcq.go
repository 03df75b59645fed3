package transport

import (
	"errors"
	"time"

	"github.com/rmago/rmago/verbs"
)

// Driving several completion queues (a mixed job: contexts.go) without a
// goroutine per queue and without burning a core: a waiter polls every
// queue, then blocks on one for a short slice (the one that serves the
// rank it waits for, else each in turn), polling the others between
// slices; the slice doubles from mixedSlice to mixedSliceMax while nothing
// arrives. Each provider's Wait spins a little before it sleeps (shm on
// its futex, soft on its channel), so a slice costs a short spin and then
// sleeps. With one context the waiter simply blocks in its Wait.

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

// waitCQs blocks until some context has completions (left in its wcs[:got]
// for the caller to dispatch under f.mu) or end passes (ErrTimeout). rank
// is the rank the wait is for, or negative. The caller is the poller
// (f.polling) and does not hold f.mu.
func (f *Fabric) waitCQs(end time.Time, rank int) error {
	if !f.multi {
		c := f.ctxs[0]
		n, err := c.cq.Wait(c.wcs, end)
		c.got = n
		return err
	}
	pref := -1
	if rank >= 0 && rank < f.size {
		pref = int(f.via[rank])
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
