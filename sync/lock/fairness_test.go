package lock

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/sync/control/controltest"
	"github.com/rmago/rmago/transport"
)

// The fairness tests run lockers in tight loops (no pauses) that, with the
// old retry-only protocol, kept the other side out until the fabric's
// timeout. Each bounds the starvation in rounds, not time: a locker counts
// the acquisitions it made while it could see (by reading the lock words
// under its lock) that the other side was waiting, and that count is
// bounded by the protocol. The fabric's timeout is short so that a starved
// locker fails instead of stalling the suite.

// maxLoops bounds every streaming loop (tests never loop unboundedly).
const maxLoops = 200000

// The streaming loops yield the processor once a round: the ranks are
// goroutines of one process, and on shm a lock round makes no system call,
// so under load (2 cores, -race, other jobs) the locker a test waits for
// could go without a processor for the whole bound of rounds.

// peekOff is where peek's result lands: the last word of this rank's
// staging area, which the tests do not otherwise use.
const peekOff = controltest.DataBytes - 8

// peek reads rank t's control word w with a fetch-add of zero and waits
// for the old value.
func peek(r *rank, t, w int) (uint64, error) {
	seq, err := r.F.PostAtomic(t, transport.Atomic{Op: transport.FetchAddOp, Local: r.Local(peekOff), Remote: r.C.RemoteAt(t, w)})
	if err != nil {
		return 0, err
	}
	if err := r.F.Await(t, seq); err != nil {
		return 0, err
	}
	return r.Load(peekOff), nil
}

// exclusiveWaits reports whether, as far as this rank can see, an
// exclusive locker waits: at the Global word (leader mode) or as a
// writer at one of ranks 1..n-1 (target mode).
func exclusiveWaits(r *rank, l *Locks, n int) (bool, error) {
	if !l.target {
		g, err := peek(r, Leader, control.Global)
		return classExcl.waiters(g) != 0, err
	}
	for tg := 1; tg < n; tg++ {
		w, err := peek(r, tg, control.Lock)
		if err != nil || w&writerMask != 0 {
			return err == nil, err
		}
	}
	return false, nil
}

// lockAllWaits reports whether a lock_all locker waits: at the Global
// word (leader mode), or with its mark at rank t (target mode).
func lockAllWaits(r *rank, l *Locks, t int) (uint64, error) {
	if !l.target {
		g, err := peek(r, Leader, control.Global)
		return classAll.waiters(g), err
	}
	w, err := peek(r, t, control.Lock)
	return w & markMask >> (2 * countBits), err
}

// TestWriterNotStarvedByReaders: ranks other than the writer take shared locks
// on rank 0 back to back while rank 1 takes k exclusive locks on it. Once
// the writer waits at the target, a reader gets at most the shared lock it
// was already taking: at most one shared lock per reader and write may see
// a waiting writer.
func TestWriterNotStarvedByReaders(t *testing.T) {
	const n, k, target, writer = 5, 10, 0, 1
	var done atomic.Bool
	runJob(t, n, jobOpts{timeout: 10 * time.Second}, func(r *rank) error {
		l := New(r.C)
		if r.Me() == writer {
			defer done.Store(true)
			for v := uint64(1); v <= k; v++ {
				if err := l.Lock(target, true); err != nil {
					return fmt.Errorf("write %d: %w", v, err)
				}
				if err := r.Write(target, 0, stageOff, v); err != nil {
					return err
				}
				if err := r.F.Flush(target); err != nil {
					return err
				}
				if err := l.Unlock(target, true); err != nil {
					return err
				}
			}
			return nil
		}
		reads, sawWriter := 0, 0
		for ; !done.Load() && reads < maxLoops; reads++ {
			runtime.Gosched() // ranks share this process: let the other side run, as the OS would
			if err := l.Lock(target, false); err != nil {
				return fmt.Errorf("read %d: %w", reads, err)
			}
			w, err := peek(r, target, control.Lock)
			if err != nil {
				return err
			}
			if w&writerMask != 0 {
				sawWriter++
			}
			if err := l.Unlock(target, false); err != nil {
				return err
			}
		}
		if !done.Load() {
			return fmt.Errorf("the writer did not finish within %d reads", reads)
		}
		if sawWriter > k {
			return fmt.Errorf("%d shared locks taken while a writer waited (at most %d writes)", sawWriter, k)
		}
		t.Logf("rank %d: %d reads, %d with a writer waiting", r.Me(), reads, sawWriter)
		return nil
	})
}

// TestExclusiveNotStarvedByLockAll: ranks 1..n-1 take lock_all back to
// back (their epochs overlap, so that lock_all is always held by someone)
// while rank 0 takes k exclusive locks. Once the exclusive locker waits,
// a lock_all locker gets at most two lock_alls that see it waiting per
// exclusive lock: in leader mode the lock_all of the running phase and one
// of a following one (a tie the turn gave to lock_all); in target mode the
// one it held when the writer came and one let in by a mark it left while
// rank 0 held that target the time before.
func TestExclusiveNotStarvedByLockAll(t *testing.T) {
	const n, k = 5, 10
	var done atomic.Bool
	runJob(t, n, jobOpts{timeout: 10 * time.Second}, func(r *rank) error {
		l := New(r.C)
		if r.Me() == 0 {
			defer done.Store(true)
			for i := range k {
				tg := 1 + i%(n-1)
				if err := l.Lock(tg, true); err != nil {
					return fmt.Errorf("exclusive lock %d: %w", i, err)
				}
				if err := l.Unlock(tg, true); err != nil {
					return err
				}
			}
			return nil
		}
		alls, sawWaiter := 0, 0
		for ; !done.Load() && alls < maxLoops; alls++ {
			runtime.Gosched() // ranks share this process: let the other side run, as the OS would
			if err := l.LockAll(); err != nil {
				return fmt.Errorf("lock_all %d: %w", alls, err)
			}
			waiting, err := exclusiveWaits(r, l, n)
			if err != nil {
				return err
			}
			if waiting {
				sawWaiter++
			}
			if err := l.UnlockAll(); err != nil {
				return err
			}
		}
		if !done.Load() {
			return fmt.Errorf("the exclusive locker did not finish within %d lock_alls", alls)
		}
		if sawWaiter > 2*k {
			return fmt.Errorf("%d lock_alls taken while an exclusive locker waited (at most %d)", sawWaiter, 2*k)
		}
		t.Logf("rank %d: %d lock_alls, %d with an exclusive locker waiting", r.Me(), alls, sawWaiter)
		return nil
	})
}

// TestLockAllNotStarvedByExclusive is the converse: ranks 1..n-1 take
// exclusive locks back to back, each on its own target (so they never
// conflict with each other and some target is always held), while rank 0
// takes lock_all k times. In leader mode the phases alternate; in target
// mode a target where lock_all found the holder is marked, and its writer
// cannot take it again until lock_all got in. Either way a writer holds at
// most two locks per lock_all while lock_all waits.
func TestLockAllNotStarvedByExclusive(t *testing.T) {
	const n, k = 5, 10
	var done atomic.Bool
	runJob(t, n, jobOpts{timeout: 10 * time.Second}, func(r *rank) error {
		l := New(r.C)
		if r.Me() == 0 {
			defer done.Store(true)
			for i := range k {
				if err := l.LockAll(); err != nil {
					return fmt.Errorf("lock_all %d: %w", i, err)
				}
				if err := l.UnlockAll(); err != nil {
					return err
				}
			}
			return nil
		}
		locks, sawWaiter := 0, 0
		for ; !done.Load() && locks < maxLoops; locks++ {
			runtime.Gosched() // ranks share this process: let the other side run, as the OS would
			if err := l.Lock(r.Me(), true); err != nil {
				return fmt.Errorf("exclusive lock %d: %w", locks, err)
			}
			w, err := lockAllWaits(r, l, r.Me())
			if err != nil {
				return err
			}
			if w != 0 {
				sawWaiter++
			}
			if err := l.Unlock(r.Me(), true); err != nil {
				return err
			}
		}
		if !done.Load() {
			return fmt.Errorf("lock_all did not finish within %d exclusive locks", locks)
		}
		if sawWaiter > 2*k {
			return fmt.Errorf("%d exclusive locks held while lock_all waited (at most %d)", sawWaiter, 2*k)
		}
		t.Logf("rank %d: %d exclusive locks, %d with lock_all waiting", r.Me(), locks, sawWaiter)
		return nil
	})
}

// TestNoMutexAcrossWait: while one goroutine of rank 0 waits for an
// exclusive lock rank 1 holds, another goroutine of rank 0 locks and
// unlocks a third rank many times: the Locks' mutex is not held across
// the wait. The waiting Lock returns only after rank 1 released.
func TestNoMutexAcrossWait(t *testing.T) {
	const k = 20
	var (
		held, released atomic.Bool
		others         sync.WaitGroup // rank 0's other goroutine is done
	)
	others.Add(1)
	runJob(t, 3, jobOpts{}, func(r *rank) error {
		l := New(r.C)
		if r.Me() == 1 {
			if err := l.Lock(0, true); err != nil {
				return err
			}
			held.Store(true)
		}
		if err := r.F.Barrier(); err != nil {
			return err
		}
		switch r.Me() {
		case 0:
			errc := make(chan error, 1)
			go func() {
				defer others.Done()
				for range k {
					if err := l.Lock(2, false); err != nil {
						errc <- err
						return
					}
					if err := l.Unlock(2, false); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			if err := l.Lock(0, false); err != nil {
				return err
			}
			if !released.Load() {
				return fmt.Errorf("shared lock granted while rank 1 held the exclusive lock")
			}
			if err := <-errc; err != nil {
				return err
			}
			return l.Unlock(0, false)
		case 1:
			// Release only once rank 0's other goroutine has finished
			// all its locks: it could not, were the mutex held by the
			// waiting Lock.
			others.Wait()
			released.Store(true)
			return l.Unlock(0, true)
		}
		return nil
	})
	if !held.Load() {
		t.Fatal("rank 1 never held the lock")
	}
}

// TestSecondExclusiveWhileLockAllWaits: rank 1 holds an exclusive lock
// on rank 2 and, while rank 0 waits for lock_all (behind that lock),
// takes a second exclusive lock, on rank 0. Waiting behind the lock_all
// waiter would deadlock: it waits for the first lock. A rank that already
// holds an exclusive lock joins the exclusive side at the Global word at
// once (leader mode), or ignores lock_all's marks, while lock_all holds no
// count as it waits (target mode).
func TestSecondExclusiveWhileLockAllWaits(t *testing.T) {
	var rank1Done atomic.Bool
	runJob(t, 3, jobOpts{timeout: 10 * time.Second}, func(r *rank) error {
		l := New(r.C)
		if r.Me() == 1 {
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
			if !rank1Done.Load() {
				return fmt.Errorf("lock_all granted while rank 1 held exclusive locks")
			}
			return l.UnlockAll()
		case 1:
			// Wait (bounded) until rank 0 waits for lock_all.
			for i := 0; ; i++ {
				w, err := lockAllWaits(r, l, 2)
				if err != nil {
					return err
				}
				if w == 1 {
					break
				}
				if i == maxLoops {
					return fmt.Errorf("rank 0 never waited for lock_all")
				}
				time.Sleep(100 * time.Microsecond)
			}
			if err := l.Lock(0, true); err != nil {
				return fmt.Errorf("second exclusive lock: %w", err)
			}
			rank1Done.Store(true)
			if err := l.Unlock(0, true); err != nil {
				return err
			}
			return l.Unlock(2, true)
		}
		return nil
	})
}

// TestNestedExclusiveWithLockAll: half the ranks take lock_all back to
// back and check every pair untorn; each other rank holds exclusive locks
// on two targets at once (see TestSecondExclusiveWhileLockAllWaits)
// and increments both pairs one word at a time. Every pair ends at its
// exact count, and nothing deadlocks.
func TestNestedExclusiveWithLockAll(t *testing.T) {
	const n, k = 6, 12
	var writersLeft atomic.Int32
	writersLeft.Store(n / 2)
	runJob(t, n, jobOpts{timeout: 10 * time.Second}, func(r *rank) error {
		l := New(r.C)
		me := r.Me()
		if me < n/2 {
			for i := 0; writersLeft.Load() > 0 && i < maxLoops; i++ {
				runtime.Gosched() // ranks share this process: let the other side run, as the OS would
				if err := l.LockAll(); err != nil {
					return fmt.Errorf("lock_all %d: %w", i, err)
				}
				for tg := range n {
					if err := r.Read(tg, 0, stageOff, 16); err != nil {
						return err
					}
					if a, b := r.U64(stageOff), r.U64(stageOff+8); a != b {
						return fmt.Errorf("lock_all: rank %d's pair torn (%d, %d)", tg, a, b)
					}
				}
				if err := l.UnlockAll(); err != nil {
					return err
				}
			}
		} else {
			t1, t2 := me%n, (me+1)%n
			for i := range k {
				for _, tg := range []int{t1, t2} {
					if err := l.Lock(tg, true); err != nil {
						return fmt.Errorf("round %d: exclusive lock on %d: %w", i, tg, err)
					}
				}
				for _, tg := range []int{t1, t2} {
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
				}
				for _, tg := range []int{t2, t1} {
					if err := l.Unlock(tg, true); err != nil {
						return err
					}
				}
			}
			writersLeft.Add(-1)
		}
		if err := r.F.Barrier(); err != nil {
			return err
		}
		want := uint64(0)
		for w := n / 2; w < n; w++ {
			if w%n == me || (w+1)%n == me {
				want += k
			}
		}
		if a, b := r.Load(0), r.Load(8); a != want || b != want {
			return fmt.Errorf("pair (%d, %d), want %d", a, b, want)
		}
		return nil
	})
}
