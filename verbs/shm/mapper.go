package shm

import (
	"fmt"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// MapRemote maps the peer's region rkey from addr to its end into this
// process (verbs.Mapper): the mapping its requests use, made now if they
// have not made it yet. It stays in the queue pair's table, so Close, or a
// request that finds the region gone, unmaps it.
func (q *qp) MapRemote(rkey uint32, addr uint64) ([]byte, error) {
	if err := q.sendable(); err != nil {
		return nil, err
	}
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if q.peerTab == nil {
		return nil, fmt.Errorf("%w: queue pair closed", verbs.ErrQPState)
	}
	need := verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	e, ok := q.peerTab.check(rkey, addr, 0, need)
	if !ok {
		return nil, fmt.Errorf("%w: rkey %#x at %#x of %s", verbs.ErrRemoteAccess, rkey, addr, q.peer())
	}
	defer e.done()
	end := e.addr.Load() + e.len.Load()
	if addr >= end {
		return nil, fmt.Errorf("%w: %#x past the end of rkey %#x of %s", verbs.ErrRemoteAccess, addr, rkey, q.peer())
	}
	m, st := q.reach(rkey, e)
	if st != verbs.StatusSuccess {
		return nil, fmt.Errorf("%w: mapping rkey %#x of %s: %s", st.Err(), rkey, q.peer(), why(st))
	}
	if m.reach != reachDirect {
		return nil, fmt.Errorf("%w: rkey %#x of %s is not in shared memory", verbs.ErrNotMappable, rkey, q.peer())
	}
	return unsafe.Slice((*byte)(unsafe.Add(m.base, addr-m.addr)), end-addr), nil
}

// Unmap removes the mapping of rkey and of every region the peer has
// deregistered (verbs.Mapper).
func (q *qp) Unmap(rkey uint32) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	for i := range q.mapped {
		m := &q.mapped[i]
		if m.key == 0 {
			continue
		}
		var tag uint64
		if q.peerTab != nil {
			tag = q.peerTab[i].tag.Load()
		}
		if m.key == rkey || uint32(tag>>32) != m.key || tag&flagLive == 0 {
			m.mp.Unmap()
			*m = rmap{}
		}
	}
}
