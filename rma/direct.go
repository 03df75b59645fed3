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
		return nil
	}
	b := win.w.f.DirectMapped(target, transport.Remote{Addr: rw.addr, RKey: rw.rkey})
	if len(b) < rw.count*win.esize || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(win.esize) != 0 {
		return nil
	}
	rw.direct = unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), rw.count)
	return rw.direct
}

// shortDirect is the most elements an accumulate to a node-local peer's
// mapped window applies under the window's mutex (shortDirectAccumulate):
// a few CPU atomics, no wait on the peer.
const shortDirect = 64

// shortDirectAccumulate runs an accumulate of at most shortDirect elements
// to a node-local peer's mapped window, with the epoch's checks, under
// win.mu: it waits for no peer, so it needs neither the World's atomics
// mutex nor the in-flight count that lets a longer one run unlocked
// (beginAtomics; one lock instead of four: a one-element accumulate 100 ->
// 80 ns). It reports false, having done nothing, for any other target.
func (win *Window[T]) shortDirectAccumulate(origin, result []T, target, disp int, op Op) (bool, error) {
	if err := win.lockReady(target); err != nil {
		return true, err
	}
	defer win.mu.Unlock()
	if err := win.check(target, disp, len(origin)); err != nil || len(origin) == 0 {
		return true, err
	}
	if target == win.w.Rank() {
		return false, nil // through the loopback pair (beginAtomics)
	}
	direct := win.directTo(target)
	if direct == nil {
		return false, nil
	}
	win.atomicsOn(target)
	return true, directAccumulate(win.w.f, direct, origin, result, target, disp, op)
}

// shortDirectCAS is CompareAndSwap to a node-local peer's mapped window
// under win.mu, as shortDirectAccumulate; ran is false, nothing done, for
// any other target.
func (win *Window[T]) shortDirectCAS(compare, value T, target, disp int) (old T, ran bool, err error) {
	if err := win.lockReady(target); err != nil {
		return 0, true, err
	}
	defer win.mu.Unlock()
	if err := win.check(target, disp, 1); err != nil {
		return 0, true, err
	}
	if target == win.w.Rank() {
		return 0, false, nil
	}
	direct := win.directTo(target)
	if direct == nil {
		return 0, false, nil
	}
	win.atomicsOn(target)
	old, err = directCompareAndSwap(win.w.f, direct, compare, value, target, disp)
	return old, true, err
}

// directAccumulate applies origin to the elements of a node-local peer's
// mapped window from disp with op, each element atomically (the shm
// provider's accop on the same words), and, when result is not nil, puts
// the elements' previous values in it.
func directAccumulate[T Number](f *transport.Fabric, direct, origin, result []T, target, disp int, op Op) error {
	if err := f.DirectReady(target); err != nil {
		return err
	}
	n := len(origin) * int(unsafe.Sizeof(origin[0]))
	src := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(origin))), n)
	var old []byte
	if result != nil {
		old = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(result))), n)
	}
	transport.DirectAccumulate(unsafe.Pointer(&direct[disp]), src, old, transport.AccOp(op), elemType[T]())
	return nil
}

// directCompareAndSwap is CompareAndSwap on a node-local peer's mapped
// window: a compare-and-swap of the 8-byte word holding the element,
// retried while other bytes of the word change under it.
func directCompareAndSwap[T Number](f *transport.Fabric, direct []T, compare, value T, target, disp int) (T, error) {
	if err := f.DirectReady(target); err != nil {
		return 0, err
	}
	p := unsafe.Pointer(&direct[disp])
	sh := uint(uintptr(p) & 7)
	word := (*uint64)(unsafe.Add(p, -int(sh)))
	for {
		old := atomic.LoadUint64(word)
		if elemAt[T](old, sh) != compare {
			return elemAt[T](old, sh), nil
		}
		if atomic.CompareAndSwapUint64(word, old, withElem(old, sh, value)) {
			return compare, nil
		}
	}
}
