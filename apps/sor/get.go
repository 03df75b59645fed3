package main

import "github.com/rmago/rmago/rma"

// get: each rank pulls its halos: fence (every rank has finished the
// previous phase, so its rows are stable), get the upper neighbour's last
// row and the lower neighbour's first row into the halos, fence (the gets
// are complete). A get reads rows the owner is about to change, so unlike
// the put variants it cannot hide behind double buffering: two fences per
// phase.
type getHalos struct {
	s   *stripe
	win *rma.Window[float64]
}

func newGet(w *rma.World, s *stripe) (exchanger, error) {
	win, err := rma.Allocate[float64](w, s.memLen())
	if err != nil {
		return nil, err
	}
	s.attach(win.Local())
	return &getHalos{s: s, win: win}, nil
}

func (e *getHalos) exchange(k int) error {
	s, p := e.s, k%2
	// Nothing precedes this fence in its epoch: the previous phase's gets
	// were completed by the fence that closed it.
	if err := e.win.Fence(rma.NoPrecede); err != nil {
		return err
	}
	if s.up >= 0 {
		if err := e.win.Get(s.top[p], s.up, rowsDisp(s.n)+(s.hUp-1)*s.n); err != nil {
			return err
		}
	}
	if s.down >= 0 {
		if err := e.win.Get(s.bot[p], s.down, rowsDisp(s.n)); err != nil {
			return err
		}
	}
	return e.win.Fence(rma.NoSucceed)
}

func (e *getHalos) free() error { return e.win.Free() }
