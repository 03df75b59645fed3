package rma_test

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestFenceGetThenOverwrite: the fence after a Get lets the window's
// owner, and any rank putting into it, change the window at once without
// changing what the Get returns. Rank 1 gets rank 0's whole window; after
// the fence rank 0 overwrites half of it with stores and (3 ranks) rank 2
// puts into the other half. Small windows and 2 MiB ones (a read response
// that does not fit the socket at once); every round checks every element.
func TestFenceGetThenOverwrite(t *testing.T) {
	for _, n := range []int{2, 3} {
		for _, elems := range []int{8, 256 << 10} {
			t.Run(fmt.Sprintf("%d/%d", n, elems), func(t *testing.T) {
				rmatest.Run(t, n, func(w *rma.World) error {
					win, err := rma.Allocate[int64](w, elems)
					if err != nil {
						return err
					}
					me, half := w.Rank(), elems/2
					got := make([]int64, elems)
					later := make([]int64, elems-half)
					for round := int64(1); round <= 6; round++ {
						if me == 0 {
							for i := range win.Local() {
								win.Local()[i] = round
							}
						}
						if err := win.Fence(0); err != nil {
							return err
						}
						if me == 1 {
							if err := win.Get(got, 0, 0); err != nil {
								return err
							}
						}
						if err := win.Fence(0); err != nil {
							return err
						}
						switch me {
						case 0:
							end := elems
							if n > 2 {
								end = half
							}
							for i := range win.Local()[:end] {
								win.Local()[i] = -round
							}
						case 1:
							for i, v := range got {
								if v != round {
									return fmt.Errorf("round %d: element %d of the get = %d, want %d", round, i, v, round)
								}
							}
						case 2:
							for i := range later {
								later[i] = -round
							}
							if err := win.Put(later, 0, half); err != nil {
								return err
							}
						}
						if err := win.Fence(0); err != nil {
							return err
						}
					}
					return win.Free()
				})
			})
		}
	}
}
