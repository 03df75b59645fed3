package rma_test

import (
	"errors"
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

// TestFenceThirdPartyReads: after a fence, a rank reading a window that a
// third rank put into during the epoch sees that put, whether it reads in
// the next fence epoch (Get) or opens a lock_all epoch first: the fence's
// second round has delivered every put of the epoch before either.
func TestFenceThirdPartyReads(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rmatest.Run(t, n, func(w *rma.World) error {
				win, err := rma.Allocate[int64](w, 2)
				if err != nil {
					return err
				}
				me := w.Rank()
				right, far := (me+1)%n, (me+2)%n
				got := make([]int64, 1)
				if err := win.Fence(0); err != nil {
					return err
				}
				for round := int64(1); round <= 20; round++ {
					stamp := round*100 + int64(me)
					if err := win.Put([]int64{stamp}, right, int(round%2)); err != nil {
						return err
					}
					passive := round%4 == 0
					end := rma.Assert(0)
					if passive {
						end = rma.NoSucceed
					}
					if err := win.Fence(end); err != nil {
						return err
					}
					want := round*100 + int64(right)
					if passive {
						if err := win.LockAll(0); err != nil {
							return err
						}
						if err := errors.Join(win.Get(got, far, int(round%2)), win.Flush(far)); err != nil {
							return err
						}
						if err := errors.Join(win.UnlockAll(), w.Barrier(), win.Fence(rma.NoPrecede)); err != nil {
							return err
						}
					} else if err := errors.Join(win.Get(got, far, int(round%2)), win.Fence(0)); err != nil {
						return err
					}
					if got[0] != want {
						return fmt.Errorf("round %d: rank %d's slot at rank %d = %d, want %d", round, right, far, got[0], want)
					}
				}
				return errors.Join(win.Fence(rma.NoSucceed), win.Free())
			})
		})
	}
}

// TestFenceGetLandsBeforeTargetReads: after the fence that ends a Get, the
// Get's target reads the window the Get filled and finds what the Get
// brought (the get ping-pong). The reader is told of the fence before its
// Get's data has come where the provider answers reads first (soft): the
// target's later read must not overtake that data on its way. Many small
// rounds, as the race is one of timing.
func TestFenceGetLandsBeforeTargetReads(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 8)
		if err != nil {
			return err
		}
		me := w.Rank()
		back := make([]int64, 2)
		for round := int64(1); round <= 2000; round++ {
			if me == 0 {
				win.Local()[0], win.Local()[1] = round, -round
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			if me == 1 {
				// Into rank 1's own window, which rank 0 reads next.
				if err := win.Get(win.Local()[4:6], 0, 0); err != nil {
					return err
				}
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			if me == 0 {
				if err := win.Get(back, 1, 4); err != nil {
					return err
				}
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			if me == 0 && (back[0] != round || back[1] != -round) {
				return fmt.Errorf("round %d: rank 0 read %v back from rank 1's window, want [%d %d]", round, back, round, -round)
			}
		}
		return win.Free()
	})
}
