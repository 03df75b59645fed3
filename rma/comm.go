package rma

import (
	"fmt"
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// copyAt makes a put or get that memory reachable here serves at once
// (this rank's own window, a node-local peer's mapping): put copies origin
// into mem from element disp, get the other way.
func copyAt[T any](put bool, mem, origin []T, disp int) {
	if put {
		copy(mem[disp:], origin)
	} else {
		copy(origin, mem[disp:disp+len(origin)])
	}
}

// maxChunk bounds one work request; larger transfers are split.
const maxChunk = 256 << 20

// Put writes origin into rank target's window, starting at element disp
// of the target's window. It returns once the request is posted; the data
// is in the target's memory after the synchronization that ends the epoch,
// and origin must not be modified before then.
func (win *Window[T]) Put(origin []T, target, disp int) error {
	var req Request
	err := win.transfer(&req, true, origin, target, disp, true)
	return win.callErr("Put", target, disp, err)
}

// Get reads len(origin) elements of rank target's window, starting at
// element disp, into origin. The data is in origin after the
// synchronization that ends the epoch; do not read origin before then.
func (win *Window[T]) Get(origin []T, target, disp int) error {
	var req Request
	err := win.transfer(&req, false, origin, target, disp, true)
	return win.callErr("Get", target, disp, err)
}

// PutSlice writes the whole of origin into rank target's window at
// displacement 0.
func (win *Window[T]) PutSlice(origin []T, target int) error { return win.Put(origin, target, 0) }

// GetSlice fills the whole of origin from rank target's window at
// displacement 0.
func (win *Window[T]) GetSlice(origin []T, target int) error { return win.Get(origin, target, 0) }

// check validates an access before anything goes on the wire; win.mu held.
// Zero-length accesses are checked alike: disp may then be anything from 0
// to the target's length, as for an empty Go slice s[disp:disp].
func (win *Window[T]) check(target, disp, count int) error {
	if win.freed {
		return fmt.Errorf("%w: window %d was freed; create a new one", ErrFreed, win.id)
	}
	if win.ep.freeing {
		return fmt.Errorf("%w: window %d is being freed (Free is running)", ErrFreed, win.id)
	}
	if target < 0 || target >= len(win.remotes) {
		return fmt.Errorf("%w: the job's ranks are 0 to %d", ErrRank, len(win.remotes)-1)
	}
	if !win.ep.canAccess(target) {
		return fmt.Errorf("%w: window %d has none open to rank %d; %s", ErrNoEpoch, win.id, target, win.ep.noAccess(target))
	}
	if n := win.remotes[target].count; disp < 0 || count < 0 || disp > n || count > n-disp {
		return fmt.Errorf("%w: elements [%d, %d) are not all inside rank %d's window %d of %d elements (see LenAt)",
			ErrRange, disp, disp+count, target, win.id, n)
	}
	return nil
}

// transfer posts a put or get and sets *req to a request for its
// completion (filled in place: returned, it would be copied up through
// every call, a tenth of an 8-byte shm put).
// It holds win.mu while it posts (so that a concurrent Unlock, Complete or
// Fence covers the operation or refuses it), which never waits for a peer:
// at most for send-queue or bounce-buffer space, which the NIC frees.
// carry: a put or get whose request nobody waits for (Put and Get, not
// RPut and RGet), which may carry a lazy lock's atomics (lazy.go).
func (win *Window[T]) transfer(req *Request, put bool, origin []T, target, disp int, carry bool) error {
	if ran, err := win.directTransfer(put, origin, target, disp); ran {
		return err
	}
	carry = carry && len(origin)*win.esize <= transport.MaxGuardedWrite
	for {
		again, err := win.transferOnce(req, put, origin, target, disp, carry)
		if !again {
			return err
		}
		carry = false // confirm the lazy lock, then post as usual
	}
}

// transferOnce is one attempt of transfer; again: a lazy lock's atomics
// could not go with the put, nothing was done, and the put is to be made
// again without carry.
func (win *Window[T]) transferOnce(req *Request, put bool, origin []T, target, disp int, carry bool) (again bool, _ error) {
	if err := win.lockReadyFor(target, carry); err != nil {
		return false, err
	}
	// No defer: with this many returns it would not be open-coded, and
	// the runtime's deferred call costs a tenth of an 8-byte shm put.
	again, err := win.transferLocked(req, put, origin, target, disp)
	win.mu.Unlock()
	return again, err
}

// transferLocked is transferOnce's work once lockReadyFor let it through;
// win.mu held.
func (win *Window[T]) transferLocked(req *Request, put bool, origin []T, target, disp int) (again bool, _ error) {
	if err := win.check(target, disp, len(origin)); err != nil {
		return false, err
	}
	if len(origin) == 0 {
		return false, nil
	}
	if target == win.w.Rank() {
		// This rank's own window: a copy, complete at once. (Accumulates
		// still go through the NIC, the one agent for atomic updates.)
		win.ops = true
		copyAt(put, win.local, origin, disp)
		return false, nil
	}
	w := win.w
	direct := win.directTo(target)
	if direct != nil {
		if err := w.f.DirectReady(target); err != nil {
			return false, err
		}
	}
	rw := &win.remotes[target]
	remote := transport.Remote{Addr: rw.addr + uint64(disp*win.esize), RKey: rw.rkey}
	n := len(origin) * win.esize
	p := unsafe.Pointer(unsafe.SliceData(origin))
	local, registered := w.local(p, uintptr(n))
	if lz := win.lazyAt(target); lz != nil {
		// lockReadyFor let a put or get through to carry the lazy lock's
		// atomics (lazy.go): to or from registered memory only.
		if !registered || direct != nil {
			return true, nil
		}
		sent, err := win.carryLock(lz, target, !put, local, remote, n)
		if err != nil || !sent {
			return !sent && err == nil, err
		}
		win.opsOn(target)
		if put {
			win.puts, win.putTo[target] = true, true
		} else {
			win.reads[target] |= pendingReads
		}
		return false, nil
	}
	win.opsOn(target)
	if put {
		win.puts = true
		win.putTo[target] = true
	} else {
		win.reads[target] |= pendingReads // flushed at the next synchronization
	}
	if direct != nil {
		// A node-local peer's mapped window (direct.go): the copy the
		// provider would make in the post, complete at once.
		copyAt(put, direct, origin, disp)
		return false, nil
	}
	*req = Request{w: w, rank: target}
	if registered {
		// Zero copy: the origin lies in registered memory.
		for off := 0; off < n; off += maxChunk {
			c := min(maxChunk, n-off)
			l := transport.Local{Addr: local.Addr + uint64(off), LKey: local.LKey}
			r := transport.Remote{Addr: remote.Addr + uint64(off), RKey: remote.RKey}
			var err error
			if put {
				req.seq, err = w.f.Write(target, l, r, uint32(c))
			} else {
				req.seq, err = w.f.Read(target, l, r, uint32(c))
			}
			if err != nil {
				*req = Request{}
				return false, err
			}
		}
		return false, nil
	}
	return false, w.postStaged(put, req, unsafe.Slice((*byte)(p), n), remote)
}
