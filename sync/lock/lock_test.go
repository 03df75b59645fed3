package lock

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/transport"
)

// TestExclusiveCounter: every rank increments one counter K times by
// read-modify-write under an exclusive lock. Any overlap of two critical
// sections loses an increment (and is a data race the detector reports).
func TestExclusiveCounter(t *testing.T) {
	const k = 40
	for _, n := range []int{1, 2, 5, 8} {
		targets := []int{0}
		if n > 1 {
			targets = append(targets, n-1) // the target is not the leader
		}
		for _, target := range targets {
			t.Run(fmt.Sprintf("ranks=%d/target=%d", n, target), func(t *testing.T) {
				runJob(t, n, jobOpts{}, func(r *rank) error {
					l := New(r.C)
					for range k {
						if err := l.Lock(target, true); err != nil {
							return err
						}
						if err := r.Read(target, 0, stageOff, 8); err != nil {
							return err
						}
						if err := r.Write(target, 0, stageOff+8, r.U64(stageOff)+1); err != nil {
							return err
						}
						if err := r.F.Flush(target); err != nil {
							return err
						}
						if err := l.Unlock(target, true); err != nil {
							return err
						}
					}
					if err := r.F.Barrier(); err != nil {
						return err
					}
					if r.Me() == target {
						if got, want := r.Load(0), uint64(n*k); got != want {
							return fmt.Errorf("counter = %d, want %d", got, want)
						}
					}
					return nil
				})
			})
		}
	}
}

// TestSharedReadersOneWriter: one rank writes a pair of equal values under
// an exclusive lock, one word at a time with a flush in between; every
// other rank reads the pair under a shared lock and must never see it torn
// or going backwards.
func TestSharedReadersOneWriter(t *testing.T) {
	const writes = 30
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const target = 0
			writer := n - 1
			runJob(t, n, jobOpts{}, func(r *rank) error {
				l := New(r.C)
				if r.Me() == writer {
					for v := uint64(1); v <= writes; v++ {
						if err := l.Lock(target, true); err != nil {
							return err
						}
						for _, off := range []int{0, 8} {
							if err := r.Write(target, off, stageOff+off, v); err != nil {
								return err
							}
							if err := r.F.Flush(target); err != nil {
								return err
							}
						}
						if err := l.Unlock(target, true); err != nil {
							return err
						}
					}
					return nil
				}
				// Readers stop at the last value, or after maxReads reads
				// (the writer then finishes alone).
				const maxReads = 150
				last, reads, seen := uint64(0), 0, map[uint64]bool{}
				for last < writes && reads < maxReads {
					if err := l.Lock(target, false); err != nil {
						return err
					}
					if err := r.Read(target, 0, stageOff, 16); err != nil {
						return err
					}
					if err := l.Unlock(target, false); err != nil {
						return err
					}
					a, b := r.U64(stageOff), r.U64(stageOff+8)
					if a != b {
						return fmt.Errorf("read %d: torn pair (%d, %d)", reads, a, b)
					}
					if a < last {
						return fmt.Errorf("read %d: pair went back from %d to %d", reads, last, a)
					}
					last = a
					seen[a] = true
					reads++
					// Readers pause between reads, longer the more of them
					// there are, to leave the writer windows.
					time.Sleep(time.Duration(rand.N(300*n)) * time.Microsecond)
				}
				if r.Me() == 1 {
					t.Logf("rank 1: %d reads saw %d distinct values", reads, len(seen))
				}
				return nil
			})
		})
	}
}

// TestLockAllAndExclusive: ranks cycle through lock_all (reading every
// rank's pair), exclusive locks (incrementing one rank's pair one word at a
// time) and shared locks (reading one pair). Readers never see a torn pair,
// and every pair ends at the number of increments it received.
func TestLockAllAndExclusive(t *testing.T) {
	const iters = 60
	for _, n := range []int{2, 3, 6} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			runJob(t, n, jobOpts{}, func(r *rank) error {
				l := New(r.C)
				me := r.Me()
				check := func(tg int, what string) error {
					if err := r.Read(tg, 0, stageOff, 16); err != nil {
						return err
					}
					if a, b := r.U64(stageOff), r.U64(stageOff+8); a != b {
						return fmt.Errorf("%s: rank %d's pair torn (%d, %d)", what, tg, a, b)
					}
					return nil
				}
				for i := range iters {
					tg := (me + i) % n
					switch (i + me) % 3 {
					case 0:
						if err := l.LockAll(); err != nil {
							return err
						}
						for x := range n {
							if err := check(x, "lock_all"); err != nil {
								return err
							}
						}
						if err := l.UnlockAll(); err != nil {
							return err
						}
					case 1:
						if err := l.Lock(tg, true); err != nil {
							return err
						}
						if err := r.Read(tg, 0, stageOff, 8); err != nil {
							return err
						}
						v := r.U64(stageOff) + 1
						for _, off := range []int{0, 8} {
							if err := r.Write(tg, off, stageOff+16+off, v); err != nil {
								return err
							}
							if err := r.F.Flush(tg); err != nil {
								return err
							}
						}
						if err := l.Unlock(tg, true); err != nil {
							return err
						}
					case 2:
						if err := l.Lock(tg, false); err != nil {
							return err
						}
						if err := check(tg, "shared"); err != nil {
							return err
						}
						if err := l.Unlock(tg, false); err != nil {
							return err
						}
					}
				}
				if err := r.F.Barrier(); err != nil {
					return err
				}
				want := uint64(0)
				for o := range n {
					for i := range iters {
						if (i+o)%3 == 1 && (o+i)%n == me {
							want++
						}
					}
				}
				if a, b := r.Load(0), r.Load(8); a != want || b != want {
					return fmt.Errorf("pair (%d, %d), want %d increments", a, b, want)
				}
				return nil
			})
		})
	}
}

// TestExclusiveExcludesLockAll checks the exclusion directly: while rank 1
// holds an exclusive lock, rank 0's LockAll waits until it is released.
func TestExclusiveExcludesLockAll(t *testing.T) {
	var released sync.WaitGroup
	released.Add(1)
	var releasedAt time.Time
	runJob(t, 3, jobOpts{}, func(r *rank) error {
		l := New(r.C)
		switch r.Me() {
		case 1:
			if err := l.Lock(2, true); err != nil {
				return err
			}
		}
		if err := r.F.Barrier(); err != nil {
			return err
		}
		switch r.Me() {
		case 0:
			if err := l.LockAll(); err != nil {
				return err
			}
			got := time.Now()
			released.Wait()
			if got.Before(releasedAt) {
				return fmt.Errorf("lock_all taken while the exclusive lock was held")
			}
			if err := l.UnlockAll(); err != nil {
				return err
			}
		case 1:
			time.Sleep(50 * time.Millisecond)
			releasedAt = time.Now()
			// Unlock's release follows releasedAt; lock_all cannot be
			// taken before it.
			err := l.Unlock(2, true)
			released.Done()
			return err
		case 2:
			// Shared locks of other ranks do not conflict with it.
			if err := l.Lock(0, false); err != nil {
				return err
			}
			return l.Unlock(0, false)
		}
		return nil
	})
}

// TestDeadHolder: the holder of an exclusive lock closes its fabric; a
// waiting Lock and LockAll fail within the fabric's timeout instead of
// hanging.
func TestDeadHolder(t *testing.T) {
	const timeout = time.Second
	var survivors sync.WaitGroup
	survivors.Add(2)
	runJob(t, 3, jobOpts{timeout: timeout, noBarrier: true}, func(r *rank) error {
		l := New(r.C)
		if r.Me() != 1 {
			// Neither survivor closes while the other still needs it.
			defer func() { survivors.Done(); survivors.Wait() }()
		}
		if r.Me() == 1 {
			if err := l.Lock(0, true); err != nil {
				return err
			}
		}
		if err := r.F.Barrier(); err != nil {
			return err
		}
		if r.Me() == 1 {
			return r.F.Close()
		}
		start := time.Now()
		var err error
		if r.Me() == 0 {
			err = l.Lock(0, false)
		} else {
			err = l.LockAll()
		}
		took := time.Since(start)
		if err == nil {
			return fmt.Errorf("lock granted while a dead rank holds an exclusive lock")
		}
		if !errors.Is(err, transport.ErrTimeout) && !errors.Is(err, transport.ErrPeer) {
			return fmt.Errorf("unexpected error: %v", err)
		}
		if took > timeout+hangGuard {
			return fmt.Errorf("gave up after %v (timeout %v)", took, timeout)
		}
		t.Logf("rank %d: gave up after %v: %v", r.Me(), took.Round(time.Millisecond), err)
		return nil
	})
}

// TestDeadTarget: a lock on a rank whose fabric is closed fails.
func TestDeadTarget(t *testing.T) {
	const timeout = time.Second
	runJob(t, 2, jobOpts{timeout: timeout, noBarrier: true}, func(r *rank) error {
		if err := r.F.Barrier(); err != nil {
			return err
		}
		if r.Me() == 1 {
			return r.F.Close()
		}
		l := New(r.C)
		time.Sleep(100 * time.Millisecond) // let the close arrive
		start := time.Now()
		err := l.Lock(1, true)
		if err == nil {
			return fmt.Errorf("lock of a closed rank succeeded")
		}
		if took := time.Since(start); took > timeout+hangGuard {
			return fmt.Errorf("gave up after %v (timeout %v)", took, timeout)
		}
		return nil
	})
}

// TestNoAllocs: steady-state lock and unlock allocate nothing.
func TestNoAllocs(t *testing.T) {
	runJob(t, 1, jobOpts{}, func(r *rank) error {
		l := New(r.C)
		var err error
		allocs := testing.AllocsPerRun(200, func() {
			err = errors.Join(err, l.Lock(0, true), l.Unlock(0, true), l.Lock(0, false), l.Unlock(0, false), l.LockAll(), l.UnlockAll())
		})
		if err != nil {
			return err
		}
		t.Logf("%v allocations per cycle of 6 calls", allocs)
		if allocs > 0 {
			return fmt.Errorf("%v allocations per cycle of 6 calls, want 0", allocs)
		}
		return nil
	})
}

// TestGoroutines: one Locks driven by several goroutines of each rank, each
// incrementing the counter of a different target under exclusive locks,
// while another goroutine takes shared locks everywhere. A lock belongs to
// the rank, not the goroutine: as package rma does, a per-target mutex
// keeps a goroutine from locking a target another goroutine of the rank
// locks or holds (the protocol allows one call per target at a time).
func TestGoroutines(t *testing.T) {
	const n, k = 3, 15
	runJob(t, n, jobOpts{}, func(r *rank) error {
		l := New(r.C)
		var mine [n]sync.Mutex // per target: this rank's lock of it
		errs := make([]error, n+1)
		var wg sync.WaitGroup
		for g := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stage := stageOff + 64*g
				for range k {
					mine[g].Lock()
					err := l.Lock(g, true)
					if err == nil {
						err = r.Read(g, 0, stage, 8)
					}
					if err == nil {
						err = r.Write(g, 0, stage+8, r.U64(stage)+1)
					}
					if err == nil {
						err = r.F.Flush(g)
					}
					if err == nil {
						err = l.Unlock(g, true)
					}
					mine[g].Unlock()
					if err != nil {
						errs[g] = err
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Shared locks of targets the other goroutines may hold are
			// skipped, and leave their locks alone.
			for i := range 4 * k {
				tg := i % n
				if !mine[tg].TryLock() {
					runtime.Gosched()
					continue
				}
				err := l.Lock(tg, false)
				if err == nil {
					err = l.Unlock(tg, false)
				}
				mine[tg].Unlock()
				if err != nil {
					errs[n] = err
					return
				}
			}
		}()
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := r.F.Barrier(); err != nil {
			return err
		}
		if got := r.Load(0); got != n*k {
			return fmt.Errorf("counter = %d, want %d", got, n*k)
		}
		return nil
	})
}
