package main

import (
	"fmt"
	"time"

	"github.com/rmago/rmago/ci/faults"
	"github.com/rmago/rmago/rma"
)

// job is one rank's state: its window and the buffers it writes from and
// reads back into.
type job struct {
	c      config
	w      *rma.World
	win    *rma.Window[uint64]
	layout faults.Layout
	me, n  int
	others []int        // every rank but this one, in order
	all    []int        // every rank
	src    [][]uint64   // by target: what this rank writes there this epoch
	back   [][]uint64   // by target: what it read back (lock modes)
	ck     faults.Check // this epoch's checks of fetch-and-add results
}

// newJob allocates the window, writes its initial contents and
// synchronizes once, so that nobody writes to a window not yet
// initialized. It is collective.
func newJob(w *rma.World, c config) (*job, error) {
	j := &job{c: c, w: w, me: w.Rank(), n: w.Size(), layout: faults.Layout{N: w.Size(), K: c.words}}
	var err error
	if j.win, err = rma.Allocate[uint64](w, j.layout.Len()); err != nil {
		return nil, err
	}
	j.layout.Init(j.win.Local(), j.me)
	for r := range j.n {
		j.all = append(j.all, r)
		if r != j.me {
			j.others = append(j.others, r)
		}
		j.src = append(j.src, make([]uint64, c.words))
		j.back = append(j.back, make([]uint64, c.words))
	}
	if err := w.Barrier(); err != nil {
		return nil, err
	}
	if c.mode == faults.Fence {
		if err := j.win.Fence(0); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// target returns the k-th rank this rank writes to in an epoch, starting
// after itself and ending with itself, so that ranks do not all start with
// the same target.
func (j *job) target(k int) int { return (j.me + 1 + k) % j.n }

// put writes this rank's epoch-e data to target's slot (once, or -burst
// times to the faulty rank from the fault epoch on), then counts the epoch
// in its counter there with a fetch-and-add, whose old value must be the
// number of its earlier epochs (a mismatch goes to j.ck).
func (j *job) put(t, e int) error {
	faults.Fill(j.src[t], j.me, t, e)
	reps := 1
	if t == j.c.faulty && e >= j.c.at && j.c.burst > 0 {
		reps = j.c.burst
	}
	for range reps {
		if err := j.win.Put(j.src[t], t, j.layout.Slot(faults.Buffer(e), j.me)); err != nil {
			return fmt.Errorf("Put: %w", err)
		}
	}
	old, err := j.win.FetchAndOp(1, t, j.layout.Counter(j.me), rma.Sum)
	if err != nil {
		return fmt.Errorf("FetchAndOp: %w", err)
	}
	if want := faults.Count(e - 1); old != want || j.ck.First == "" {
		j.ck.Word(old, want, fmt.Sprintf("fetch-and-add on this rank's counter at rank %d in epoch %d", t, e))
	} else {
		j.ck.Checked += 8
	}
	return nil
}

// epoch runs epoch e and checks what it can: the window's buffer of epoch e
// (active target modes) or what this rank wrote, read back from each
// target (passive target modes).
func (j *job) epoch(e int) (faults.Check, error) {
	j.ck = faults.Check{}
	var c faults.Check
	var err error
	switch j.c.mode {
	case faults.Fence:
		err = j.fenceEpoch(e)
	case faults.PSCW:
		err = j.pscwEpoch(e)
	case faults.Lock:
		c, err = j.lockEpoch(e)
	case faults.LockAll:
		c, err = j.lockAllEpoch(e)
	}
	c.Add(j.ck)
	if err != nil {
		return c, fmt.Errorf("epoch %d: %w", e, err)
	}
	if j.c.mode == faults.Lock || j.c.mode == faults.LockAll {
		return c, nil
	}
	c.Add(j.layout.ExactEpoch(j.win.Local(), j.me, e, j.all))
	return c, nil
}

func (j *job) fenceEpoch(e int) error {
	for k := range j.n {
		if err := j.put(j.target(k), e); err != nil {
			return err
		}
	}
	if err := j.win.Fence(0); err != nil {
		return fmt.Errorf("Fence: %w", err)
	}
	return nil
}

// pscwEpoch: every rank exposes its window to every other and accesses
// every other; its own slot it writes directly (PSCW groups are of others).
func (j *job) pscwEpoch(e int) error {
	if err := j.win.Post(j.others, 0); err != nil {
		return fmt.Errorf("Post: %w", err)
	}
	if err := j.win.Start(j.others, 0); err != nil {
		return fmt.Errorf("Start: %w", err)
	}
	for k := range j.n - 1 {
		if err := j.put(j.target(k), e); err != nil {
			return err
		}
	}
	if err := j.win.Complete(); err != nil {
		return fmt.Errorf("Complete: %w", err)
	}
	// This rank's own slot and counter, which no other rank touches.
	local := j.win.Local()
	s := j.layout.Slot(faults.Buffer(e), j.me)
	faults.Fill(local[s:s+j.c.words], j.me, j.me, e)
	old := local[j.layout.Counter(j.me)]
	j.ck.Word(old, faults.Count(e-1), fmt.Sprintf("this rank's own counter in epoch %d", e))
	local[j.layout.Counter(j.me)] = old + 1
	if err := j.win.Wait(); err != nil {
		return fmt.Errorf("Wait: %w", err)
	}
	return nil
}

// lockEpoch: for each target in turn, an exclusive lock, the put, a flush,
// the read-back, the unlock; then the read-back must be exact.
func (j *job) lockEpoch(e int) (faults.Check, error) {
	var c faults.Check
	slot := j.layout.Slot(faults.Buffer(e), j.me)
	for k := range j.n {
		t := j.target(k)
		if err := j.win.Lock(t, rma.Exclusive, 0); err != nil {
			return c, fmt.Errorf("Lock: %w", err)
		}
		err := j.put(t, e)
		if err == nil {
			if err = j.win.Flush(t); err != nil {
				err = fmt.Errorf("Flush: %w", err)
			}
		}
		if err == nil {
			if err = j.win.Get(j.back[t], t, slot); err != nil {
				err = fmt.Errorf("Get: %w", err)
			}
		}
		if uerr := j.win.Unlock(t); err == nil && uerr != nil {
			err = fmt.Errorf("Unlock: %w", uerr)
		}
		if err != nil {
			return c, err
		}
		c.Add(faults.Exact(j.back[t], j.me, t, e, "read back"))
	}
	return c, nil
}

// lockAllEpoch: LockAll, a put to every rank, FlushAll, a read-back from
// every rank, UnlockAll; then every read-back must be exact.
func (j *job) lockAllEpoch(e int) (faults.Check, error) {
	var c faults.Check
	slot := j.layout.Slot(faults.Buffer(e), j.me)
	if err := j.win.LockAll(0); err != nil {
		return c, fmt.Errorf("LockAll: %w", err)
	}
	var err error
	for k := 0; k < j.n && err == nil; k++ {
		err = j.put(j.target(k), e)
	}
	if err == nil {
		if err = j.win.FlushAll(); err != nil {
			err = fmt.Errorf("FlushAll: %w", err)
		}
	}
	for k := 0; k < j.n && err == nil; k++ {
		t := j.target(k)
		if err = j.win.Get(j.back[t], t, slot); err != nil {
			err = fmt.Errorf("Get: %w", err)
		}
	}
	if uerr := j.win.UnlockAll(); err == nil && uerr != nil {
		err = fmt.Errorf("UnlockAll: %w", uerr)
	}
	if err != nil {
		return c, err
	}
	for t := range j.n {
		c.Add(faults.Exact(j.back[t], j.me, t, e, "read back"))
	}
	return c, nil
}

// settled checks the window after an error (see faults.Layout.AfterFault).
// Live peers may still be finishing a write to it, so a check that finds
// something wrong is repeated, a few times, a while later: only what stays
// wrong counts.
func (j *job) settled(faulty, completed int) faults.Check {
	var c faults.Check
	for try := range 6 {
		if try > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		if c = j.layout.AfterFault(j.win.Local(), j.me, faulty, completed); c.Corrupt == 0 {
			break
		}
	}
	return c
}
