package rma_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestExclusiveLockCounter: every rank increments one counter at rank 0 K
// times with get-modify-put under an exclusive lock: exactly size*K.
func TestExclusiveLockCounter(t *testing.T) {
	const k = 25
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rmatest.Run(t, n, func(w *rma.World) error {
				win, err := rma.Allocate[int64](w, 2)
				if err != nil {
					return err
				}
				buf := make([]int64, 1)
				for i := 0; i < k; i++ {
					if err := win.Lock(0, rma.Exclusive, 0); err != nil {
						return err
					}
					if err := win.Get(buf, 0, 1); err != nil {
						return err
					}
					if err := win.Flush(0); err != nil {
						return err
					}
					buf[0]++
					if err := win.Put(buf, 0, 1); err != nil {
						return err
					}
					if err := win.Unlock(0); err != nil {
						return err
					}
				}
				if err := w.Barrier(); err != nil {
					return err
				}
				if w.Rank() == 0 {
					if got := win.LoadLocal(1); got != int64(n*k) {
						return fmt.Errorf("counter %d, want %d", got, n*k)
					}
				}
				return win.Free()
			})
		})
	}
}

// TestSharedReadersOneWriter: rank 0 writes pairs of equal values under an
// exclusive lock on rank 1; the others read the pair under shared locks and
// must never see it torn.
func TestSharedReadersOneWriter(t *testing.T) {
	const rounds = 40
	rmatest.Run(t, 4, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 512)
		if err != nil {
			return err
		}
		pair := make([]int64, 512)
		for i := 1; i <= rounds; i++ {
			if w.Rank() == 0 {
				for j := range pair {
					pair[j] = int64(i)
				}
				if err := win.Lock(1, rma.Exclusive, 0); err != nil {
					return err
				}
				if err := win.Put(pair[:256], 1, 0); err != nil {
					return err
				}
				if err := win.Flush(1); err != nil {
					return err
				}
				if err := win.Put(pair[256:], 1, 256); err != nil {
					return err
				}
				if err := win.Unlock(1); err != nil {
					return err
				}
				continue
			}
			if w.Rank() == 1 {
				continue
			}
			if err := win.Lock(1, rma.Shared, 0); err != nil {
				return err
			}
			if err := win.Get(pair, 1, 0); err != nil {
				return err
			}
			if err := win.Unlock(1); err != nil {
				return err
			}
			for j := range pair {
				if pair[j] != pair[0] {
					return fmt.Errorf("torn read: element %d = %d, element 0 = %d", j, pair[j], pair[0])
				}
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		return win.Free()
	})
}

// TestLockAllFlushLoop: under one LockAll epoch every rank writes its rank
// into its slot at every rank and flushes, many times; after a barrier each
// window holds every rank's last value.
func TestLockAllFlushLoop(t *testing.T) {
	rmatest.Run(t, 4, func(w *rma.World) error {
		n := w.Size()
		win, err := rma.Allocate[int32](w, n)
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		v := make([]int32, 1)
		for it := 1; it <= 30; it++ {
			v[0] = int32(w.Rank()*1000 + it)
			for r := range n {
				if err := win.Put(v, r, w.Rank()); err != nil {
					return err
				}
			}
			if err := win.FlushAll(); err != nil {
				return err
			}
		}
		if err := win.UnlockAll(); err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		win.Sync()
		for r := range n {
			if got := win.LoadLocal(r); got != int32(r*1000+30) {
				return fmt.Errorf("slot %d = %d", r, got)
			}
		}
		return win.Free()
	})
}

// TestPSCWRing: each rank exposes its window to its left neighbour and
// accesses its right one, many iterations, data checked every time.
func TestPSCWRing(t *testing.T) {
	for _, n := range []int{2, 3, 6} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rmatest.Run(t, n, func(w *rma.World) error {
				me := w.Rank()
				left, right := (me+n-1)%n, (me+1)%n
				win, err := rma.Allocate[float64](w, 64)
				if err != nil {
					return err
				}
				data := make([]float64, 64)
				for it := 0; it < 30; it++ {
					if err := win.Post([]int{left}, 0); err != nil {
						return err
					}
					if err := win.Start([]int{right}, 0); err != nil {
						return err
					}
					for i := range data {
						data[i] = float64(me*10000 + it*100 + i)
					}
					if err := win.Put(data, right, 0); err != nil {
						return err
					}
					if err := win.Complete(); err != nil {
						return err
					}
					if err := win.Wait(); err != nil {
						return err
					}
					for i, v := range win.Local() {
						if want := float64(left*10000 + it*100 + i); v != want {
							return fmt.Errorf("iteration %d: element %d = %v, want %v", it, i, v, want)
						}
					}
				}
				return win.Free()
			})
		})
	}
}

// TestPSCWStar: rank 0 exposes to every other rank, which each put into
// its own slot; then the reverse, rank 0 accessing all others with Get;
// Test polls the exposure's end.
func TestPSCWStar(t *testing.T) {
	rmatest.Run(t, 5, func(w *rma.World) error {
		me, n := w.Rank(), w.Size()
		win, err := rma.Allocate[int64](w, n)
		if err != nil {
			return err
		}
		others := make([]int, 0, n-1)
		for r := 1; r < n; r++ {
			others = append(others, r)
		}
		win.Local()[0] = int64(me * 7)
		if me == 0 {
			if err := win.Post(others, 0); err != nil {
				return err
			}
			for {
				done, err := win.Test()
				if err != nil {
					return err
				}
				if done {
					break
				}
			}
			for r := 1; r < n; r++ {
				if got := win.Local()[r]; got != int64(r*r) {
					return fmt.Errorf("slot %d = %d", r, got)
				}
			}
			// Reverse: rank 0 reads everyone's element 0.
			got := make([]int64, n)
			if err := win.Start(others, 0); err != nil {
				return err
			}
			for r := 1; r < n; r++ {
				if err := win.Get(got[r:r+1], r, 0); err != nil {
					return err
				}
			}
			if err := win.Complete(); err != nil {
				return err
			}
			for r := 1; r < n; r++ {
				if got[r] != int64(r*7) {
					return fmt.Errorf("got %d from rank %d", got[r], r)
				}
			}
		} else {
			if err := win.Start([]int{0}, 0); err != nil {
				return err
			}
			if err := win.Put([]int64{int64(me * me)}, 0, me); err != nil {
				return err
			}
			if err := win.Complete(); err != nil {
				return err
			}
			if err := win.Post([]int{0}, 0); err != nil {
				return err
			}
			if err := win.Wait(); err != nil {
				return err
			}
		}
		return win.Free()
	})
}

// TestEpochMisuse: each misuse returns its error and leaves the window usable.
func TestEpochMisuse(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 4)
		if err != nil {
			return err
		}
		other := 1 - w.Rank()
		check := func(name string, err, want error) error {
			if !errors.Is(err, want) {
				return fmt.Errorf("%s: got %v, want %v", name, err, want)
			}
			return nil
		}
		if err := errors.Join(
			check("put with no epoch", win.Put([]int64{1}, other, 0), rma.ErrNoEpoch),
			check("unlock without lock", win.Unlock(other), rma.ErrNotLocked),
			check("unlock_all without lock_all", win.UnlockAll(), rma.ErrNotLocked),
			check("complete without start", win.Complete(), rma.ErrNotStarted),
			check("wait without post", win.Wait(), rma.ErrNotPosted),
			check("bad group", win.Start([]int{other, other}, 0), rma.ErrGroup),
			check("bad lock rank", win.Lock(7, rma.Shared, 0), rma.ErrRank),
		); err != nil {
			return err
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		if err := errors.Join(
			check("lock inside a fence epoch", win.Lock(other, rma.Shared, 0), rma.ErrEpochConflict),
			check("lock_all inside a fence epoch", win.LockAll(0), rma.ErrEpochConflict),
			check("start inside a fence epoch", win.Start([]int{other}, 0), rma.ErrEpochConflict),
		); err != nil {
			return err
		}
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		if err := win.Lock(other, rma.Shared, 0); err != nil {
			return err
		}
		if err := errors.Join(
			check("fence while locked", win.Fence(0), rma.ErrEpochConflict),
			check("free while locked", win.Free(), rma.ErrEpochOpen),
			check("put outside the locked rank", win.Put([]int64{1}, w.Rank(), 0), rma.ErrNoEpoch),
		); err != nil {
			return err
		}
		// Still usable: a put under the lock lands.
		if err := win.Put([]int64{int64(10 + w.Rank())}, other, 3); err != nil {
			return err
		}
		if err := win.Unlock(other); err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if got := win.LoadLocal(3); got != int64(10+other) {
			return fmt.Errorf("put under lock landed %d", got)
		}
		return win.Free()
	})
}

// TestAwaitLocalFlag: rank 0 puts data, flushes, then sets rank 1's flag
// with an atomic under a lock; rank 1 waits on the flag with AwaitLocal and
// must then see the data (the pattern of docs/memory-model.md).
func TestAwaitLocalFlag(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 65)
		if err != nil {
			return err
		}
		const flag = 64
		for round := int64(1); round <= 20; round++ {
			if w.Rank() == 0 {
				data := make([]int64, 64)
				for i := range data {
					data[i] = round*100 + int64(i)
				}
				if err := win.Lock(1, rma.Exclusive, 0); err != nil {
					return err
				}
				if err := win.Put(data, 1, 0); err != nil {
					return err
				}
				if err := win.Flush(1); err != nil {
					return err
				}
				if err := win.Accumulate([]int64{round}, 1, flag, rma.Replace); err != nil {
					return err
				}
				if err := win.Unlock(1); err != nil {
					return err
				}
			} else {
				if err := win.AwaitLocal(flag, func(v int64) bool { return v == round }); err != nil {
					return err
				}
				for i, v := range win.Local()[:64] {
					if v != round*100+int64(i) {
						return fmt.Errorf("round %d: element %d = %d after the flag", round, i, v)
					}
				}
			}
			if err := w.Barrier(); err != nil {
				return err
			}
		}
		if err := win.AwaitLocal(99, func(int64) bool { return true }); !errors.Is(err, rma.ErrRange) {
			return fmt.Errorf("AwaitLocal out of range: %v", err)
		}
		return win.Free()
	})
}

// TestCloseWithOpenWindows: windows left open (after PSCW epochs, a fence
// epoch, a lock) are released by Close without hanging.
func TestCloseWithOpenWindows(t *testing.T) {
	rmatest.Run(t, 3, func(w *rma.World) error {
		me, n := w.Rank(), w.Size()
		p, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		f, err := rma.Create(w, make([]float32, 4))
		if err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			if err := p.Post([]int{(me + n - 1) % n}, 0); err != nil {
				return err
			}
			if err := p.Start([]int{(me + 1) % n}, 0); err != nil {
				return err
			}
			if err := p.Put([]int64{int64(i)}, (me+1)%n, 0); err != nil {
				return err
			}
			if err := p.Complete(); err != nil {
				return err
			}
			if err := p.Wait(); err != nil {
				return err
			}
		}
		if err := f.Fence(0); err != nil {
			return err
		}
		return f.Put([]float32{1}, (me+1)%n, 0) // still in flight at Close
	})
}
