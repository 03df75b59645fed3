package shm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/futex"
	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/internal/spin"
	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/internal/wcring"
)

// cq is a completion queue: a local ring of completions (the send
// completions pushed at post, flushes) plus the inboxes of the queue pairs
// whose receives complete here, drained by Poll.
type cq struct {
	ctx    *device
	bell   *bell
	mu     sync.Mutex
	ring   wcring.Ring // q.mu guards it
	closed bool
	qps    atomic.Pointer[[]*qp]
	qpsMu  sync.Mutex
	// idle is when the Wait that found nothing began (Unix ns; 0: a
	// completion came since): a Wait that follows one that timed out,
	// with nothing polled between (a mixed job's slices), spins only
	// what is left of the first one's spin time, so a blocked rank sleeps.
	idle atomic.Int64
	// woken: Wake was called and no Wait has returned since.
	woken atomic.Bool
}

// pureSpin is how long Wait polls without giving up the core; after it,
// until the context's spin time ends, it yields the core between polls.
const pureSpin = 500 * time.Nanosecond

// loadsPerCheck is how many times Wait looks at the bell and the inboxes
// between looks at the clock and polls: a local completion rings the bell
// and a peer's publishes a slot, so while neither changed Poll would find
// nothing, and reading them is all a spin needs.
const loadsPerCheck = 64

func (c *device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("%w: CQ depth %d", verbs.ErrInvalid, depth)
	}
	m, err := memfd.Alloc(bellBytes, "rmago-shm-cq")
	if err != nil {
		return nil, err
	}
	b := bellAt(unsafe.Pointer(unsafe.SliceData(m.Bytes())))
	b.mem = m
	q := &cq{ctx: c, bell: b, ring: wcring.New(depth)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		b.free()
		return nil, verbs.ErrClosed
	}
	c.cqs[q] = struct{}{}
	return q, nil
}

// push adds a completion and rings the bell. A full CQ is an overrun.
func (q *cq) push(wc verbs.WC) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.ring.Push(wc)
	q.mu.Unlock()
	q.bell.ding()
}

func (q *cq) attach(p *qp) {
	q.qpsMu.Lock()
	var old []*qp
	if o := q.qps.Load(); o != nil {
		old = *o
	}
	next := append(append([]*qp(nil), old...), p)
	q.qps.Store(&next)
	q.qpsMu.Unlock()
}

// detach stops draining p's inbox; once it returns no Poll touches it.
func (q *cq) detach(p *qp) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.qpsMu.Lock()
	if o := q.qps.Load(); o != nil {
		next := make([]*qp, 0, len(*o))
		for _, x := range *o {
			if x != p {
				next = append(next, x)
			}
		}
		q.qps.Store(&next)
	}
	q.qpsMu.Unlock()
}

func (q *cq) Poll(wc []verbs.WC) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.ring.Err(); err != nil {
		return 0, err
	}
	if q.closed {
		return 0, verbs.ErrClosed
	}
	k := q.ring.Pop(wc)
	if k < len(wc) {
		if p := q.qps.Load(); p != nil {
			for _, x := range *p {
				if k += x.drain(wc[k:]); k == len(wc) {
					break
				}
			}
		}
	}
	if k > 0 {
		acquire()
		if q.idle.Load() != 0 {
			q.idle.Store(0)
		}
	}
	return k, nil
}

// Wait polls for the context's spin time, then sleeps on the bell until a
// completion or the deadline. Between polls it rereads the bell and the
// inboxes' next slots (pending), so a spin costs neither the lock nor the
// clock. The spin time counts from the first of consecutive Waits that
// found nothing (idle).
func (q *cq) Wait(wc []verbs.WC, deadline time.Time) (int, error) {
	v := q.bell.ring.Load()
	if n, err := q.Poll(wc); n > 0 || err != nil {
		return n, err // the common case on shm: requests complete at post
	}
	start := time.Now()
	if t := q.idle.Load(); t != 0 {
		start = time.Unix(0, t)
	} else {
		q.idle.Store(start.UnixNano())
	}
	spinEnd, pureEnd := start.Add(q.ctx.spin), start.Add(min(pureSpin, q.ctx.spin))
	y := spin.Yielder{Procs: q.ctx.procs}
	for i := 0; ; i++ {
		if i > 0 {
			v = q.bell.ring.Load()
			if n, err := q.Poll(wc); n > 0 || err != nil {
				q.woken.Store(false)
				return n, err
			}
		}
		if q.woken.Swap(false) {
			return 0, nil
		}
		if q.pending(v) {
			continue
		}
		now := time.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return 0, verbs.ErrTimeout
		}
		if now.Before(spinEnd) {
			// The completion comes from another process: past the pure
			// spin, give it the core if it may wait for one (more ranks
			// than cores: sched_yield, as Gosched yields only to this
			// process's goroutines); with a core per rank, let this
			// process's goroutines run but keep the core.
			switch {
			case now.Before(pureEnd):
			case i&7 == 7 || !q.ctx.shareCores:
				y.Yield(now)
			default:
				syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			}
			continue
		}
		var d time.Duration
		if !deadline.IsZero() {
			d = deadline.Sub(now)
		}
		q.bell.sleepers.Add(1)
		if q.bell.ring.Load() == v && !q.arrived() && !q.woken.Load() {
			futex.Wait(q.bell.ring, v, d)
		}
		q.bell.sleepers.Add(^uint32(0))
	}
}

// Wake ends a blocked Wait, or the next one (verbs.Waker): woken, seen by
// a spinning Wait (pending) or by one about to sleep; a sleeping one is
// woken through the bell. woken is set before sleepers is read, and a
// Wait counts itself in sleepers before its last look at woken: one of
// the two sees the other.
//
// It takes the queue's lock, so that it never touches the bell of a queue
// that Close has freed (a provider's goroutine may call it as the fabric
// closes).
func (q *cq) Wake() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.woken.Store(true)
	if q.bell.sleepers.Load() != 0 {
		q.bell.ring.Add(1)
		futex.Wake(q.bell.ring)
	}
}

// pending spins up to loadsPerCheck looks for a local completion (the
// bell moved from v) or a peer's entry in an inbox, and reports whether
// one came.
func (q *cq) pending(v uint32) bool {
	for range loadsPerCheck {
		if q.bell.ring.Load() != v || q.arrived() || q.woken.Load() {
			return true
		}
		spin.Pause()
	}
	return false
}

// arrived reports whether an inbox this queue drains holds an entry.
func (q *cq) arrived() bool {
	if p := q.qps.Load(); p != nil {
		for _, x := range *p {
			if x.in.arrived() {
				return true
			}
		}
	}
	return false
}

func (q *cq) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	q.bell.ding()
	q.bell.free()
	q.ctx.mu.Lock()
	delete(q.ctx.cqs, q)
	q.ctx.mu.Unlock()
	return nil
}
