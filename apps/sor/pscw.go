package main

import "github.com/rmago/rmago/rma"

// pscw: generalized active-target synchronization with the neighbours as
// the groups. Each phase a rank exposes its window to its neighbours
// (Post), opens an access epoch to them (Start, which waits for their
// Post), puts its boundary rows into their halos, ends the access epoch
// (Complete) and waits for theirs to end (Wait). Only neighbours
// synchronize: no rank waits for the whole job, and a neighbour can only
// put after this rank's Post, i.e. after it finished the previous phase.
type pscw struct {
	s     *stripe
	win   *rma.Window[float64]
	group []int
}

func newPSCW(w *rma.World, s *stripe) (exchanger, error) {
	win, err := rma.Allocate[float64](w, s.memLen())
	if err != nil {
		return nil, err
	}
	s.attach(win.Local())
	return &pscw{s: s, win: win, group: s.neighbours()}, nil
}

func (e *pscw) exchange(k int) error {
	s, p := e.s, k%2
	if len(e.group) == 0 {
		return nil // a job of one
	}
	if err := e.win.Post(e.group, 0); err != nil {
		return err
	}
	if err := e.win.Start(e.group, 0); err != nil {
		return err
	}
	if s.up >= 0 {
		if err := e.win.Put(s.first(), s.up, botDisp(s.n, s.hUp, p)); err != nil {
			return err
		}
	}
	if s.down >= 0 {
		if err := e.win.Put(s.last(), s.down, topDisp(s.n, p)); err != nil {
			return err
		}
	}
	if err := e.win.Complete(); err != nil {
		return err
	}
	return e.win.Wait()
}

func (e *pscw) free() error { return e.win.Free() }
