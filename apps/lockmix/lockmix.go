package main

import (
	"fmt"
	"os"
	"time"

	"github.com/rmago/rmago/apps/internal/coll"
	"github.com/rmago/rmago/rma"
)

// outcome is one rank's view of a run.
type outcome struct {
	elapsed  time.Duration // slowest rank's time for all rounds
	maxRound time.Duration // slowest single round of any rank
	lockWait time.Duration // slowest rank's time in Lock and LockAll
	verified bool
	why      string
}

// kind is what round i of rank r does: 0 lock_all, 1 exclusive, 2 shared.
func kind(r, i int) int { return (i + r) % 3 }

// config is one run: rounds per rank; hot sends every exclusive and
// shared lock to rank 0 (one hot target) instead of spreading them.
type config struct {
	rounds  int
	hot     bool
	verbose bool // every rank prints its lock waits
}

// exclTarget and sharedTarget are the targets of rank r's round i.
func exclTarget(cfg config, r, i, n int) int {
	if cfg.hot {
		return 0
	}
	return (r + i) % n
}

func sharedTarget(cfg config, r, i, n int) int {
	if cfg.hot {
		return 0
	}
	return (r + 7*i + 1) % n
}

// increments is the number of exclusive increments rank t receives.
func increments(cfg config, t, n int) int64 {
	var c int64
	for r := range n {
		for i := range cfg.rounds {
			if kind(r, i) == 1 && exclTarget(cfg, r, i, n) == t {
				c++
			}
		}
	}
	return c
}

func run(w *rma.World, cfg config) (outcome, error) {
	rounds := cfg.rounds
	var o outcome
	n, me := w.Size(), w.Rank()
	win, err := rma.Allocate[int64](w, 2)
	if err != nil {
		return o, err
	}
	defer win.Free()
	red, err := coll.NewReducer[int64](w, 1)
	if err != nil {
		return o, err
	}
	defer red.Free()
	pair := make([]int64, 2)
	torn := int64(0)
	read := func(t int) error {
		if err := win.Get(pair, t, 0); err != nil {
			return err
		}
		if err := win.Flush(t); err != nil {
			return err
		}
		if pair[0] != pair[1] {
			torn++
		}
		return nil
	}
	if err := w.Barrier(); err != nil {
		return o, err
	}
	start := time.Now()
	var maxRound time.Duration
	var lockWait [3]time.Duration
	for i := range rounds {
		t0 := time.Now()
		switch kind(me, i) {
		case 0:
			tl := time.Now()
			err := win.LockAll(0)
			lockWait[0] += time.Since(tl)
			if err != nil {
				return o, fmt.Errorf("round %d: %w", i, err)
			}
			for t := range n {
				if err := read(t); err != nil {
					return o, err
				}
			}
			if err := win.UnlockAll(); err != nil {
				return o, err
			}
		case 1:
			t := exclTarget(cfg, me, i, n)
			tl := time.Now()
			err := win.Lock(t, rma.Exclusive, 0)
			lockWait[1] += time.Since(tl)
			if err != nil {
				return o, fmt.Errorf("round %d: %w", i, err)
			}
			one := []int64{0}
			if err := win.Get(one, t, 0); err != nil {
				return o, err
			}
			if err := win.Flush(t); err != nil {
				return o, err
			}
			one[0]++
			for d := range 2 {
				if err := win.Put(one, t, d); err != nil {
					return o, err
				}
				if err := win.Flush(t); err != nil {
					return o, err
				}
			}
			if err := win.Unlock(t); err != nil {
				return o, err
			}
		case 2:
			t := sharedTarget(cfg, me, i, n)
			tl := time.Now()
			err := win.Lock(t, rma.Shared, 0)
			lockWait[2] += time.Since(tl)
			if err != nil {
				return o, fmt.Errorf("round %d: %w", i, err)
			}
			if err := read(t); err != nil {
				return o, err
			}
			if err := win.Unlock(t); err != nil {
				return o, err
			}
		}
		maxRound = max(maxRound, time.Since(t0))
	}
	elapsed := time.Since(start)
	if cfg.verbose {
		fmt.Fprintf(os.Stderr, "rank %d: %v, of which waiting for lock_all %v, exclusive locks %v, shared locks %v\n", me,
			elapsed.Round(time.Millisecond), lockWait[0].Round(time.Millisecond), lockWait[1].Round(time.Millisecond), lockWait[2].Round(time.Millisecond))
	}
	if err := w.Barrier(); err != nil {
		return o, err
	}
	want := increments(cfg, me, n)
	local := win.Local()
	bad := torn
	if local[0] != want || local[1] != want {
		bad++
	}
	if bad, err = red.Sum(bad); err != nil {
		return o, err
	}
	ns, err := red.Max(int64(elapsed))
	if err != nil {
		return o, err
	}
	lw, err := red.Max(int64(lockWait[0] + lockWait[1] + lockWait[2]))
	if err != nil {
		return o, err
	}
	o.lockWait = time.Duration(lw)
	mr, err := red.Max(int64(maxRound))
	if err != nil {
		return o, err
	}
	o.elapsed, o.maxRound = time.Duration(ns), time.Duration(mr)
	o.verified = bad == 0
	if !o.verified {
		o.why = fmt.Sprintf("%d torn reads or wrong counters (rank %d: pair %v, want %d)", bad, me, local, want)
	}
	return o, nil
}
