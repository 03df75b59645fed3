package shm

import (
	"fmt"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/rmago/rmago/internal/memfd"

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

// mapFromProc maps the region of entry e without asking its owner, when
// the owner published the descriptor of the memfd that holds the region
// from its start (the tag's fd): it opens the owner's descriptor through
// /proc/PID/fd, which the kernel allows a process of the same user (the
// peer's user and pid are the kernel's, SO_PEERCRED). A request to the
// owner needs its responder to run, which on a node with more ranks than
// cores waits for a core; window creation maps every node-local peer's
// control words. The descriptor cannot change meanwhile: the caller is
// counted in on e, so the owner's Dereg, which closes it, waits. It
// returns nil (the caller then asks the owner) if anything is amiss; the
// first refusal of /proc turns the shortcut off for the context.
func (q *qp) mapFromProc(fd int, e *entry) *memfd.Mapping {
	if fd <= 0 || q.peerPid <= 0 || q.ctx.noProcFD.Load() {
		return nil
	}
	n := e.len.Load()
	f, err := syscall.Open("/proc/"+strconv.Itoa(q.peerPid)+"/fd/"+strconv.Itoa(fd), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		if q.ctx.noProcFD.CompareAndSwap(false, true) {
			q.ctx.logOnce(fmt.Sprintf("shm: opening a region's memfd of pid %d through /proc: %v; asking its owner instead", q.peerPid, err))
		}
		return nil
	}
	defer syscall.Close(f)
	var st syscall.Stat_t
	if syscall.Fstat(f, &st) != nil || st.Size < int64(n) {
		return nil
	}
	mp, err := memfd.Map(f, 0, int(n))
	if err != nil {
		return nil
	}
	return mp
}
