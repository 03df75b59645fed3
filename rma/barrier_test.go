package rma_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestBarrierWaitsForEveryRank: after barriers and lock epochs that every
// rank took part in, a barrier that one rank enters late fails on every
// other rank with a timeout (never passes on notifications left over from
// earlier barriers).
func TestBarrierWaitsForEveryRank(t *testing.T) {
	shortTimeout(t, time.Second)
	const n, absent = 6, 5
	var survivors sync.WaitGroup // rank absent comes once they all had their error
	survivors.Add(n - 1)
	rmatest.Run(t, n, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 64)
		if err != nil {
			return err
		}
		for e := range 10 {
			for k := 1; k < n; k++ {
				tg := (w.Rank() + k) % n
				if err := errors.Join(win.Lock(tg, rma.Exclusive, 0), win.Put([]int64{int64(e)}, tg, w.Rank()), win.Unlock(tg)); err != nil {
					return err
				}
			}
			if e%3 == 0 {
				if err := w.Barrier(); err != nil {
					return err
				}
			}
		}
		if w.Rank() == absent {
			// Late: it enters once every other rank's barrier has failed,
			// and finds their notifications there.
			survivors.Wait()
			return w.Barrier()
		}
		err = w.Barrier()
		survivors.Done()
		if !errors.Is(err, rma.ErrTimeout) && !errors.Is(err, rma.ErrPeer) {
			return fmt.Errorf("barrier without rank %d: %v, want a timeout", absent, err)
		}
		return nil
	})
}
