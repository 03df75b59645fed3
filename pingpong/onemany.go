package main

import (
	"errors"
	"fmt"

	"github.com/rmago/rmago/rma"
)

var oneManyModes = []string{"fence3", "fence2", "pscw"}

func runOneMany(args []string) error {
	var s sweep
	fs := newFlagSet("onemany", "rmarun -n N pingpong onemany [-mode fence3,fence2,pscw|all] [-min E] [-max E] [-reps R] [-warmup W] [-iters I] [-single] [-quick] [-json F] [-csv F]")
	s.register(fs, "fence3")
	if err := parse(fs, args); err != nil {
		return err
	}
	modes, err := s.finish(fs, oneManyModes)
	if err != nil {
		return err
	}
	j, err := startJob(&s.common, "one-to-many ping-pong", 2, 0)
	if err != nil {
		return err
	}
	return j.finish(oneMany(j, &s, modes))
}

// star is the state of a one-to-many ping-pong: rank 0 is the root.
type star struct {
	me, size int
	peers    []int                // 1..size-1 (on the root), or [0]
	win      *rma.Window[float64] // root: size-1 slots of 2^max; peers: 2^max
	src      *rma.Window[float64] // the root's registered origin
	round    int
	// Labels for verify's errors, made once: formatting them in every
	// round trip cost about a third of shm's one-to-many round trip.
	afterPut string   // a peer's, after the root's put
	slotOf   []string // the root's, per peer rank: its slot
}

func oneMany(j *job, s *sweep, modes []string) (err error) {
	var ws windows
	defer func() { ws.free(&err) }()
	maxN := 1 << s.maxExp
	st := &star{me: j.w.Rank(), size: j.w.Size()}
	// The root holds a slot per peer and an origin; each peer one window.
	if err := checkMemory(8*maxN*(2*st.size-1)/st.size, st.size); err != nil {
		return err
	}
	n := maxN
	if st.me == 0 {
		n = (st.size - 1) * maxN
		st.slotOf = make([]string, st.size)
		for r := 1; r < st.size; r++ {
			st.peers = append(st.peers, r)
			st.slotOf[r] = fmt.Sprintf("the root, slot of rank %d", r)
		}
	} else {
		st.peers = []int{0}
		st.afterPut = fmt.Sprintf("rank %d after the root's put", st.me)
	}
	if st.win, err = newWindow[float64](j.w, n, s.window); err != nil {
		return err
	}
	ws = append(ws, st.win)
	srcN := 0
	if st.me == 0 {
		srcN = maxN
	}
	if st.src, err = rma.Allocate[float64](j.w, srcN); err != nil {
		return err
	}
	ws = append(ws, st.src)
	steps := len(modes) * (s.maxExp - s.minExp + 1)
	step := 0
	for _, mode := range modes {
		rt := st.fence2
		switch mode {
		case "fence3":
			rt = st.fence3
		case "pscw":
			rt = st.pscw
		case "fence2":
			if err := st.win.Fence(0); err != nil {
				return err
			}
		}
		if err := j.runSweep(s, "onemany", mode, st.size, mode != "fence3", rt, &step, steps); err != nil {
			return err
		}
		if mode != "pscw" {
			if err := st.win.Fence(rma.NoSucceed); err != nil {
				return err
			}
		}
		if err := j.w.Barrier(); err != nil {
			return err
		}
	}
	return nil
}

// slot is peer r's slot in the root's window for n elements.
func (st *star) slot(r, n int) []float64 { return st.win.Local()[(r-1)*n : r*n] }

func (st *star) fence3(n int, full bool) error {
	if err := st.win.Fence(0); err != nil {
		return err
	}
	return st.fence2(n, full)
}

// fence2: the root puts to every peer; fence; every peer puts back into its
// slot of the root's window; fence.
func (st *star) fence2(n int, full bool) error {
	st.round++
	win := st.win
	if st.me == 0 {
		out := st.src.Local()[:n]
		fill(out, st.round, full)
		for _, r := range st.peers {
			if err := win.Put(out, r, 0); err != nil {
				return err
			}
		}
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	if st.me != 0 {
		data := win.Local()[:n]
		if err := verify(data, st.round, full, st.afterPut); err != nil {
			return err
		}
		if err := win.Put(data, 0, (st.me-1)*n); err != nil {
			return err
		}
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	return st.verifySlots(n, full)
}

func (st *star) verifySlots(n int, full bool) error {
	if st.me != 0 {
		return nil
	}
	for _, r := range st.peers {
		if err := verify(st.slot(r, n), st.round, full, st.slotOf[r]); err != nil {
			return err
		}
	}
	return nil
}

// pscw: the root starts an access epoch to every peer, puts, completes,
// then posts to every peer and waits; each peer posts to the root, waits,
// starts, puts back into its slot and completes.
func (st *star) pscw(n int, full bool) error {
	st.round++
	win := st.win
	if st.me == 0 {
		out := st.src.Local()[:n]
		fill(out, st.round, full)
		if err := win.Start(st.peers, 0); err != nil {
			return err
		}
		for _, r := range st.peers {
			if err := win.Put(out, r, 0); err != nil {
				return err
			}
		}
		if err := errors.Join(win.Complete(), win.Post(st.peers, 0), win.Wait()); err != nil {
			return err
		}
		return st.verifySlots(n, full)
	}
	data := win.Local()[:n]
	if err := errors.Join(win.Post(st.peers, 0), win.Wait()); err != nil {
		return err
	}
	if err := verify(data, st.round, full, st.afterPut); err != nil {
		return err
	}
	return errors.Join(win.Start(st.peers, 0), win.Put(data, 0, (st.me-1)*n), win.Complete())
}
