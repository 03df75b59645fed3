package rma_test

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
	"github.com/rmago/rmago/verbs"
)

// onProvider runs the in-process test on provider p (skipped when the test
// binary is a rank of a job another provider runs).
func onProvider(t *testing.T, p string) {
	t.Helper()
	if rmatest.InProcesses() {
		// rma.Init reads RMAGO_PROVIDER; auto (or unset) may choose
		// either provider, so only an explicit p counts.
		if os.Getenv("RMAGO_PROVIDER") != p {
			t.Skipf("needs RMAGO_PROVIDER=%s", p)
		}
		return
	}
	t.Setenv("RMAGO_PROVIDER", p)
}

// TestSharedSegments: on shm, every rank reads and writes every other
// rank's segment of an AllocateShared window with plain loads and stores
// (segments of different lengths), and the window works as an RMA window
// too (Put, Get, FetchAndOp) on the same memory.
func TestSharedSegments(t *testing.T) {
	onProvider(t, "shm")
	const n = 3
	rmatest.Run(t, n, func(w *rma.World) error {
		me := w.Rank()
		win, err := rma.AllocateShared[int64](w, 8*(me+1))
		if err != nil {
			return err
		}
		for i := range win.Local() {
			win.Local()[i] = int64(1000*me + i)
		}
		win.Sync()
		if err := win.Fence(0); err != nil {
			return err
		}
		segs := make([][]int64, n)
		for r := range n {
			if segs[r], err = win.SharedSegment(r); err != nil {
				return err
			}
			if len(segs[r]) != 8*(r+1) || len(segs[r]) != win.LenAt(r) {
				return fmt.Errorf("segment of rank %d has %d elements, want %d", r, len(segs[r]), 8*(r+1))
			}
			for i, v := range segs[r] {
				if v != int64(1000*r+i) {
					return fmt.Errorf("segment of rank %d, element %d = %d, want %d", r, i, v, 1000*r+i)
				}
			}
		}
		if err := win.Fence(0); err != nil { // every rank has read them
			return err
		}
		// Plain stores into the next rank's segment, element me.
		next := (me + 1) % n
		segs[next][me] = -int64(me + 1)
		win.Sync()
		if err := win.Fence(0); err != nil {
			return err
		}
		win.Sync()
		prev := (me + n - 1) % n
		if got := win.Local()[prev]; got != -int64(prev+1) {
			return fmt.Errorf("element %d stored by rank %d = %d, want %d", prev, prev, got, -(prev + 1))
		}
		// CPU atomics on rank 0's element 7 from every rank, mixed with the
		// window's own atomics on the same word.
		for range 100 {
			atomic.AddInt64(&segs[0][7], 1)
			if _, err := win.FetchAndOp(1, 0, 7, rma.Sum); err != nil {
				return err
			}
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		if got, want := atomic.LoadInt64(&segs[0][7]), int64(7+200*n); got != want {
			return fmt.Errorf("counter = %d, want %d", got, want)
		}
		// Put and Get reach the same memory.
		if err := win.Put([]int64{42}, next, 2); err != nil {
			return err
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		win.Sync()
		if got := segs[next][2]; got != 42 {
			return fmt.Errorf("rank %d's element 2 after a Put, read through its segment = %d, want 42", next, got)
		}
		segs[next][3] = 77
		win.Sync()
		if err := win.Fence(0); err != nil {
			return err
		}
		got := make([]int64, 1)
		if err := win.Get(got, next, 3); err != nil {
			return err
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		if got[0] != 77 {
			return fmt.Errorf("Get of rank %d's element 3 = %d, want 77 (stored through its segment)", next, got[0])
		}
		if _, err := win.SharedSegment(n); !errors.Is(err, rma.ErrRank) {
			return fmt.Errorf("SharedSegment(%d): %v, want ErrRank", n, err)
		}
		if err := win.Free(); err != nil {
			return err
		}
		if _, err := win.SharedSegment(next); !errors.Is(err, rma.ErrFreed) {
			return fmt.Errorf("SharedSegment after Free: %v, want ErrFreed", err)
		}
		return nil
	})
}

// TestSharedSegmentEmptyAndCreated: a rank with no elements has a nil
// segment; a created window's memory is not shared.
func TestSharedSegmentEmptyAndCreated(t *testing.T) {
	onProvider(t, "shm")
	rmatest.Run(t, 2, func(w *rma.World) error {
		me := w.Rank()
		win, err := rma.AllocateShared[float64](w, 4*me)
		if err != nil {
			return err
		}
		seg, err := win.SharedSegment(0)
		if err != nil || seg != nil {
			return fmt.Errorf("segment of the empty rank 0: %v, %v; want nil, nil", seg, err)
		}
		if seg, err = win.SharedSegment(1); err != nil || len(seg) != 4 {
			return fmt.Errorf("segment of rank 1: %d elements, %v; want 4", len(seg), err)
		}
		if err := win.Free(); err != nil {
			return err
		}
		cw, err := rma.Create(w, make([]int64, 4))
		if err != nil {
			return err
		}
		if _, err := cw.SharedSegment(1 - me); !errors.Is(err, rma.ErrNotShared) || !errors.Is(err, verbs.ErrNotMappable) {
			return fmt.Errorf("SharedSegment of a created window: %v, want ErrNotShared", err)
		}
		return cw.Free()
	})
}

// TestAllocateSharedNetwork: on a job whose provider reaches peers
// through the network, AllocateShared fails on every rank with
// ErrNotShared, and an allocated window's peers have no segment.
func TestAllocateSharedNetwork(t *testing.T) {
	onProvider(t, "soft")
	rmatest.Run(t, 2, func(w *rma.World) error {
		if _, err := rma.AllocateShared[int64](w, 8); !errors.Is(err, rma.ErrNotShared) {
			return fmt.Errorf("AllocateShared on soft: %v, want ErrNotShared", err)
		}
		win, err := rma.Allocate[int64](w, 8)
		if err != nil {
			return err
		}
		if _, err := win.SharedSegment(1 - w.Rank()); !errors.Is(err, rma.ErrNotShared) {
			return fmt.Errorf("SharedSegment on soft: %v, want ErrNotShared", err)
		}
		if seg, err := win.SharedSegment(w.Rank()); err != nil || &seg[0] != &win.Local()[0] {
			return fmt.Errorf("own segment on soft: %v", err)
		}
		return win.Free()
	})
}
