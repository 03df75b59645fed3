package rma

import (
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// Direct access. A node-local peer's allocated window, reached through
// the shm provider, is mapped into this process; the provider runs a put
// or get to it as a copy inside the post, and an accumulate or atomic as
// CPU atomics on the mapped words, complete when the post returns. Put
// and Get make that copy themselves (transfer), and accumulates and
// atomics apply themselves (directAccumulate, directCompareAndSwap),
// skipping the work request: the same copy or atomics on the same
// mapping, with the queue pair's state checked as a post checks it
// (transport.Fabric.DirectReady), so that a peer known to have failed is
// reported alike. Everything else the operation does is unchanged: the
// epoch's checks before, and what the next synchronization is told after.
// The window's own rank still goes through its loopback queue pair.

// directTo returns rank target's window mapped for direct access, or nil
// (a created window, a zero-length one, a peer reached through the
// network or through the peer's own process); win.mu held. The first call
// for a target asks the transport; later calls keep its answer until
// Free.
func (win *Window[T]) directTo(target int) []T {
	rw := &win.remotes[target]
	if rw.mapAsked {
		return rw.direct
	}
	rw.mapAsked = true
	if win.kind != Allocated || rw.count == 0 {
		atomic.StoreUint32(&rw.viaRequests, 1)
		return nil
	}
	b := win.w.f.DirectMapped(target, transport.Remote{Addr: rw.addr, RKey: rw.rkey})
	if len(b) < rw.count*win.esize || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(win.esize) != 0 {
		atomic.StoreUint32(&rw.viaRequests, 1)
		return nil
	}
	rw.direct = unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), rw.count)
	return rw.direct
}

// directBegin is the fast path's entry for an access of count elements
// at disp of rank target's window: if that window is a node-local peer's
// mapped window and the access may run now, it returns the mapping with
// win.mu held, after the same checks as the general path (the fence's
// deferred round, the epoch, the bounds, the queue pair's state). It
// returns nil, with win.mu not held, for anything else, the general path
// then doing the access or reporting why not; and an error only from
// the fence's round, which the general path would wait for again.
func (win *Window[T]) directBegin(target, disp, count int) ([]T, error) {
	if target < 0 || target >= len(win.remotes) || count <= 0 || atomic.LoadUint32(&win.remotes[target].viaRequests) != 0 {
		return nil, nil
	}
	gen, err := win.fence.Ready(target)
	if err != nil {
		return nil, err
	}
	win.mu.Lock()
	d := win.directTo(target)
	if d == nil || win.freed || win.ep.freeing || !win.ep.canAccess(target) ||
		disp < 0 || disp > len(d) || count > len(d)-disp ||
		win.lazyAt(target) != nil || win.fence.Gen() != gen || win.w.f.DirectReady(target) != nil {
		win.mu.Unlock()
		return nil, nil
	}
	return d, nil
}

// directTransfer runs a put or get to a node-local peer's mapped window
// as the copy the shm provider would make in the post, complete at once,
// and reports whether it did (false: nothing done, or err from the
// fence's round).
func (win *Window[T]) directTransfer(put bool, origin []T, target, disp int) (bool, error) {
	d, err := win.directBegin(target, disp, len(origin))
	if d == nil {
		return err != nil, err
	}
	win.ops = true
	if put {
		win.puts, win.putTo[target] = true, true
	} else {
		win.reads[target] |= pendingReads // as for any get (transferLocked)
	}
	copyAt(put, d, origin, disp)
	win.mu.Unlock()
	return true, nil
}

// shortDirect is the most elements an accumulate to a node-local peer's
// mapped window applies under the window's mutex (shortDirectAccumulate):
// a few CPU atomics, no wait on the peer.
const shortDirect = 64

// shortDirectAccumulate runs an accumulate of at most shortDirect elements
// to a node-local peer's mapped window under win.mu (directBegin): it
// waits for no peer, so it needs neither the World's atomics mutex nor
// the in-flight count that lets a longer one run unlocked (beginAtomics;
// one lock instead of four: a one-element accumulate 100 -> 80 ns). It
// reports false, having done nothing, for any other access.
func (win *Window[T]) shortDirectAccumulate(origin, result []T, target, disp int, op Op) (bool, error) {
	direct, err := win.directBegin(target, disp, len(origin))
	if direct == nil {
		return err != nil, err
	}
	win.atomicsOn(target)
	directAccumulate(direct, origin, result, disp, op)
	win.mu.Unlock()
	return true, nil
}

// shortDirectCAS is CompareAndSwap to a node-local peer's mapped window
// under win.mu, as shortDirectAccumulate; ran is false, nothing done, for
// any other access.
func (win *Window[T]) shortDirectCAS(compare, value T, target, disp int) (old T, ran bool, err error) {
	direct, err := win.directBegin(target, disp, 1)
	if direct == nil {
		return 0, err != nil, err
	}
	win.atomicsOn(target)
	old = directCompareAndSwap(direct, compare, value, disp)
	win.mu.Unlock()
	return old, true, nil
}

// directAccumulate applies origin to the elements of a node-local peer's
// mapped window from disp with op, each element atomically (the shm
// provider's accop on the same words), and, when result is not nil, puts
// the elements' previous values in it. The commonest, one 8-byte element
// replaced or (integers) added without its old value, is one atomic
// instruction here.
func directAccumulate[T Number](direct, origin, result []T, disp int, op Op) {
	n := len(origin) * int(unsafe.Sizeof(origin[0]))
	if n == 8 && result == nil {
		w := (*uint64)(unsafe.Pointer(&direct[disp]))
		switch {
		case op == Replace:
			atomic.StoreUint64(w, bitsOf(origin[0]))
			return
		case op == Sum && !isFloat[T]():
			atomic.AddUint64(w, bitsOf(origin[0]))
			return
		}
	}
	src := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(origin))), n)
	var old []byte
	if result != nil {
		old = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(result))), n)
	}
	transport.DirectAccumulate(unsafe.Pointer(&direct[disp]), src, old, transport.AccOp(op), elemType[T]())
}

// directCompareAndSwap is CompareAndSwap on a node-local peer's mapped
// window: a compare-and-swap of the 8-byte word holding the element,
// retried while other bytes of the word change under it.
func directCompareAndSwap[T Number](direct []T, compare, value T, disp int) T {
	p := unsafe.Pointer(&direct[disp])
	sh := uint(uintptr(p) & 7)
	word := (*uint64)(unsafe.Add(p, -int(sh)))
	for {
		old := atomic.LoadUint64(word)
		if elemAt[T](old, sh) != compare {
			return elemAt[T](old, sh)
		}
		if atomic.CompareAndSwapUint64(word, old, withElem(old, sh, value)) {
			return compare
		}
	}
}
