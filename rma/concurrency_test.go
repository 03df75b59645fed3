package rma_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
	"github.com/rmago/rmago/transport"
)

// shortTimeout bounds every wait of the ranks of the tests that follow
// (rmatest.Timeout, restored when the test ends), so that a deadlock fails
// the test with a timeout error instead of hanging it.
func shortTimeout(t *testing.T, d time.Duration) {
	if d < 5*time.Second && rmatest.InProcesses() {
		// The test waits for timeouts on purpose; under rmarun the bound
		// is the job's RMAGO_TIMEOUT (minutes), so it runs in-process only.
		t.Skip("waits for timeouts of a few seconds: in-process only")
	}
	old := rmatest.Timeout
	rmatest.Timeout = d
	t.Cleanup(func() { rmatest.Timeout = old })
}

// goroutines runs fn(g) for g in [0, n) on n goroutines and joins their errors.
func goroutines(n int, fn func(g int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(g); err != nil {
				errs[g] = fmt.Errorf("goroutine %d: %w", g, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// lockedIncrement adds one to element i of rank t's window with a
// read-modify-write (Get, Flush, Put) under an exclusive lock: correct only
// if the lock excludes every other goroutine of every rank.
func lockedIncrement(win *rma.Window[int64], buf []int64, t, i int) error {
	if err := win.Lock(t, rma.Exclusive, 0); err != nil {
		return err
	}
	err := errors.Join(win.Get(buf, t, i), win.Flush(t))
	if err == nil {
		buf[0]++
		err = win.Put(buf, t, i)
	}
	return errors.Join(err, win.Unlock(t))
}

// TestConcurrentLockThreads: two ranks, each with four goroutines that
// lock (exclusive), read-modify-write a counter, and unlock, alternating
// between the rank itself and its peer. Before windows were safe for
// goroutines, a Lock waiting for a remote lock held the window's mutex, so
// the holder's Unlock (another goroutine of the rank holding it) blocked
// behind it and every rank hung until the timeout; a second goroutine's
// Lock of a target the rank held failed at once. Now a goroutine's Lock on
// a target its rank holds waits for the release, like a mutex, and the
// counters are exact.
func TestConcurrentLockThreads(t *testing.T) {
	shortTimeout(t, 15*time.Second)
	const ranks, gs, iters = 2, 4, 25
	rmatest.Run(t, ranks, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		err = goroutines(gs, func(g int) error {
			buf := make([]int64, 1)
			for i := range iters {
				if err := lockedIncrement(win, buf, (w.Rank()+g+i)%ranks, 0); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if got, want := win.LoadLocal(0), int64(gs*iters); got != want {
			return fmt.Errorf("counter %d, want %d", got, want)
		}
		return win.Free()
	})
}

// TestConcurrentPSCW: three ranks, each with two goroutines exposing its
// window to the other two (Post, Wait) and two goroutines accessing the
// other two (Start, Put, Accumulate, Complete), concurrently. Before, a
// goroutine in Wait held the window's mutex while the peers' completions
// were awaited, so this rank's own Start and Complete (which those peers'
// Waits need) blocked behind it: every rank hung until the timeout. Now
// Wait and Start wait without it; the window's access epochs (and its
// exposure epochs) follow one another, and the data is exact.
func TestConcurrentPSCW(t *testing.T) {
	shortTimeout(t, 15*time.Second)
	const ranks, gs, iters = 3, 2, 10
	rmatest.Run(t, ranks, func(w *rma.World) error {
		me := w.Rank()
		others := make([]int, 0, ranks-1)
		for r := range ranks {
			if r != me {
				others = append(others, r)
			}
		}
		// Slots [0, ranks): accumulated epoch counts per origin; slots
		// ranks + origin*gs + g: the last iteration origin's goroutine g put.
		win, err := rma.Allocate[int64](w, ranks+ranks*gs)
		if err != nil {
			return err
		}
		err = goroutines(2*gs, func(g int) error {
			if g < gs { // exposure
				for range iters {
					if err := errors.Join(win.Post(others, 0), win.Wait()); err != nil {
						return err
					}
				}
				return nil
			}
			g -= gs
			for i := range iters {
				if err := win.Start(others, 0); err != nil {
					return err
				}
				for _, r := range others {
					if err := errors.Join(win.Put([]int64{int64(i + 1)}, r, ranks+me*gs+g),
						win.Accumulate([]int64{1}, r, me, rma.Sum)); err != nil {
						return err
					}
				}
				if err := win.Complete(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		for _, o := range others {
			if got, want := win.LoadLocal(o), int64(gs*iters); got != want {
				return fmt.Errorf("%d epochs from rank %d, want %d", got, o, want)
			}
			for g := range gs {
				if got := win.Local()[ranks+o*gs+g]; got != iters {
					return fmt.Errorf("rank %d goroutine %d's last put is %d, want %d", o, g, got, iters)
				}
			}
		}
		return win.Free()
	})
}

// TestConcurrentMixed: four ranks, each with goroutines that take
// exclusive and shared locks on every rank (read-modify-write under the
// exclusive ones, atomics and gets under the shared ones), one that takes
// LockAll, and two that run PSCW epochs with the partner rank (r^1) on a
// second window. Before, any Lock or Start waiting for a peer held its
// window's mutex and the job hung until the timeout.
func TestConcurrentMixed(t *testing.T) {
	shortTimeout(t, 20*time.Second)
	const ranks, iters = 4, 12
	rmatest.Run(t, ranks, func(w *rma.World) error {
		me := w.Rank()
		// locked: [0] counter under exclusive locks, [1] atomic counter,
		// [2] LockAll's atomic counter.
		locked, err := rma.Allocate[int64](w, 3)
		if err != nil {
			return err
		}
		pscw, err := rma.Allocate[int64](w, 2)
		if err != nil {
			return err
		}
		partner := []int{me ^ 1}
		err = goroutines(6, func(g int) error {
			buf := make([]int64, 1)
			for i := range iters {
				t := (me + g + i) % ranks
				var err error
				switch g {
				case 0, 1:
					err = lockedIncrement(locked, buf, t, 0)
				case 2:
					err = errors.Join(locked.Lock(t, rma.Shared, 0),
						locked.Accumulate([]int64{1}, t, 1, rma.Sum),
						locked.Get(buf, t, 1), locked.Unlock(t))
				case 3:
					if err = locked.LockAll(0); err == nil {
						_, err = locked.FetchAndOp(1, t, 2, rma.Sum)
						err = errors.Join(err, locked.FlushAll(), locked.UnlockAll())
					}
				case 4:
					err = errors.Join(pscw.Post(partner, 0), pscw.Wait())
				case 5:
					err = errors.Join(pscw.Start(partner, 0), pscw.Accumulate([]int64{1}, partner[0], 0, rma.Sum),
						pscw.Put([]int64{int64(i + 1)}, partner[0], 1), pscw.Complete())
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		// Each rank's three lock goroutines and its LockAll goroutine visit
		// every target iters/ranks times each.
		per := int64(iters / ranks * ranks)
		want := []int64{2 * per, per, per}
		for i, v := range want {
			if got := locked.LoadLocal(i); got != v {
				return fmt.Errorf("locked[%d] = %d, want %d", i, got, v)
			}
		}
		if got := pscw.LoadLocal(0); got != iters {
			return fmt.Errorf("%d PSCW epochs from rank %d, want %d", got, partner[0], iters)
		}
		if got := pscw.Local()[1]; got != iters {
			return fmt.Errorf("last PSCW put %d, want %d", got, iters)
		}
		return errors.Join(locked.Free(), pscw.Free())
	})
}

// TestLockWaitsForOtherGoroutine: a goroutine's Lock of a target its rank
// holds waits until the holder (another goroutine) unlocks, then succeeds.
func TestLockWaitsForOtherGoroutine(t *testing.T) {
	shortTimeout(t, 10*time.Second)
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		if w.Rank() == 0 {
			if err := win.Lock(1, rma.Exclusive, 0); err != nil {
				return err
			}
			locked := make(chan error)
			go func() { locked <- win.Lock(1, rma.Shared, 0) }()
			select {
			case err := <-locked:
				return fmt.Errorf("second goroutine's Lock returned %v while the lock was held", err)
			case <-time.After(50 * time.Millisecond): // it waits, as it should
			}
			if err := win.Unlock(1); err != nil {
				return err
			}
			if err := <-locked; err != nil {
				return fmt.Errorf("second goroutine's Lock after Unlock: %v", err)
			}
			if err := win.Unlock(1); err != nil {
				return err
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		return win.Free()
	})
}

// TestLockTwiceTimesOut: a Lock of a target the rank holds, which nobody
// releases, fails after the fabric's timeout with an error wrapping
// transport.ErrTimeout (not a hang), and leaves the window usable; so does
// a Start while an access epoch is open and a Post while an exposure epoch
// is open. One rank, so that no peer waits meanwhile.
func TestLockTwiceTimesOut(t *testing.T) {
	shortTimeout(t, time.Second)
	rmatest.Run(t, 1, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		me := []int{0}
		if err := win.Lock(0, rma.Shared, 0); err != nil {
			return err
		}
		if err := win.Lock(0, rma.Exclusive, 0); !errors.Is(err, transport.ErrTimeout) {
			return fmt.Errorf("second Lock of a held target: %v, want ErrTimeout", err)
		}
		if err := win.LockAll(0); !errors.Is(err, transport.ErrTimeout) {
			return fmt.Errorf("LockAll while a lock is held: %v, want ErrTimeout", err)
		}
		if err := errors.Join(win.Put([]int64{7}, 0, 0), win.Unlock(0)); err != nil {
			return err
		}
		if err := win.Post(me, 0); err != nil {
			return err
		}
		if err := win.Post(me, 0); !errors.Is(err, transport.ErrTimeout) {
			return fmt.Errorf("second Post: %v, want ErrTimeout", err)
		}
		if err := win.Start(me, 0); err != nil {
			return err
		}
		if err := win.Start(me, 0); !errors.Is(err, transport.ErrTimeout) {
			return fmt.Errorf("second Start: %v, want ErrTimeout", err)
		}
		if err := errors.Join(win.Accumulate([]int64{1}, 0, 0, rma.Sum), win.Complete(), win.Wait()); err != nil {
			return err
		}
		if got := win.Local()[0]; got != 8 {
			return fmt.Errorf("window holds %d, want 8", got)
		}
		return win.Free()
	})
}

// TestConcurrencyStress: 2 to 4 ranks, each with 4 or 8 goroutines mixing,
// on one window, exclusive-lock read-modify-writes, shared-lock
// accumulates and puts, LockAll accumulates, puts, flushes and gets, and
// on a second window PSCW epochs with a partner rank (disjoint pairs
// {0,1}, {2,3}; a rank without a partner exposes to itself). Every
// counter, every last put and every get is checked exactly.
func TestConcurrencyStress(t *testing.T) {
	shortTimeout(t, 20*time.Second)
	for _, tc := range []struct{ ranks, gs int }{{2, 8}, {3, 4}, {4, 8}} {
		t.Run(fmt.Sprintf("%dx%d", tc.ranks, tc.gs), func(t *testing.T) {
			stress(t, tc.ranks, tc.gs)
		})
	}
}

func stress(t *testing.T, ranks, gs int) {
	const iters = 12 // a multiple of every job size: each goroutine visits each target equally
	// Window A: [0] exclusive read-modify-write counter, [1] accumulated
	// count, [2+o*gs+g] the last value origin o's goroutine g put.
	const slots = 2
	rmatest.Run(t, ranks, func(w *rma.World) error {
		me := w.Rank()
		a, err := rma.Allocate[int64](w, slots+ranks*gs)
		if err != nil {
			return err
		}
		// Window B (PSCW): [0] accumulated epochs, [1] last put.
		b, err := rma.Allocate[int64](w, 2)
		if err != nil {
			return err
		}
		partner := []int{me ^ 1}
		if partner[0] >= ranks {
			partner[0] = me
		}
		err = goroutines(gs, func(g int) error {
			buf := make([]int64, 1)
			mine := slots + me*gs + g
			for i := range iters {
				tgt := (me + g + i) % ranks
				val := []int64{int64(i + 1)}
				var err error
				switch g % 4 {
				case 0:
					err = lockedIncrement(a, buf, tgt, 0)
				case 1:
					if err = a.Lock(tgt, rma.Shared, 0); err == nil {
						var old int64
						old, err = a.FetchAndOp(0, tgt, 1, rma.NoOp)
						if err == nil && old < 0 {
							err = fmt.Errorf("counter %d", old)
						}
						err = errors.Join(err, a.Accumulate([]int64{1}, tgt, 1, rma.Sum), a.Put(val, tgt, mine), a.Unlock(tgt))
					}
				case 2:
					if err = a.LockAll(0); err == nil {
						req, rerr := a.RAccumulate([]int64{1}, tgt, 1, rma.Sum)
						err = errors.Join(rerr, req.Wait(), a.Put(val, tgt, mine), a.Flush(tgt), a.Get(buf, tgt, mine), a.FlushAll())
						if err == nil && buf[0] != val[0] {
							err = fmt.Errorf("got %d back from rank %d after putting %d", buf[0], tgt, val[0])
						}
						err = errors.Join(err, a.UnlockAll())
					}
				case 3:
					p := partner[0]
					access := func() error {
						return errors.Join(b.Start(partner, 0), b.Accumulate([]int64{1}, p, 0, rma.Sum), b.Put(val, p, 1), b.Complete())
					}
					switch {
					case gs < 8: // one PSCW goroutine: both sides in turn
						err = errors.Join(b.Post(partner, 0), access(), b.Wait())
					case g < 4:
						err = errors.Join(b.Post(partner, 0), b.Wait())
					default:
						err = access()
					}
				}
				if err != nil {
					return fmt.Errorf("iteration %d: %w", i, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		per := int64(gs / 4 * iters) // per role, the visits every rank gets
		if got := a.LoadLocal(0); got != per {
			return fmt.Errorf("exclusive counter %d, want %d", got, per)
		}
		if got := a.LoadLocal(1); got != 2*per {
			return fmt.Errorf("accumulated count %d, want %d", got, 2*per)
		}
		for o := range ranks {
			for g := range gs {
				if g%4 != 1 && g%4 != 2 {
					continue
				}
				var want int64
				for i := range iters {
					if (o+g+i)%ranks == me {
						want = int64(i + 1)
					}
				}
				if got := a.Local()[slots+o*gs+g]; got != want {
					return fmt.Errorf("rank %d goroutine %d's last put %d, want %d", o, g, got, want)
				}
			}
		}
		if got, want := b.LoadLocal(0), int64(iters); got != want {
			return fmt.Errorf("%d PSCW epochs from rank %d, want %d", got, partner[0], want)
		}
		if got := b.Local()[1]; got != iters {
			return fmt.Errorf("last PSCW put %d, want %d", got, iters)
		}
		return errors.Join(a.Free(), b.Free())
	})
}

// TestFenceMisuseConcurrent: Fence is collective and not for concurrent
// use, but misuse gives errors, not a deadlock: of two goroutines of rank 0
// calling Fence at once, one runs it and the other fails at once with
// ErrEpochConflict; while it runs, a Put fails with ErrNoEpoch, Free with
// ErrEpochOpen and LockAll with ErrEpochConflict. Rank 1 enters its Fence
// only after rank 0 has checked all that, so the running Fence cannot have
// finished meanwhile. In-process only (the ranks share a channel).
func TestFenceMisuseConcurrent(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("in-process only")
	}
	shortTimeout(t, 10*time.Second)
	checked := make(chan struct{})
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		if w.Rank() == 1 {
			<-checked
			if err := win.Fence(0); err != nil {
				return err
			}
		} else {
			results := make(chan error, 2)
			for range 2 {
				go func() { results <- win.Fence(0) }()
			}
			first := <-results
			err := errors.Join(
				expectErr("second concurrent Fence", first, rma.ErrEpochConflict),
				expectErr("Put during Fence", win.Put([]int64{1}, 1, 0), rma.ErrNoEpoch),
				expectErr("Free during Fence", win.Free(), rma.ErrEpochOpen),
				expectErr("LockAll during Fence", win.LockAll(0), rma.ErrEpochConflict))
			close(checked)
			if err := errors.Join(err, <-results); err != nil {
				return err
			}
		}
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		return win.Free()
	})
}

// expectErr checks that err wraps want.
func expectErr(what string, err, want error) error {
	if !errors.Is(err, want) {
		return fmt.Errorf("%s: got %v, want %v", what, err, want)
	}
	return nil
}

// TestUnlockCoversConcurrentOps: the epoch is the rank's. Rank 0's main
// goroutine locks rank 1; worker goroutines accumulate and put to rank 1
// under that lock until the main goroutine's Unlock (called while they
// run) refuses them with ErrNoEpoch. Every operation that was accepted is
// complete at rank 1 once Unlock returns, none accepted after: the counter
// equals the accepted accumulates exactly, and each worker's slot holds its
// last accepted put.
func TestUnlockCoversConcurrentOps(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("in-process only")
	}
	shortTimeout(t, 15*time.Second)
	const workers, maxIters = 4, 100000
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1+workers)
		if err != nil {
			return err
		}
		if w.Rank() == 0 {
			if err := win.Lock(1, rma.Exclusive, 0); err != nil {
				return err
			}
			accepted := make([]int64, workers)
			lastPut := make([]int64, workers)
			started := make(chan struct{}, workers)
			err := goroutines(workers+1, func(g int) error {
				if g == workers { // the main goroutine's part: Unlock while the workers run
					for range workers {
						<-started
					}
					return win.Unlock(1)
				}
				var res [1]int64
				for i := range maxIters {
					var err error
					if g%2 == 0 {
						err = win.Accumulate([]int64{1}, 1, 0, rma.Sum) // fetch-add, completed by Unlock's flush
					} else {
						err = win.GetAccumulate([]int64{1}, res[:], 1, 0, rma.Sum) // waits for its round trip
					}
					if err == nil {
						accepted[g]++
						if err = win.Put([]int64{int64(i + 1)}, 1, 1+g); err == nil {
							lastPut[g] = int64(i + 1)
						}
					}
					if i == 3 {
						started <- struct{}{}
					}
					if err != nil {
						if !errors.Is(err, rma.ErrNoEpoch) {
							return err
						}
						if i < 3 {
							started <- struct{}{}
						}
						return nil
					}
				}
				return fmt.Errorf("still accepted after %d iterations", maxIters)
			})
			if err != nil {
				return err
			}
			var total int64
			for _, n := range accepted {
				total += n
			}
			buf := make([]int64, 1+workers)
			if err := errors.Join(win.Lock(1, rma.Shared, 0), win.Get(buf, 1, 0), win.Unlock(1)); err != nil {
				return err
			}
			if buf[0] != total {
				return fmt.Errorf("counter %d, but %d accumulates were accepted", buf[0], total)
			}
			for g := range workers {
				if buf[1+g] != lastPut[g] {
					return fmt.Errorf("worker %d's slot %d, its last accepted put %d", g, buf[1+g], lastPut[g])
				}
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		return win.Free()
	})
}
