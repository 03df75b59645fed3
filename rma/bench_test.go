package rma_test

import (
	"errors"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// pairBench runs body on rank 0 of a two-rank in-process job, with a window
// of n float64 and a registered origin; rank 1 only takes part in fences.
func pairBench(b *testing.B, n int, body func(win, src *rma.Window[float64]) error) {
	rmatest.Run(b, 2, func(w *rma.World) error {
		win, err := rma.Allocate[float64](w, n)
		if err != nil {
			return err
		}
		src, err := rma.Allocate[float64](w, n)
		if err != nil {
			return err
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		if w.Rank() == 0 {
			if err := body(win, src); err != nil {
				return err
			}
		}
		// Rank 1 waits here for rank 0's closing fence.
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		return errorsJoin(win.Free(), src.Free())
	})
}

func errorsJoin(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// BenchmarkPut measures posting puts of 8 bytes (no synchronization in the
// loop): the cost of the data path itself, and its allocations.
func BenchmarkPut(b *testing.B) {
	pairBench(b, 1, func(win, src *rma.Window[float64]) error {
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := win.Put(src.Local()[:1], 1, 0); err != nil {
				return err
			}
		}
		b.StopTimer()
		return nil
	})
}

// TestPutGetAllocateNothing checks that Put and Get from registered memory
// allocate nothing in steady state (counted over the whole process, so the
// peer's responder is included).
func TestPutGetAllocateNothing(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("in-process only")
	}
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[float64](w, 64)
		if err != nil {
			return err
		}
		defer win.Free()
		src, err := rma.Allocate[float64](w, 64)
		if err != nil {
			return err
		}
		defer src.Free()
		win.Fence(0)
		if w.Rank() == 0 {
			for i := 0; i < 1000; i++ { // warm up: queues, maps, buffers
				win.Put(src.Local()[:8], 1, 0)
				win.Get(src.Local()[8:16], 1, 0)
			}
			allocs := testing.AllocsPerRun(2000, func() {
				win.Put(src.Local()[:8], 1, 0)
				win.Get(src.Local()[8:16], 1, 0)
			})
			if allocs > 0.01 {
				t.Errorf("Put+Get allocate %.3f times per call", allocs)
			}
		}
		return win.Fence(rma.NoSucceed)
	})
}

// TestLockPeerAllocatesNothing: an epoch on a peer, exclusive and shared
// (lazy on soft: the put carries the lock's atomics), with a put and an
// accumulate, allocates nothing in steady state, on either rank.
func TestLockPeerAllocatesNothing(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("in-process only")
	}
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 64)
		if err != nil {
			return err
		}
		defer win.Free()
		src, err := rma.Allocate[int64](w, 8)
		if err != nil {
			return err
		}
		defer src.Free()
		if err := w.Barrier(); err != nil {
			return err
		}
		var cerr error
		if w.Rank() == 0 {
			one := []int64{1}
			cycle := func() {
				for _, typ := range []rma.LockType{rma.Exclusive, rma.Shared} {
					cerr = errors.Join(cerr, win.Lock(1, typ, 0), win.Put(src.Local()[:2], 1, 0),
						win.Accumulate(one, 1, 8, rma.Sum), win.Unlock(1))
				}
			}
			for range 200 { // warm up: queues, maps, buffers
				cycle()
			}
			if allocs := testing.AllocsPerRun(500, cycle); allocs > 0.01 {
				t.Errorf("Lock+Put+Accumulate+Unlock on a peer allocate %.3f times per cycle", allocs)
			}
		}
		return errors.Join(cerr, w.Barrier())
	})
}

// TestCreatedAtomicsAllocateNothing: atomics and accumulates to a peer's
// created window (on shm: requests through the owner's socket, its memory
// being the caller's slice) allocate nothing in steady state.
func TestCreatedAtomicsAllocateNothing(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("in-process only")
	}
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Create(w, make([]int64, 16))
		if err != nil {
			return err
		}
		defer win.Free()
		if err := win.LockAll(0); err != nil {
			return err
		}
		var cerr error
		if w.Rank() == 0 {
			one := []int64{1}
			cycle := func() {
				_, err := win.FetchAndOp(1, 1, 2, rma.Sum)
				cerr = errors.Join(cerr, err, win.Accumulate(one, 1, 3, rma.Sum), win.Flush(1))
			}
			for range 200 { // warm up: queues, maps, buffers
				cycle()
			}
			if allocs := testing.AllocsPerRun(500, cycle); allocs > 0.01 {
				t.Errorf("FetchAndOp+Accumulate+Flush to a created window allocate %.3f times per cycle", allocs)
			}
		}
		return errors.Join(cerr, win.UnlockAll(), w.Barrier())
	})
}

// TestSyncAllocateNothing: a cycle of every synchronization mode with a
// put and an atomic in each epoch allocates nothing in steady state (one
// rank, so every access is to itself and the count is this rank's alone).
func TestSyncAllocateNothing(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("in-process only")
	}
	rmatest.Run(t, 1, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 64)
		if err != nil {
			return err
		}
		defer win.Free()
		src := []int64{1, 2, 3, 4}
		group := []int{0}
		var errs error
		cycle := func() {
			errs = errors.Join(errs,
				win.Fence(0), win.Put(src, 0, 0), win.Fence(rma.NoSucceed),
				win.Post(group, 0), win.Start(group, 0), win.Put(src, 0, 8), win.Complete(), win.Wait(),
				win.Lock(0, rma.Exclusive, 0), win.Put(src, 0, 16), win.Accumulate(src[:1], 0, 20, rma.Sum), win.Unlock(0),
				win.LockAll(0), win.Put(src, 0, 24), win.Flush(0))
			_, err := win.FetchAndOp(1, 0, 30, rma.Sum)
			errs = errors.Join(errs, err, win.UnlockAll())
		}
		for range 100 {
			cycle()
		}
		allocs := testing.AllocsPerRun(200, cycle)
		if errs != nil {
			return errs
		}
		if allocs > 0 {
			t.Errorf("%v allocations per cycle of every synchronization mode", allocs)
		}
		return nil
	})
}
