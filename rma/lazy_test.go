package rma_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestLazyLocksExclude: three ranks take exclusive locks on each other in
// rounds and, under each, put their stamp into both halves of the target's
// block from registered memory (the first put may carry a lazy lock's
// atomics: soft, when this rank or the target is rank 0), add one to the
// target's counter, and read the block back: it must hold their stamp
// whole, whether the carried put landed or was skipped and made again.
// Every third round a rank takes LockAll instead and checks that every
// block is whole (an exclusive writer of a block would tear it), so that
// carried puts meet lock_all holders at the leader and are skipped; every
// fourth exclusive round is a shared lock instead, whose first put (into
// the rank's own slot, after the block and counter) carries the lock and
// which then checks the block whole. The counters and slots end exact.
func TestLazyLocksExclude(t *testing.T) {
	const n, rounds, half = 3, 40, 64
	const counter, slots = 2 * half, 2*half + 1
	rmatest.Run(t, n, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 2*half+1+n)
		if err != nil {
			return err
		}
		src, err := rma.Allocate[int64](w, half)
		if err != nil {
			return err
		}
		dst, err := rma.Allocate[int64](w, 2*half) // registered: a first Get into it may carry the lock
		if err != nil {
			return err
		}
		me := w.Rank()
		seen := make([]int64, 2*half)
		whole := func(b []int64, where string) error {
			if err := wholeBlock(b); err != nil {
				return fmt.Errorf("rank %d: %s: %w", me, where, err)
			}
			return nil
		}
		locked := make([]int64, n)     // exclusive rounds this rank ran on each target
		lastShared := make([]int64, n) // this rank's last stamp in its slot at each target
		for round := 0; round < rounds; round++ {
			if (round+me)%3 == 2 {
				if err := win.LockAll(0); err != nil {
					return err
				}
				for t := range n {
					if err := errors.Join(win.Get(seen, t, 0), win.Flush(t)); err != nil {
						return err
					}
					if err := whole(seen, fmt.Sprintf("rank %d's block under LockAll", t)); err != nil {
						return err
					}
				}
				if err := win.UnlockAll(); err != nil {
					return err
				}
				continue
			}
			t := (me + 1 + round%(n-1)) % n
			stamp := int64(1000*(me+1) + round)
			for i := range src.Local() {
				src.Local()[i] = stamp
			}
			if round%4 == 3 {
				// A shared lock whose first operation, a get, carries it.
				if err := errors.Join(win.Lock(t, rma.Shared, 0), win.Get(dst.Local(), t, 0),
					win.Put(src.Local()[:1], t, slots+me), win.Flush(t)); err != nil {
					return err
				}
				if err := whole(dst.Local(), fmt.Sprintf("rank %d's block under a shared lock", t)); err != nil {
					return err
				}
				if err := win.Unlock(t); err != nil {
					return err
				}
				lastShared[t] = stamp
				continue
			}
			if err := errors.Join(win.Lock(t, rma.Exclusive, 0),
				win.Put(src.Local(), t, 0), win.Put(src.Local(), t, half),
				win.Accumulate([]int64{1}, t, counter, rma.Sum),
				win.Get(seen, t, 0), win.Flush(t)); err != nil {
				return err
			}
			for i, v := range seen {
				if v != stamp {
					return fmt.Errorf("rank %d round %d: rank %d's element %d = %d under its exclusive lock, want %d", me, round, t, i, v, stamp)
				}
			}
			if err := win.Unlock(t); err != nil {
				return err
			}
			locked[t]++
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		// Every rank's count of its rounds on each target, summed at the
		// target through its counter; every rank's last shared stamp here.
		counts, err := rma.Allocate[int64](w, n)
		if err != nil {
			return err
		}
		if err := exchange(counts, locked); err != nil {
			return err
		}
		var mine int64
		for _, c := range counts.Local() {
			mine += c
		}
		if got := win.Local()[counter]; got != mine {
			return fmt.Errorf("rank %d: counter %d, want %d", me, got, mine)
		}
		if err := exchange(counts, lastShared); err != nil {
			return err
		}
		for r, want := range counts.Local() {
			if got := win.Local()[slots+r]; r != me && got != want {
				return fmt.Errorf("rank %d: rank %d's slot holds %d, want its last shared stamp %d", me, r, got, want)
			}
		}
		if err := whole(win.Local()[:2*half], "the final block"); err != nil {
			return err
		}
		return errors.Join(counts.Free(), dst.Free(), src.Free(), win.Free())
	})
}

// exchange puts vals[t] into element rank of every rank t's window (an
// all-to-all of one element per pair), between two fences.
func exchange(win *rma.Window[int64], vals []int64) error {
	if err := win.Fence(0); err != nil {
		return err
	}
	for t := range vals {
		if err := win.Put(vals[t:t+1], t, win.World().Rank()); err != nil {
			return err
		}
	}
	return win.Fence(rma.NoSucceed)
}

// TestLazyLockWithoutOperations: an exclusive lock with no operation, or
// only a Flush, unlocks without error, and leaves the target free for the
// other rank's exclusive lock and put.
func TestLazyLockWithoutOperations(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		other := 1 - w.Rank()
		for range 3 {
			if err := errors.Join(win.Lock(other, rma.Exclusive, 0), win.Unlock(other),
				win.Lock(other, rma.Exclusive, 0), win.Flush(other), win.Unlock(other)); err != nil {
				return err
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if err := errors.Join(win.Lock(other, rma.Exclusive, 0), win.Put([]int64{int64(10 + w.Rank())}, other, 0), win.Unlock(other)); err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if got, want := win.Local()[0], int64(10+other); got != want {
			return fmt.Errorf("rank %d holds %d, want %d", w.Rank(), got, want)
		}
		return win.Free()
	})
}
