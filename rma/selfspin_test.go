package rma_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestSpinOnOwnWord: rank 0 spins on compare-and-swap of a word in its own
// window (requests that complete at once, on the loopback queue pair,
// without ever waiting) until rank 1, which took it, releases it. The
// release must get through although the spinning goroutine never blocks:
// under rmarun with GOMAXPROCS=1 (TestAsProcesses), nothing else would run
// the peer's request unless the spinner does. Each round the counter the
// word guards is exact.
func TestSpinOnOwnWord(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 2) // the word, the counter
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		const rounds = 5
		for round := int64(1); round <= rounds; round++ {
			if w.Rank() == 1 {
				if old, err := win.CompareAndSwap(0, 1, 0, 0); err != nil || old != 0 {
					return fmt.Errorf("round %d: rank 1 took the word: old %d, %v", round, old, err)
				}
			}
			if err := w.Barrier(); err != nil {
				return err
			}
			if w.Rank() == 1 {
				time.Sleep(20 * time.Millisecond) // rank 0 spins meanwhile
				if _, err := win.FetchAndOp(1, 0, 1, rma.Sum); err != nil {
					return err
				}
				if err := win.Flush(0); err != nil {
					return err
				}
				if old, err := win.CompareAndSwap(1, 0, 0, 0); err != nil || old != 1 {
					return fmt.Errorf("round %d: rank 1 released the word: old %d, %v", round, old, err)
				}
			} else {
				for {
					old, err := win.CompareAndSwap(0, 2, 0, 0)
					if err != nil {
						return err
					}
					if old == 0 {
						break
					}
				}
				if got := win.LoadLocal(1); got != round {
					return fmt.Errorf("round %d: counter %d under the word", round, got)
				}
				if _, err := win.CompareAndSwap(2, 0, 0, 0); err != nil {
					return err
				}
			}
			if err := w.Barrier(); err != nil {
				return err
			}
		}
		return errorsJoin(win.UnlockAll(), win.Free())
	})
}
