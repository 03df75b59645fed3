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
// arguments. Every Put and Get becomes one RDMA work request on the verbs
// provider (soft TCP emulation or real InfiniBand/RoCE); the target's
// program takes no part.
//
// # Windows
//
// Allocate returns a window over memory the library maps outside the Go
// heap (page-aligned, never moved or scanned by the garbage collector).
// Create exposes a caller's slice, which stays pinned while registered.
// Creation and Free are collective: every rank calls them in the same order.
//
// # Operations and epochs
//
// Put(origin, target, disp) writes len(origin) elements into rank target's
// window starting at element disp; Get(origin, target, disp) reads them.
// PutSlice and GetSlice are the whole-slice forms at displacement 0.
// Operations are checked before anything goes on the wire: the target rank
// must exist, [disp, disp+len) must lie inside the target's window, and an
// access epoch must be open (a Fence opens one). Zero-length operations do
// nothing and succeed.
//
// An operation is complete when the epoch closes: after the next Fence the
// data of a Put is in the target's memory and the data of a Get in the
// origin slice. Until then the origin slice belongs to the library: do not
// modify it (Put) or read it (Get).
//
// # Errors
//
// Errors are values and wrap the package's sentinels (ErrRank, ErrRange,
// ErrNoEpoch, ...) and, for failures on the wire, the verbs and transport
// sentinels; test them with errors.Is.
package rma
