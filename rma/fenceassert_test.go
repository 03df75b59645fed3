package rma_test

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestFenceNoPrecedeNoSucceed: fences asserting NoPrecede|NoSucceed (which
// send nothing) between fence epochs with puts keep the ranks in step:
// every epoch's data arrives exactly, on 2 and 3 ranks.
func TestFenceNoPrecedeNoSucceed(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rmatest.Run(t, n, func(w *rma.World) error {
				win, err := rma.Allocate[int64](w, n)
				if err != nil {
					return err
				}
				me := w.Rank()
				right, left := (me+1)%n, (me+n-1)%n
				for round := int64(1); round <= 20; round++ {
					for range int(round % 3) {
						if err := win.Fence(rma.NoPrecede | rma.NoSucceed); err != nil {
							return err
						}
					}
					if err := win.Fence(rma.NoPrecede); err != nil {
						return err
					}
					if err := win.Put([]int64{round*100 + int64(me)}, right, me); err != nil {
						return err
					}
					if err := win.Fence(rma.NoSucceed); err != nil {
						return err
					}
					if got, want := win.Local()[left], round*100+int64(left); got != want {
						return fmt.Errorf("round %d: element %d = %d, want %d", round, left, got, want)
					}
				}
				return win.Free()
			})
		})
	}
}
