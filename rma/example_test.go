package rma_test

import (
	"fmt"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// The program of every rank: rank 0 puts a slice into rank 1's window
// between two fences. Under rmarun each process runs main's body once; here
// rmatest.Start runs two ranks as goroutines.
func Example() {
	rmatest.Start(2, func(w *rma.World) error {
		win, err := rma.Allocate[float64](w, 4)
		if err != nil {
			return err
		}
		defer win.Free()
		win.Fence(0)
		if w.Rank() == 0 {
			if err := win.PutSlice([]float64{1, 2, 3, 4}, 1); err != nil {
				return err
			}
		}
		win.Fence(0)
		if w.Rank() == 1 {
			fmt.Println(win.Local())
		}
		return nil
	})
	// Output: [1 2 3 4]
}

// Create exposes a caller's slice; Get reads a neighbour's window.
func ExampleCreate() {
	rmatest.Start(3, func(w *rma.World) error {
		mine := []int32{int32(10 * w.Rank()), int32(10*w.Rank() + 1)}
		win, err := rma.Create(w, mine)
		if err != nil {
			return err
		}
		defer win.Free()
		left := (w.Rank() + w.Size() - 1) % w.Size()
		got := make([]int32, 2)
		win.Fence(0)
		if err := win.GetSlice(got, left); err != nil {
			return err
		}
		win.Fence(rma.NoSucceed) // the get is complete: got holds the data
		if w.Rank() == 0 {
			fmt.Println("rank 0 read rank", left, got)
		}
		return nil
	})
	// Output: rank 0 read rank 2 [20 21]
}

// Put with a displacement writes into the middle of the target's window.
func ExampleWindow_Put() {
	rmatest.Start(2, func(w *rma.World) error {
		win, err := rma.Allocate[uint8](w, 6)
		if err != nil {
			return err
		}
		defer win.Free()
		win.Fence(0)
		if w.Rank() == 0 {
			win.Put([]uint8{7, 8}, 1, 2) // elements 2 and 3 of rank 1's window
		}
		win.Fence(0)
		if w.Rank() == 1 {
			fmt.Println(win.Local())
		}
		return nil
	})
	// Output: [0 0 7 8 0 0]
}

// Fence with NoPrecede opens an epoch without completing anything, and
// NoSucceed closes the last one.
func ExampleWindow_Fence() {
	rmatest.Start(2, func(w *rma.World) error {
		win, err := rma.Allocate[float32](w, 1)
		if err != nil {
			return err
		}
		defer win.Free()
		win.Fence(rma.NoPrecede)
		win.PutSlice([]float32{float32(w.Rank()) + 0.5}, 1-w.Rank())
		win.Fence(rma.NoSucceed)
		if w.Rank() == 0 {
			fmt.Println(win.Local()[0])
		}
		return nil
	})
	// Output: 1.5
}

// Passive target: every rank adds to a counter at rank 0 under an exclusive
// lock with get-modify-put; rank 0 takes no part.
func ExampleWindow_Lock() {
	rmatest.Start(3, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		defer win.Free()
		v := make([]int64, 1)
		win.Lock(0, rma.Exclusive, 0)
		win.Get(v, 0, 0)
		win.Flush(0) // v holds the counter
		v[0] += 10
		win.Put(v, 0, 0)
		win.Unlock(0) // the put is complete at rank 0
		w.Barrier()
		if w.Rank() == 0 {
			fmt.Println(win.LoadLocal(0))
		}
		return nil
	})
	// Output: 30
}

// LockAll opens a shared epoch to every rank; atomics need no exclusive lock.
func ExampleWindow_LockAll() {
	rmatest.Start(4, func(w *rma.World) error {
		win, err := rma.Allocate[uint64](w, 1)
		if err != nil {
			return err
		}
		defer win.Free()
		win.LockAll(0)
		ticket, _ := win.FetchAndOp(1, 0, 0, rma.Sum) // a distinct ticket per rank
		win.UnlockAll()
		_ = ticket
		w.Barrier()
		if w.Rank() == 0 {
			fmt.Println("tickets issued:", win.LoadLocal(0))
		}
		return nil
	})
	// Output: tickets issued: 4
}

// Post-start-complete-wait: rank 0 exposes its window to ranks 1 and 2,
// which put into it; only the ranks involved synchronize.
func ExampleWindow_Post() {
	rmatest.Start(3, func(w *rma.World) error {
		win, err := rma.Allocate[int32](w, 3)
		if err != nil {
			return err
		}
		defer win.Free()
		if w.Rank() == 0 {
			win.Post([]int{1, 2}, 0)
			win.Wait() // ranks 1 and 2 completed: their puts are here
			fmt.Println(win.Local())
		} else {
			win.Start([]int{0}, 0)
			win.Put([]int32{int32(w.Rank() * 11)}, 0, w.Rank())
			win.Complete()
		}
		return nil
	})
	// Output: [0 11 22]
}

// Accumulate combines element-wise and atomically; concurrent sums from
// every rank never lose an update.
func ExampleWindow_Accumulate() {
	rmatest.Start(4, func(w *rma.World) error {
		win, err := rma.Allocate[float64](w, 2)
		if err != nil {
			return err
		}
		defer win.Free()
		win.Fence(0)
		win.Accumulate([]float64{1, float64(w.Rank())}, 0, 0, rma.Sum)
		win.Fence(0)
		if w.Rank() == 0 {
			fmt.Println(win.Local())
		}
		return nil
	})
	// Output: [4 6]
}

// Request-based operations complete independently of the epoch.
func ExampleWindow_RGet() {
	rmatest.Start(2, func(w *rma.World) error {
		win, err := rma.Create(w, []int16{int16(w.Rank() + 1), 0})
		if err != nil {
			return err
		}
		defer win.Free()
		win.LockAll(0)
		got := make([]int16, 1)
		req, _ := win.RGet(got, 1-w.Rank(), 0)
		req.Wait() // got is filled; the epoch is still open
		win.UnlockAll()
		if w.Rank() == 0 {
			fmt.Println(got[0])
		}
		return nil
	})
	// Output: 2
}

// CompareAndSwap claims a slot: of the ranks that try at once, exactly one
// finds it empty. A hash table's insert is this, one slot at a time.
func ExampleWindow_CompareAndSwap() {
	rmatest.Start(4, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 2) // [0] the slot, [1] the winners
		if err != nil {
			return err
		}
		defer win.Free()
		win.LockAll(0)
		old, err := win.CompareAndSwap(0, int64(w.Rank()+1), 0, 0)
		if err != nil {
			return err
		}
		if old == 0 { // the slot was empty: this rank's value is in it
			win.FetchAndOp(1, 0, 1, rma.Sum)
		}
		win.UnlockAll()
		w.Barrier()
		if w.Rank() == 0 {
			owner := win.LoadLocal(0) - 1
			fmt.Println("winners:", win.LoadLocal(1), "owner is a rank:", owner >= 0 && owner < 4)
		}
		return nil
	})
	// Output: winners: 1 owner is a rank: true
}

// AwaitLocal waits for a flag that a peer sets with an atomic after its
// data: once the flag is seen, the data is in the window too. The target
// takes no part in the transfer; it only watches its own memory.
func ExampleWindow_AwaitLocal() {
	rmatest.Start(2, func(w *rma.World) error {
		win, err := rma.Allocate[int32](w, 4) // [0..2] data, [3] flag
		if err != nil {
			return err
		}
		defer win.Free()
		w.Barrier() // every window exists before anyone writes to one
		if w.Rank() == 0 {
			win.Lock(1, rma.Exclusive, 0)
			win.Put([]int32{5, 6, 7}, 1, 0)
			win.Flush(1) // the data is at rank 1 before the flag
			win.Accumulate([]int32{1}, 1, 3, rma.Replace)
			win.Unlock(1)
		} else {
			if err := win.AwaitLocal(3, func(v int32) bool { return v == 1 }); err != nil {
				return err
			}
			fmt.Println(win.Local()[:3])
		}
		return nil
	})
	// Output: [5 6 7]
}

// AllocateShared gives the ranks of a node each other's segments as plain
// slices (on the shm provider): after a fence, a rank reads its
// neighbour's segment with ordinary loads, no Get needed.
func ExampleAllocateShared() {
	rmatest.StartOn("shm", 2, func(w *rma.World) error {
		win, err := rma.AllocateShared[float64](w, 2)
		if err != nil {
			return err
		}
		defer win.Free()
		local := win.Local()
		local[0], local[1] = float64(w.Rank()), float64(10*w.Rank())
		win.Fence(0) // orders the plain stores before the other rank's loads (docs/memory-model.md)
		other, err := win.SharedSegment(1 - w.Rank())
		if err != nil {
			return err
		}
		if w.Rank() == 0 {
			fmt.Println(other)
		}
		win.Fence(0) // every rank is done reading before any Free
		return nil
	})
	// Output: [1 10]
}
