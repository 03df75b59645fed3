// Package rma is rmago's public API: MPI-3-style one-sided communication
// (remote memory access) for Go programs made of N ranks.
//
// A program starts with Init, which joins the job that rmarun (or another
// launcher) started, then exposes memory in typed windows:
//
//	w, err := rma.Init()
//	defer w.Close()
//	win, err := rma.Allocate[float64](w, n) // library memory, registered for RDMA
//	defer win.Free()
//	win.Fence(0)
//	if w.Rank() == 0 {
//		err = win.PutSlice(src, 1) // the whole slice into rank 1 at displacement 0
//	}
//	win.Fence(0)
//	// rank 1 now sees src in win.Local()
//
// Windows are generic over fixed-size numeric types; there are no datatype
// arguments. A Put or Get to another rank becomes RDMA work requests on
// the job's provider (soft: software RDMA over TCP; shm: shared memory
// between the ranks of one node; ibv: RDMA hardware); the target's
// program takes no part. When the origin slice lies in registered memory
// (a window), one request per 256 MiB carries it with no copy; any other
// origin slice goes through a 4 MiB registered bounce buffer in pieces of
// up to 2 MiB (a copy in for Put, a copy out when a Get completes). An
// access to the rank's own window is a plain copy, complete at once.
// Accumulates and atomics always go through the provider, the one agent
// that updates window memory atomically. The API in full: docs/api.md; how
// a call reaches the target: docs/architecture.md.
//
// # Windows
//
// Allocate returns a window over memory the library maps outside the Go
// heap (page-aligned, never moved or scanned by the garbage collector).
// Create exposes a caller's slice, which stays pinned while registered.
// AllocateShared is Allocate whose node-local segments SharedSegment maps
// for plain loads and stores (shm provider; docs/memory-model.md).
// Creation and Free are collective: every rank calls them in the same order.
//
// # Operations and epochs
//
// Put(origin, target, disp) writes len(origin) elements into rank target's
// window starting at element disp; Get(origin, target, disp) reads them.
// PutSlice and GetSlice are the whole-slice forms at displacement 0.
// Operations are checked before anything goes on the wire: the window must
// not be freed, the target rank must exist, an access epoch to it must be
// open (a Fence opens one), and [disp, disp+len) must lie inside the
// target's window. Zero-length operations are checked the same way, with
// disp anywhere from 0 to the target's length (as for an empty Go slice
// s[disp:disp]); they then do nothing: no data moves and nothing is left
// to complete.
//
// An operation is complete when the epoch closes: after the next Fence the
// data of a Put is in the target's memory and the data of a Get in the
// origin slice. Until then the origin slice belongs to the library: do not
// modify it (Put) or read it (Get).
//
// # Errors
//
// Errors are values and wrap the package's sentinels: ErrRank, ErrRange,
// ErrNoEpoch, ErrInvalidOp, ... for misuse, and for failures of the job
// and the wire ErrTimeout, ErrPeer, ErrPeerGone, ErrBootstrap,
// ErrLauncher, ErrConfig, ErrProvider, ErrRemoteAccess, ErrTransport
// (sentinels.go); test them with errors.Is. An operation's error
// names the call, the calling and target ranks and the element, then what
// failed and what to do, as in
//
//	rma: Get from rank 1 to rank 0, element 2: displacement and count outside the target window: elements [2, 5) are not all inside rank 0's window 0 of 4 elements (see LenAt)
package rma
