package main

import (
	"errors"

	"github.com/rmago/rmago/rma"
)

// split: fence synchronization with two small windows, created over the
// halo parts of the stripe (the Rust study's "Split", which Rust's borrow
// rules forced; in Go, two windows over two parts of one slice are just
// two sub-slices). The stripe is an ordinary Go slice; only the halos are
// registered, so a put's origin row goes through the library's bounce
// buffer, and each phase needs two fences, one per window.
type split struct {
	s        *stripe
	top, bot *rma.Window[float64] // over s.top[0..1] and s.bot[0..1]
}

func newSplit(w *rma.World, s *stripe) (exchanger, error) {
	mem := make([]float64, s.memLen())
	s.attach(mem)
	n, h := s.n, s.h()
	top, err := rma.Create(w, mem[topDisp(n, 0):topDisp(n, 2)])
	if err != nil {
		return nil, err
	}
	bot, err := rma.Create(w, mem[botDisp(n, h, 0):botDisp(n, h, 2)])
	if err != nil {
		return nil, err
	}
	if err := errors.Join(top.Fence(0), bot.Fence(0)); err != nil {
		return nil, err
	}
	return &split{s: s, top: top, bot: bot}, nil
}

func (e *split) exchange(k int) error {
	s, p := e.s, k%2
	if s.up >= 0 {
		// my first row is the upper neighbour's bottom halo
		if err := e.bot.Put(s.first(), s.up, p*s.n); err != nil {
			return err
		}
	}
	if s.down >= 0 {
		if err := e.top.Put(s.last(), s.down, p*s.n); err != nil {
			return err
		}
	}
	if err := e.top.Fence(0); err != nil {
		return err
	}
	return e.bot.Fence(0)
}

func (e *split) free() error {
	for _, win := range []*rma.Window[float64]{e.top, e.bot} {
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		if err := win.Free(); err != nil {
			return err
		}
	}
	return nil
}
