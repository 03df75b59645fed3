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
