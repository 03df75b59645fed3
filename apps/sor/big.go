package main

import "github.com/rmago/rmago/rma"

// big: fence synchronization, one window over the whole stripe (the "Big
// Window" variant of the Rust study in docs/apps.md). Each phase a rank puts its first row into the
// upper neighbour's bottom halo and its last row into the lower
// neighbour's top halo, straight out of its own window (registered memory:
// no copy), and a single fence completes both. The double-buffered halos
// make that one fence per phase enough (see stripe).
type bigWindow struct {
	s   *stripe
	win *rma.Window[float64]
}

func newBig(w *rma.World, s *stripe) (exchanger, error) {
	win, err := rma.Allocate[float64](w, s.memLen())
	if err != nil {
		return nil, err
	}
	s.attach(win.Local())
	if err := win.Fence(0); err != nil {
		return nil, err
	}
	return &bigWindow{s: s, win: win}, nil
}

func (e *bigWindow) exchange(k int) error {
	s, p := e.s, k%2
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
	return e.win.Fence(0)
}

func (e *bigWindow) free() error {
	if err := e.win.Fence(rma.NoSucceed); err != nil {
		return err
	}
	return e.win.Free()
}
