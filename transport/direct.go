package transport

import (
	"fmt"
	"unsafe"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/accop"
)

// Direct access to node-local peers. A peer served by the shm provider
// whose registered memory is shared memory (an allocated window, a
// control region) can be mapped into this process (Mapped). The provider
// then runs every request to it inside PostSend, as a copy or a CPU
// atomic on that very mapping (verbs.DeviceAttr.CompletesAtPost). Callers
// on the data path may do the same themselves, without building, posting
// and completing a work request: a copy into or out of the mapping, or a
// sync/atomic operation on one of its words. What a request gives beyond
// that is a check of the queue pair's state, which DirectReady does, and
// its place in the queue pair's order, which does not matter when every
// request completes at post: an earlier request has completed before a
// direct access starts, and a later one starts after it ended.

// DirectReady returns nil if rank r may be reached by direct access now:
// the fabric is open and the queue pair to r works. Otherwise it returns
// the error a request posted to r would have failed with (naming the
// rank; it is recorded as the peer's failure). Call it before each
// direct access, as a post checks the queue pair.
func (f *Fabric) DirectReady(r int) error {
	if f.closed.Load() {
		return ErrClosed
	}
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return fmt.Errorf("transport: rank %d is not connected for direct access", r)
	}
	if e := p.err.Load(); e != nil {
		return *e
	}
	if p.errRep != nil {
		if e := p.errRep.Err(); e != nil {
			return f.postErr(p, fmt.Errorf("%w: %w", verbs.ErrQPState, e))
		}
	}
	return nil
}

// DirectMapped returns rank r's registered memory at rem, to the end of
// its region, mapped for direct access, or nil when r cannot be reached
// that way: it is not served by a provider that completes every request
// at post and maps memory (shm), or the memory is not shared (a created
// window), or r failed. It connects to r if needed. Callers may keep the
// answer for the region's life: a nil one sends their accesses through
// requests, which report a failed peer's error.
func (f *Fabric) DirectMapped(r int, rem Remote) []byte {
	if r < 0 || r >= f.size || r == f.rank {
		return nil
	}
	p, err := f.peerOf(r)
	if err != nil || !p.c.atPost {
		return nil
	}
	b, err := f.Mapped(r, rem)
	if err != nil {
		return nil
	}
	return b
}

// DirectSelf reports whether this rank's own registered memory may be
// changed by direct access where peers reach it with atomics: the
// provider that serves this rank's requests to itself completes them at
// post (shm), which the fabric chooses only when every provider's atomics
// are CPU atomics (contexts.go), so a sync/atomic operation on the word
// is atomic against theirs, and no earlier request to itself is still in
// flight.
func (f *Fabric) DirectSelf() bool {
	p, err := f.peerOf(f.rank)
	return err == nil && p.c.atPost
}

// CompletesAtPost reports whether the provider serving rank r completes
// every request inside the post (shm; for this rank itself: DirectSelf).
// Rank r gives the same answer about this rank: the fabric picks each
// pair's provider from the two ranks' nodes alike. It does not connect.
func (f *Fabric) CompletesAtPost(r int) bool {
	if r == f.rank {
		return f.DirectSelf()
	}
	return r >= 0 && r < f.size && f.ctxs[f.via[r]].atPost
}

// DirectAccumulate applies src, elements of type t, with op into the
// elements at dst, memory of a node-local peer mapped for direct access,
// each element atomically with CPU atomics on its 8-byte word, as the shm
// provider runs an accumulate on that memory (verbs/accop); old, if not
// nil, receives the elements' previous values. dst must be aligned to the
// element size, and the words holding its len(src) bytes mapped.
func DirectAccumulate(dst unsafe.Pointer, src, old []byte, op AccOp, t ElemType) {
	accop.Apply(dst, len(src), src, old, op, t)
}
