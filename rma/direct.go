package rma

import (
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// Direct access. A node-local peer's allocated window, reached through
// the shm provider, is mapped into this process; the provider runs a put
// or get to it as a copy inside the post, complete when the post returns.
// Put and Get make that copy themselves (transfer), skipping the work
// request: the same copy on the same mapping, with the queue pair's state
// checked as a post checks it (transport.Fabric.DirectReady), so that a
// peer known to have failed is reported alike. Everything else a put or
// get does is unchanged: the epoch's checks before, and what the next
// synchronization is told after.

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
