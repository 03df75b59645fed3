package transport

import (
	"errors"
	"math/bits"
	"time"

	"github.com/rmago/rmago/verbs"
)

// Driving several completion queues (a mixed job: contexts.go) without a
// goroutine per queue and without burning a core. When one context's CQ
// can be woken from outside (verbs.Waker: shm) and every other one tells
// when it adds a completion (verbs.CompletionNotifier: soft), that
// context is the blocker: the others' completions wake it, and a waiter
// polls every queue, then blocks in the blocker's Wait until something
// arrives anywhere or the deadline passes. A wait for ranks that one
// other context serves (a request's rank, or every rank a notification
// wait expects) first waits mixedSliceMax in that context's Wait, which
// spins on it: the blocker's wake-up is a system call later.
//
// Otherwise (ibv and shm: a NIC adds ibv's completions) a waiter polls
// every queue, then blocks on one for a short slice, polling the others
// between slices; the slice doubles from mixedSlice to mixedSliceMax
// while nothing arrives, on the context that serves the ranks it waits
// for when they share one, else on each in turn. Each provider's Wait
// spins a little before it sleeps (shm on its futex, soft on its
// channel), counting from the first of consecutive Waits that found
// nothing, so a blocked waiter sleeps, but it wakes every slice (a rank
// blocked in a mixed fence for a second: 9 % of a core with 1 ms slices,
// 0.2 % with a blocker). With one context the waiter simply blocks in its
// Wait.

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
		if got, err := f.pollEach(); got || err != nil {
			return err
		}
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			return verbs.ErrTimeout
		}
		c, dl := f.nextWait(i, pref, now, end, &slice)
		n, err := c.cq.Wait(c.wcs, dl)
		if n > 0 {
			c.got = n
			return nil
		}
		if err != nil && !errors.Is(err, verbs.ErrTimeout) {
			return err
		}
	}
}

// pollEach polls every context's completion queue once, leaving what it
// finds in the contexts' wcs[:got] for the caller to dispatch under f.mu,
// and reports whether anything arrived. The caller is the poller.
func (f *Fabric) pollEach() (bool, error) {
	got := false
	for _, c := range f.ctxs {
		n, err := c.cq.Poll(c.wcs)
		c.got = n
		if err != nil {
			return got, err
		}
		got = got || n > 0
	}
	return got, nil
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

// hookBlocker chooses the blocker of a mixed job, if its contexts allow
// one, and has the others' CQs wake it. Called once the CQs exist.
func (f *Fabric) hookBlocker() {
	if !f.multi {
		return
	}
	for _, b := range f.ctxs {
		w, ok := b.cq.(verbs.Waker)
		if !ok {
			continue
		}
		all := true
		for _, c := range f.ctxs {
			if _, ok := c.cq.(verbs.CompletionNotifier); c != b && !ok {
				all = false
			}
		}
		if !all {
			continue
		}
		for _, c := range f.ctxs {
			if c != b {
				c.cq.(verbs.CompletionNotifier).NotifyCompletions(w.Wake)
			}
		}
		f.blocker = b
		return
	}
}

// unhookBlocker stops the other CQs waking the blocker, before the CQs
// close.
func (f *Fabric) unhookBlocker() {
	if f.blocker == nil {
		return
	}
	for _, c := range f.ctxs {
		if c != f.blocker && c.cq != nil {
			c.cq.(verbs.CompletionNotifier).NotifyCompletions(nil)
		}
	}
}

// nextWait picks the context whose Wait the i-th look of a mixed job's
// waiter blocks in, and until when. With a blocker: the blocker until
// end, after a first slice in the context the wait is for (pref) when
// that is another one. Without: a slice, doubling up to mixedSliceMax
// from one call to the next, in pref's context, else in each in turn.
func (f *Fabric) nextWait(i, pref int, now, end time.Time, slice *time.Duration) (*pctx, time.Time) {
	var c *pctx
	var d time.Duration
	switch b := f.blocker; {
	case b != nil && (i > 0 || pref < 0 || f.ctxs[pref] == b):
		return b, end
	case b != nil:
		c, d = f.ctxs[pref], mixedSliceMax
	default:
		c = f.ctxs[i%len(f.ctxs)]
		if pref >= 0 {
			c = f.ctxs[pref]
		}
		d, *slice = *slice, min(2**slice, mixedSliceMax)
	}
	dl := now.Add(d)
	if !end.IsZero() && end.Before(dl) {
		dl = end
	}
	return c, dl
}
