package rma_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestUnlockCompletesAcrossRanks: Unlock returns only once its puts are in
// the target's memory, even though the release may travel without being
// awaited. Rank 0 puts a block into rank 1 under an exclusive lock (puts
// only: the release is awaited) or after a get (the release is not
// awaited), unlocks, and only then tells rank 2 through another queue
// pair; rank 2 reads rank 1's block under a shared lock and must find
// every element.
func TestUnlockCompletesAcrossRanks(t *testing.T) {
	const rounds, n = 30, 64
	rmatest.Run(t, 3, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, n+1)
		if err != nil {
			return err
		}
		const flag = n
		data, got, one := make([]int64, n), make([]int64, n), make([]int64, 1)
		for round := int64(1); round <= rounds; round++ {
			switch w.Rank() {
			case 0:
				for i := range data {
					data[i] = round*1000 + int64(i)
				}
				if err := win.Lock(1, rma.Exclusive, 0); err != nil {
					return err
				}
				if round%2 == 0 {
					// A read first: Unlock flushes it and then need not
					// wait for the release.
					if err := win.Get(one, 1, 0); err != nil {
						return err
					}
					if err := win.Flush(1); err != nil {
						return err
					}
				}
				if err := win.Put(data, 1, 0); err != nil {
					return err
				}
				if err := win.Unlock(1); err != nil {
					return err
				}
				if err := win.Lock(2, rma.Exclusive, 0); err != nil {
					return err
				}
				if err := win.Accumulate([]int64{round}, 2, flag, rma.Replace); err != nil {
					return err
				}
				if err := win.Unlock(2); err != nil {
					return err
				}
			case 2:
				if err := win.AwaitLocal(flag, func(v int64) bool { return v == round }); err != nil {
					return err
				}
				if err := win.Lock(1, rma.Shared, 0); err != nil {
					return err
				}
				if err := win.Get(got, 1, 0); err != nil {
					return err
				}
				if err := win.Unlock(1); err != nil {
					return err
				}
				for i, v := range got {
					if v != round*1000+int64(i) {
						return fmt.Errorf("round %d: rank 1's element %d = %d after rank 0's Unlock returned, want %d", round, i, v, round*1000+int64(i))
					}
				}
			}
			if err := w.Barrier(); err != nil {
				return err
			}
		}
		return win.Free()
	})
}

// TestExclusivePutsNeverInterleave: every rank but 0 repeatedly takes an
// exclusive lock on rank 0 and, with separate puts, writes its stamp into
// both halves of a block; under the lock it first reads the block back and
// checks that both halves carry one stamp. Puts that landed outside a held
// lock (before the lock was held, or after a release overtook them) would
// tear the block. Half the epochs read first (Unlock then posts the
// release without waiting), half only put (Unlock waits for the release).
func TestExclusivePutsNeverInterleave(t *testing.T) {
	const rounds, half = 25, 16
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rmatest.Run(t, n, func(w *rma.World) error {
				win, err := rma.Allocate[int64](w, 2*half)
				if err != nil {
					return err
				}
				if err := exclusiveRounds(w, win, rounds, half, 2, func(stamp []int64) error {
					return errors.Join(win.Put(stamp, 0, 0), win.Put(stamp, 0, half))
				}); err != nil {
					return err
				}
				return win.Free()
			})
		})
	}
}

// TestExclusiveAccumulatesNeverInterleave: as TestExclusivePutsNeverInterleave
// with accumulates: each rank but 0 replaces both halves of rank 0's block
// with its stamp by two bulk Accumulate(Replace) calls and adds one to a
// counter word (a lone 8-byte Sum: one remote fetch-and-add, not awaited),
// then unlocks. On providers that execute atomics in order
// (AtomicsInOrder: soft, shm), Unlock posts the release behind them
// without flushing them first; a release that overtook them would let
// the next holder find a torn block, or lose an increment.
func TestExclusiveAccumulatesNeverInterleave(t *testing.T) {
	const rounds, half = 20, 4096
	const n = 3
	rmatest.Run(t, n, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 2*half+1)
		if err != nil {
			return err
		}
		if err := exclusiveRounds(w, win, rounds, half, 3, func(stamp []int64) error {
			return errors.Join(win.Accumulate(stamp, 0, 0, rma.Replace), win.Accumulate(stamp, 0, half, rma.Replace),
				win.Accumulate([]int64{1}, 0, 2*half, rma.Sum))
		}); err != nil {
			return err
		}
		if w.Rank() == 0 {
			if got, want := win.Local()[2*half], int64((n-1)*rounds); got != want {
				return fmt.Errorf("counter %d, want %d", got, want)
			}
		}
		return win.Free()
	})
}

// exclusiveRounds runs the rounds of the NeverInterleave tests: every rank
// but 0 takes an exclusive lock on rank 0, in one round of every readEvery
// first reads the block (win's first 2*half elements) back and checks it
// whole, writes its stamp (rank*1000 + round) with write, and unlocks.
// After a barrier, rank 0 checks the final block whole and stamped by
// some rank's last round.
func exclusiveRounds(w *rma.World, win *rma.Window[int64], rounds int64, half int, readEvery int64, write func(stamp []int64) error) error {
	me := int64(w.Rank())
	stamp, seen := make([]int64, half), make([]int64, 2*half)
	for round := int64(1); round <= rounds && me != 0; round++ {
		if err := win.Lock(0, rma.Exclusive, 0); err != nil {
			return err
		}
		if round%readEvery == 1%readEvery {
			if err := errors.Join(win.Get(seen, 0, 0), win.Flush(0)); err != nil {
				return err
			}
			if err := wholeBlock(seen); err != nil {
				return fmt.Errorf("rank %d round %d: under an exclusive lock: %w", me, round, err)
			}
		}
		for i := range stamp {
			stamp[i] = me*1000 + round
		}
		if err := errors.Join(write(stamp), win.Unlock(0)); err != nil {
			return err
		}
	}
	if err := w.Barrier(); err != nil {
		return err
	}
	if me != 0 {
		return nil
	}
	b := win.Local()[:2*half]
	if b[0]%1000 != rounds {
		return fmt.Errorf("final stamp %d, want some rank's last round %d", b[0], rounds)
	}
	if err := wholeBlock(b); err != nil {
		return fmt.Errorf("final block: %w", err)
	}
	return nil
}

// wholeBlock checks that every element of b equals the first.
func wholeBlock(b []int64) error {
	for i := range b {
		if b[i] != b[0] {
			return fmt.Errorf("block torn: element %d = %d, element 0 = %d", i, b[i], b[0])
		}
	}
	return nil
}
