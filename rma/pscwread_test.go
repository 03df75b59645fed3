package rma_test

import (
	"errors"
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

// TestPSCWGetLandsBeforeTargetReads: the PSCW form of the get ping-pong.
// Rank 1 gets rank 0's stamp into its own window and completes; rank 0,
// once its Wait returns and rank 1 has posted, reads that window back
// and finds the stamp. Complete notifies a read's target before the read
// completes where the provider answers reads first (soft), so the data
// must reach rank 1 before rank 0's later read does.
func TestPSCWGetLandsBeforeTargetReads(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 8)
		if err != nil {
			return err
		}
		me := w.Rank()
		peer := []int{1 - me}
		back := make([]int64, 2)
		for round := int64(1); round <= 1000; round++ {
			if me == 0 {
				win.Local()[0], win.Local()[1] = round, -round
				if err := errors.Join(win.Post(peer, 0), win.Wait()); err != nil {
					return err
				}
				if err := errors.Join(win.Start(peer, 0), win.Get(back, 1, 4), win.Complete()); err != nil {
					return err
				}
				if back[0] != round || back[1] != -round {
					return fmt.Errorf("round %d: rank 0 read %v back from rank 1's window, want [%d %d]", round, back, round, -round)
				}
				continue
			}
			if err := errors.Join(win.Start(peer, 0), win.Get(win.Local()[4:6], 0, 0), win.Complete()); err != nil {
				return err
			}
			if err := errors.Join(win.Post(peer, 0), win.Wait()); err != nil {
				return err
			}
		}
		return win.Free()
	})
}
