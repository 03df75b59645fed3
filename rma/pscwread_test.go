package rma_test

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestCompleteGetThenOverwrite: rank 1 gets the whole of rank 0's window
// in a PSCW access epoch; as soon as its Wait returns, rank 0 overwrites
// the window. Complete may tell rank 0 before the get's data has come back
// (its notification doubles as the get's flush), but the get must still
// hold the values from before the overwrite, every round and size, into
// registered memory and into Go memory.
func TestCompleteGetThenOverwrite(t *testing.T) {
	for _, elems := range []int{8, 256 << 10} {
		t.Run(fmt.Sprint(elems), func(t *testing.T) {
			rmatest.Run(t, 2, func(w *rma.World) error {
				win, err := rma.Allocate[int64](w, elems)
				if err != nil {
					return err
				}
				reg, err := rma.Allocate[int64](w, elems)
				if err != nil {
					return err
				}
				heap := make([]int64, elems)
				for round := int64(1); round <= 6; round++ {
					if w.Rank() == 0 {
						for i := range win.Local() {
							win.Local()[i] = round
						}
						if err := win.Post([]int{1}, 0); err != nil {
							return err
						}
						if err := win.Wait(); err != nil {
							return err
						}
						for i := range win.Local() {
							win.Local()[i] = -round
						}
					} else {
						// Registered (zero copy) and Go memory (the bounce
						// buffer) in turn.
						got := reg.Local()
						if round%2 == 0 {
							got = heap
						}
						if err := win.Start([]int{0}, 0); err != nil {
							return err
						}
						if err := win.Get(got, 0, 0); err != nil {
							return err
						}
						if err := win.Complete(); err != nil {
							return err
						}
						for i, v := range got {
							if v != round {
								return fmt.Errorf("round %d: element %d of the get = %d, want %d", round, i, v, round)
							}
						}
					}
					if err := w.Barrier(); err != nil {
						return err
					}
				}
				return errorsJoin(reg.Free(), win.Free())
			})
		})
	}
}
