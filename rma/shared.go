package rma

import (
	"fmt"
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// ErrNotShared means a rank's window memory cannot be reached with plain
// loads and stores from this process: the rank is on another node, the
// job does not run the shm provider for it (RMAGO_PROVIDER=shm), or its
// memory is not shared memory (a created window). It also matches
// verbs.ErrNotMappable.
var ErrNotShared = transport.ErrNotShared

// AllocateShared creates a window of n elements on every rank, as
// Allocate does, whose node-local segments are directly addressable by the
// ranks of the node (MPI_Win_allocate_shared): SharedSegment returns a
// node-local rank's segment as a slice for plain loads and stores. It is
// also an ordinary window: Put, Get, the atomics and every synchronization
// work on it. It needs a provider that maps node-local peers' memory (shm):
// on a job that reaches its peers through the network only (soft, ibv) it
// fails on every rank with ErrNotShared. It is collective.
//
// See docs/memory-model.md for what a plain load or store of a segment
// needs: Sync, and sync/atomic for words other ranks access concurrently.
func AllocateShared[T Number](w *World, n int) (*Window[T], error) {
	var failed error
	if err := w.check(); err == nil && !w.f.SharesMemory() {
		failed = fmt.Errorf("%w: AllocateShared on rank %d: the job's provider reaches peers through the network, "+
			"so no rank's memory can be mapped here; run node-local ranks on the shm provider (RMAGO_PROVIDER=shm)",
			ErrNotShared, w.Rank())
	}
	return allocate[T](w, n, "AllocateShared", failed)
}

// SharedSegment returns rank r's segment of the window (LenAt(r)
// elements) mapped into this process, for plain loads and stores
// (MPI_Win_shared_query); r's own is Local. The mapping is made on first
// use and stays until Free or the World's Close: do not use the slice
// after either. A rank with no elements has a nil segment. It fails with
// ErrNotShared when r is not on this node or not reached through shared
// memory, or the window is a created one, and with ErrRank for a rank
// outside the job. Any window allocated on the shm provider (Allocate or
// AllocateShared) can be queried.
func (win *Window[T]) SharedSegment(r int) ([]T, error) {
	if win.isFreed() {
		return nil, win.errf(ErrFreed, "SharedSegment on a freed window")
	}
	if r < 0 || r >= len(win.remotes) {
		return nil, win.errf(ErrRank, "SharedSegment of rank %d: the job's ranks are 0 to %d", r, len(win.remotes)-1)
	}
	if r == win.w.Rank() {
		return win.local, nil
	}
	// Loads and stores into the segment pass no fence check: from now on
	// the window's fences await their second round (sync/fence/lazy.go),
	// and one deferred already is awaited here.
	win.fence.SetEager()
	if _, err := win.fence.Settle(); err != nil {
		return nil, win.wrapf(err, "SharedSegment(%d)", r)
	}
	rw := win.remotes[r]
	if rw.count == 0 {
		return nil, nil
	}
	if win.kind != Allocated {
		return nil, win.errf(ErrNotShared, "SharedSegment of rank %d: a created window's memory is the program's own Go memory, not shared memory", r)
	}
	b, err := win.w.f.Mapped(r, transport.Remote{Addr: rw.addr, RKey: rw.rkey})
	if err != nil {
		return nil, win.wrapf(err, "SharedSegment of rank %d", r)
	}
	if len(b) < rw.count*win.esize || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(win.esize) != 0 {
		return nil, win.errf(ErrRemoteAccess, "SharedSegment of rank %d: its mapping of %d bytes does not hold %d elements of %d bytes", r, len(b), rw.count, win.esize)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), rw.count), nil
}

// unmapPeers removes this process's mappings of the peers' segments of
// the window (SharedSegment's, and those the shm provider made for Put
// and Get), so that none outlives Free, even of a peer that was killed.
func (win *Window[T]) unmapPeers() {
	if win.kind != Allocated {
		return
	}
	me := win.w.Rank()
	for r, rw := range win.remotes {
		if r != me && rw.count > 0 {
			win.w.f.Unmap(r, rw.rkey)
		}
	}
}
