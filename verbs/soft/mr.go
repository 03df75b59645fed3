package soft

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// region is a registered memory region. Its key serves as both lkey and
// rkey; the context's keytab.Table gives it out.
type region struct {
	pd     *pd
	base   unsafe.Pointer // first byte; keeps Go-heap memory alive
	addr   uint64         // uint64(uintptr(base))
	length uint64
	key    uint32
	access verbs.Access
	// inUse is held for reading by every responder access and for writing
	// by Dereg, so memory is never unmapped under an in-flight request.
	inUse sync.RWMutex
	dead  bool        // set by Dereg under inUse
	dying atomic.Bool // Dereg has begun: new accesses are refused
}

func (r *region) Addr() uint64         { return r.addr }
func (r *region) Len() int             { return int(r.length) }
func (r *region) LKey() uint32         { return r.key }
func (r *region) RKey() uint32         { return r.key }
func (r *region) Access() verbs.Access { return r.access }

func (r *region) Dereg() error {
	if r.dying.Swap(true) {
		return fmt.Errorf("%w: region already deregistered", verbs.ErrClosed)
	}
	r.lockIdle()
	r.dead = true
	r.inUse.Unlock()
	r.pd.ctx.regions.Remove(r.key)
	return nil
}

// lockIdle takes inUse for writing once nothing uses the region, in a
// bounded time: responder accesses end within the context's timeout (a
// payload the peer stopped sending fails its stream), and requests of this
// side whose responses the peer has not sent within the timeout fail their
// queue pair, which releases their regions. Without a timeout it waits as
// long as it takes.
func (r *region) lockIdle() {
	c := r.pd.ctx
	if c.timeout <= 0 {
		r.inUse.Lock()
		return
	}
	deadline := time.Now().Add(c.timeout)
	pause := time.Microsecond
	for !r.inUse.TryLock() {
		if time.Now().After(deadline) {
			c.failHolders(r)
			r.inUse.Lock()
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

// failHolders fails the queue pairs with requests outstanding on r for
// longer than the timeout.
func (c *device) failHolders(r *region) {
	c.mu.Lock()
	qps := make([]*qp, 0, len(c.qps))
	for _, q := range c.qps {
		qps = append(qps, q)
	}
	c.mu.Unlock()
	for _, q := range qps {
		if q.holds(r) {
			q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s did not answer within %v while the region at %#x was being deregistered",
				verbs.ErrTimeout, q.peer(), c.timeout, r.addr))
		}
	}
}

// holds reports whether a pending request of q keeps r (a read or atomic
// destination).
func (q *qp) holds(r *region) bool {
	if q.curReg.Load() == r {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := 0; i < q.pn; i++ {
		p := &q.pend[(q.phead+i)%len(q.pend)]
		for _, x := range p.reg[:p.nseg] {
			if x == r {
				return true
			}
		}
	}
	return false
}

// slice returns the bytes [addr, addr+n) if they lie inside the region.
func (r *region) slice(addr uint64, n uint64) ([]byte, bool) {
	if addr < r.addr || n > r.length || addr-r.addr > r.length-n {
		return nil, false
	}
	if n == 0 {
		return nil, true
	}
	return unsafe.Slice((*byte)(unsafe.Add(r.base, addr-r.addr)), n), true
}

// word returns the 8-byte word at addr, which must be aligned and inside.
func (r *region) word(addr uint64) (*uint64, bool) {
	if addr%8 != 0 {
		return nil, false
	}
	if _, ok := r.slice(addr, 8); !ok {
		return nil, false
	}
	return (*uint64)(unsafe.Add(r.base, addr-r.addr)), true
}
