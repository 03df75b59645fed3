package main

import (
	"time"

	"github.com/rmago/rmago/apps/internal/poll"
	"github.com/rmago/rmago/rma"
)

// lock: passive-target synchronization, no collective call per phase. A
// rank locks each neighbour's window exclusively, puts its boundary row
// into the neighbour's halo, and unlocks (which completes the put at the
// target); then it tells the neighbour with a notification flag, a
// counter in a second window that it increments with a NIC atomic
// (Accumulate Sum). The neighbour polls its own counter with LoadLocal
// until it has counted phase k's row, then calls Sync before reading the
// halo with plain loads (docs/memory-model.md).
//
// No barrier is needed to keep a fast rank from overwriting a halo its
// neighbour still reads: to send phase k's row a rank must have received
// the neighbour's row for phase k-1, which the neighbour sends only after
// finishing phase k-2, the last reader of halo buffer k%2.
type lockFlag struct {
	s     *stripe
	win   *rma.Window[float64]
	flags *rma.Window[int64] // [0]: rows received from up, [1]: from down
	one   []int64
	tmo   time.Duration // the job's bound on waits (World.Timeout)
}

// Flag slots in a rank's flags window.
const (
	fromUp   = 0
	fromDown = 1
)

func newLock(w *rma.World, s *stripe) (exchanger, error) {
	win, err := rma.Allocate[float64](w, s.memLen())
	if err != nil {
		return nil, err
	}
	s.attach(win.Local())
	flags, err := rma.Allocate[int64](w, 2)
	if err != nil {
		return nil, err
	}
	// One shared lock on every rank's flags for the whole run: the flags
	// only ever see atomics, which never conflict.
	if err := flags.LockAll(0); err != nil {
		return nil, err
	}
	return &lockFlag{s: s, win: win, flags: flags, one: []int64{1}, tmo: w.Timeout()}, nil
}

func (e *lockFlag) exchange(k int) error {
	s, p, win := e.s, k%2, e.win
	group := s.neighbours()
	for _, t := range group {
		if err := win.Lock(t, rma.Exclusive, 0); err != nil {
			return err
		}
	}
	if s.up >= 0 {
		if err := win.Put(s.first(), s.up, botDisp(s.n, s.hUp, p)); err != nil {
			return err
		}
	}
	if s.down >= 0 {
		if err := win.Put(s.last(), s.down, topDisp(s.n, p)); err != nil {
			return err
		}
	}
	for _, t := range group {
		if err := win.Unlock(t); err != nil { // the row is in t's memory
			return err
		}
	}
	if s.up >= 0 {
		if err := e.flags.Accumulate(e.one, s.up, fromDown, rma.Sum); err != nil {
			return err
		}
	}
	if s.down >= 0 {
		if err := e.flags.Accumulate(e.one, s.down, fromUp, rma.Sum); err != nil {
			return err
		}
	}
	if err := e.flags.FlushAll(); err != nil {
		return err
	}
	// Phase k's rows have arrived once each counter reaches k+1.
	want := int64(k + 1)
	err := poll.Until(func() bool {
		return (s.up < 0 || e.flags.LoadLocal(fromUp) >= want) &&
			(s.down < 0 || e.flags.LoadLocal(fromDown) >= want)
	}, e.tmo)
	if err != nil {
		return err
	}
	return win.Sync()
}

func (e *lockFlag) free() error {
	if err := e.flags.UnlockAll(); err != nil {
		return err
	}
	if err := e.flags.Free(); err != nil {
		return err
	}
	return e.win.Free()
}
