package main

import (
	"errors"
	"os"

	"github.com/rmago/rmago/rma"
)

// corrupt (set by the tests through the environment) makes rank 1 change
// an element before it puts the data back, to show that a run that moves
// wrong data fails.
var corrupt = os.Getenv("PINGPONG_TEST_CORRUPT") != ""

var oneOneModes = []string{"fence3", "fence2", "pscw", "lock", "lockall", "get"}

func runOneOne(args []string) error {
	var s sweep
	fs := newFlagSet("oneone", "rmarun -n 2 pingpong [oneone] [-mode fence3,...|all] [-min E] [-max E] [-reps R] [-warmup W] [-iters I] [-single] [-quick] [-json F] [-csv F]")
	s.register(fs, "fence3")
	if err := parse(fs, args); err != nil {
		return err
	}
	modes, err := s.finish(fs, oneOneModes)
	if err != nil {
		return err
	}
	j, err := startJob(&s.common, "one-to-one ping-pong", 2, 2)
	if err != nil {
		return err
	}
	return j.finish(oneOne(j, &s, modes))
}

// pair is the state of a one-to-one ping-pong.
type pair struct {
	me, peer int
	group    []int                // {peer}: PSCW's group, made once
	win      *rma.Window[float64] // 2^max data elements, then the flag
	src      *rma.Window[float64] // rank 0's registered origin, and where its gets land
	flagAt   int                  // index of the flag element in win
	round    int                  // round trips so far: the stamp
}

func oneOne(j *job, s *sweep, modes []string) (err error) {
	var ws windows
	defer func() { ws.free(&err) }()
	maxN := 1 << s.maxExp
	if err := checkMemory(16*maxN, 2); err != nil { // window and origin, per rank
		return err
	}
	p := &pair{me: j.w.Rank(), peer: 1 - j.w.Rank(), flagAt: maxN}
	p.group = []int{p.peer}
	if p.win, err = newWindow[float64](j.w, maxN+1, s.window); err != nil {
		return err
	}
	ws = append(ws, p.win)
	if p.src, err = rma.Allocate[float64](j.w, maxN); err != nil {
		return err
	}
	ws = append(ws, p.src)
	steps := len(modes) * (s.maxExp - s.minExp + 1)
	step := 0
	for _, mode := range modes {
		if err := p.runMode(j, s, mode, &step, steps); err != nil {
			return err
		}
	}
	return nil
}

// runMode opens what the mode needs, sweeps the sizes, and closes it.
func (p *pair) runMode(j *job, s *sweep, mode string, step *int, steps int) error {
	rt := map[string]roundTrip{
		"fence3": p.fence3, "fence2": p.fence2, "pscw": p.pscw,
		"lock": p.lock, "lockall": p.lockAll, "get": p.get,
	}[mode]
	win := p.win
	switch mode {
	case "fence2":
		if err := win.Fence(0); err != nil {
			return err
		}
	case "lockall":
		if err := win.LockAll(0); err != nil {
			return err
		}
	}
	err := j.runSweep(s, "oneone", mode, 2, mode != "fence3", rt, step, steps)
	if err != nil {
		return err
	}
	switch mode {
	case "fence3", "fence2", "get":
		err = win.Fence(rma.NoSucceed)
	case "lockall":
		err = win.UnlockAll()
	}
	if err == nil {
		err = j.w.Barrier()
	}
	return err
}

// fence3 is the round trip of the reference method (docs/benchmarks.md):
// fence; rank 0 puts; fence; rank 1 puts back; fence.
func (p *pair) fence3(n int, full bool) error {
	if err := p.win.Fence(0); err != nil {
		return err
	}
	return p.fence2(n, full)
}

// fence2 is the steady-state round trip: put; fence; put back; fence.
func (p *pair) fence2(n int, full bool) error {
	p.round++
	win, data := p.win, p.win.Local()[:n]
	if p.me == 0 {
		out := p.src.Local()[:n]
		fill(out, p.round, full)
		if err := win.Put(out, 1, 0); err != nil {
			return err
		}
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	if p.me == 1 {
		if err := verify(data, p.round, full, "rank 1 after the put"); err != nil {
			return err
		}
		if corrupt {
			data[0]++
		}
		if err := win.Put(data, 0, 0); err != nil {
			return err
		}
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	if p.me == 0 {
		return verify(data, p.round, full, "rank 0 after the put back")
	}
	return nil
}

// pscw: rank 0 starts, puts, completes, posts and waits; rank 1 posts,
// waits, starts, puts back and completes.
func (p *pair) pscw(n int, full bool) error {
	p.round++
	win, data, peer := p.win, p.win.Local()[:n], p.group
	if p.me == 0 {
		out := p.src.Local()[:n]
		fill(out, p.round, full)
		if err := errors.Join(win.Start(peer, 0), win.Put(out, 1, 0), win.Complete()); err != nil {
			return err
		}
		if err := errors.Join(win.Post(peer, 0), win.Wait()); err != nil {
			return err
		}
		return verify(data, p.round, full, "rank 0 after the put back")
	}
	if err := errors.Join(win.Post(peer, 0), win.Wait()); err != nil {
		return err
	}
	if err := verify(data, p.round, full, "rank 1 after the put"); err != nil {
		return err
	}
	return errors.Join(win.Start(peer, 0), win.Put(data, 0, 0), win.Complete())
}

// lock: each leg is an exclusive lock on the peer, the data put, a flush,
// the peer's flag set with Accumulate(Replace), and the unlock; the peer
// polls its own flag (LoadLocal, then Sync) before it reads the data.
func (p *pair) lock(n int, full bool) error {
	return p.passive(n, full, false)
}

// lockAll: as lock, inside the LockAll epoch that runMode opened, with
// Flush instead of lock and unlock.
func (p *pair) lockAll(n int, full bool) error {
	return p.passive(n, full, true)
}

func (p *pair) passive(n int, full, all bool) error {
	p.round++
	win, data := p.win, p.win.Local()[:n]
	seq := float64(p.round)
	send := func(out []float64) error {
		if !all {
			if err := win.Lock(p.peer, rma.Exclusive, 0); err != nil {
				return err
			}
		}
		err := errors.Join(win.Put(out, p.peer, 0), win.Flush(p.peer),
			win.Accumulate([]float64{seq}, p.peer, p.flagAt, rma.Replace))
		if !all {
			err = errors.Join(err, win.Unlock(p.peer))
		}
		return err
	}
	if p.me == 0 {
		out := p.src.Local()[:n]
		fill(out, p.round, full)
		if err := send(out); err != nil {
			return err
		}
		if err := pollFlag(win, p.flagAt, seq); err != nil {
			return err
		}
		return verify(data, p.round, full, "rank 0 after the put back")
	}
	if err := pollFlag(win, p.flagAt, seq); err != nil {
		return err
	}
	if err := verify(data, p.round, full, "rank 1 after the put"); err != nil {
		return err
	}
	return send(data)
}

// get: the targets pull. Rank 0 stamps its own window; fence; rank 1 gets
// the elements into its window; fence; rank 0 gets them back; fence.
func (p *pair) get(n int, full bool) error {
	p.round++
	win, data := p.win, p.win.Local()[:n]
	if p.me == 0 {
		fill(data, p.round, full)
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	if p.me == 1 {
		if err := win.Get(data, 0, 0); err != nil {
			return err
		}
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	back := p.src.Local()[:n]
	if p.me == 1 {
		if err := verify(data, p.round, full, "rank 1 after its get"); err != nil {
			return err
		}
	} else if err := win.Get(back, 1, 0); err != nil {
		return err
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	if p.me == 0 {
		return verify(back, p.round, full, "rank 0 after its get")
	}
	return nil
}
