package rma_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
	"github.com/rmago/rmago/transport"
)

// TestEpochTransitions: the epoch state machine's transitions, as its hook
// sees them, for one call of each kind and for misuse (which changes
// nothing). One rank, so that every epoch is to itself.
func TestEpochTransitions(t *testing.T) {
	rmatest.Run(t, 1, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		var trace []string
		rma.SetEpochHook(win, func(call string, target int, from, to string) {
			trace = append(trace, fmt.Sprintf("%s %d %s>%s", call, target, from, to))
		})
		me := []int{0}
		steps := []struct {
			err  error
			want []string
		}{
			{win.Fence(0), []string{"Fence 0 closed>closing", "Fence 0 closing>open"}},
			{win.Lock(0, rma.Shared, 0), nil}, // ErrEpochConflict inside a fence epoch
			{win.Fence(rma.NoSucceed), []string{"Fence 0 open>closing", "Fence 0 closing>closed"}},
			{win.Unlock(0), nil}, // ErrNotLocked
			{win.Lock(0, rma.Exclusive, 0), []string{"Lock 0 closed>opening", "Lock 0 opening>openExcl"}},
			{win.Unlock(0), []string{"Unlock 0 openExcl>closing", "Unlock 0 closing>closed"}},
			{win.Lock(0, rma.Shared, rma.NoCheck), []string{"Lock 0 closed>opening", "Lock 0 opening>open"}},
			{win.Unlock(0), []string{"Unlock 0 open>closing", "Unlock 0 closing>closed"}},
			{win.LockAll(0), []string{"LockAll 0 closed>opening", "LockAll 0 opening>open"}},
			{win.UnlockAll(), []string{"UnlockAll 0 open>closing", "UnlockAll 0 closing>closed"}},
			{win.Complete(), nil}, // ErrNotStarted
			{win.Post(me, 0), []string{"Post 0 closed>opening", "Post 0 opening>open"}},
			{win.Start(me, 0), []string{"Start 0 closed>opening", "Start 0 opening>open"}},
			{win.Complete(), []string{"Complete 0 open>closing", "Complete 0 closing>closed"}},
			{win.Wait(), []string{"Wait 0 open>closing", "Wait 0 closing>closed"}},
			{win.Wait(), nil}, // ErrNotPosted
		}
		wantErr := map[int]error{1: rma.ErrEpochConflict, 3: rma.ErrNotLocked, 10: rma.ErrNotStarted, 15: rma.ErrNotPosted}
		var want []string
		for i, s := range steps {
			if !errors.Is(s.err, wantErr[i]) || (s.err != nil) != (wantErr[i] != nil) {
				return fmt.Errorf("step %d: %v, want %v", i, s.err, wantErr[i])
			}
			want = append(want, s.want...)
		}
		if !slices.Equal(trace, want) {
			return fmt.Errorf("transitions:\n%s\nwant:\n%s", strings.Join(trace, "\n"), strings.Join(want, "\n"))
		}
		return win.Free()
	})
}

// TestLockTransitionsPeer: a lock on a peer goes through the same
// transitions whichever path takes it (lazily on soft, with one CPU atomic
// on shm, or with the full protocol), and a busy lock (another
// goroutine's) is waited for, not taken twice.
func TestLockTransitionsPeer(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 4)
		if err != nil {
			return err
		}
		if w.Rank() == 0 {
			var trace []string
			rma.SetEpochHook(win, func(call string, target int, from, to string) {
				trace = append(trace, fmt.Sprintf("%s %d %s>%s", call, target, from, to))
			})
			for _, typ := range []rma.LockType{rma.Exclusive, rma.Shared} {
				if err := errors.Join(win.Lock(1, typ, 0), win.Put([]int64{int64(typ) + 7}, 1, 0), win.Unlock(1)); err != nil {
					return err
				}
			}
			want := []string{
				"Lock 1 closed>opening", "Lock 1 opening>openExcl", "Unlock 1 openExcl>closing", "Unlock 1 closing>closed",
				"Lock 1 closed>opening", "Lock 1 opening>open", "Unlock 1 open>closing", "Unlock 1 closing>closed",
			}
			if !slices.Equal(trace, want) {
				return fmt.Errorf("transitions:\n%s\nwant:\n%s", strings.Join(trace, "\n"), strings.Join(want, "\n"))
			}
			rma.SetEpochHook(win, nil)
			// A second goroutine's Lock of the held target waits for the
			// Unlock, then puts in its own epoch.
			if err := win.Lock(1, rma.Exclusive, 0); err != nil {
				return err
			}
			done := make(chan error, 1)
			go func() {
				done <- errors.Join(win.Lock(1, rma.Exclusive, 0), win.Put([]int64{2}, 1, 1), win.Unlock(1))
			}()
			if err := errors.Join(win.Put([]int64{1}, 1, 1), win.Accumulate([]int64{5}, 1, 2, rma.Sum), win.Unlock(1)); err != nil {
				return err
			}
			if err := <-done; err != nil {
				return err
			}
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		if w.Rank() == 1 {
			if got, want := win.Local()[:3], []int64{int64(rma.Shared) + 7, 2, 5}; !slices.Equal(got, want) {
				return fmt.Errorf("rank 1 holds %v, want %v", got, want)
			}
		}
		return errors.Join(win.Fence(rma.NoSucceed), win.Free())
	})
}

// TestLockMisuse: the lock misuse sync/lock used to refuse itself is
// refused by rma's state machine: unlocking a target while only LockAll is
// held, UnlockAll while only a lock is held (ErrNotLocked), a second lock
// of a held target or LockAll while a lock is held (they wait, and time
// out). Each changes nothing: the window stays usable and a peer's
// exclusive lock of the same rank succeeds afterwards.
func TestLockMisuse(t *testing.T) {
	shortTimeout(t, time.Second)
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		other := 1 - w.Rank()
		if err := errors.Join(
			win.LockAll(0),
			expectErr("Unlock while LockAll", win.Unlock(other), rma.ErrNotLocked),
			expectErr("Lock while LockAll", win.Lock(other, rma.Shared, 0), transport.ErrTimeout),
			win.UnlockAll(),
			win.Lock(other, rma.Shared, 0),
			expectErr("UnlockAll while a lock", win.UnlockAll(), rma.ErrNotLocked),
			expectErr("second Lock", win.Lock(other, rma.Exclusive, 0), transport.ErrTimeout),
			expectErr("LockAll while a lock", win.LockAll(0), transport.ErrTimeout),
			win.Put([]int64{int64(1 + w.Rank())}, other, 0),
			win.Unlock(other),
			expectErr("second Unlock", win.Unlock(other), rma.ErrNotLocked),
			w.Barrier(),
		); err != nil {
			return err
		}
		// Rank 0's window was left free: rank 1 locks it exclusively.
		if w.Rank() == 1 {
			if err := errors.Join(win.Lock(0, rma.Exclusive, 0), win.Put([]int64{9}, 0, 0), win.Unlock(0)); err != nil {
				return err
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if want := []int64{9, 1}[w.Rank()]; win.Local()[0] != want {
			return fmt.Errorf("window holds %d, want %d", win.Local()[0], want)
		}
		return win.Free()
	})
}

// TestFailedLockOpensNothing: a Lock whose protocol fails (it times out
// while a peer holds the lock exclusively) leaves no epoch: Unlock fails
// with ErrNotLocked, operations with ErrNoEpoch, and the same Lock
// succeeds once the peer has unlocked.
func TestFailedLockOpensNothing(t *testing.T) {
	shortTimeout(t, time.Second)
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		flag, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		defer flag.Free()
		if w.Rank() == 1 {
			// An exclusive lock may be taken lazily, with the epoch's
			// first operation: the put and its flush hold it for sure.
			if err := errors.Join(win.Lock(0, rma.Exclusive, 0), win.Put([]int64{5}, 0, 0), win.Flush(0)); err != nil {
				return err
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		// Rank 0 raises rank 1's flag once its Lock has timed out.
		if w.Rank() == 1 {
			if err := errors.Join(awaitRaised(flag), win.Unlock(0)); err != nil {
				return err
			}
		} else {
			err := win.Lock(0, rma.Shared, 0)
			if err := errors.Join(
				expectErr("Lock of a lock held elsewhere", err, transport.ErrTimeout),
				expectErr("Unlock after the failed Lock", win.Unlock(0), rma.ErrNotLocked),
				expectErr("Put after the failed Lock", win.Put([]int64{1}, 0, 0), rma.ErrNoEpoch),
				raise(flag, 1),
			); err != nil {
				return err
			}
			// Rank 1 is unlocking: the lock is free again, at the latest
			// at the second try.
			err = win.Lock(0, rma.Shared, 0)
			for try := 0; try < 3 && errors.Is(err, transport.ErrTimeout); try++ {
				err = win.Lock(0, rma.Shared, 0)
			}
			if err := errors.Join(err, win.Unlock(0)); err != nil {
				return err
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		return win.Free()
	})
}

// TestLockNoCheck: a NoCheck lock or LockAll opens the epoch without
// touching the lock words, and its Unlock releases nothing there: while
// rank 1 holds rank 0 exclusively with NoCheck, rank 0's own exclusive
// lock of itself is granted at once (a checked lock would wait for
// rank 1), and so is rank 1's NoCheck LockAll while rank 0 holds that
// exclusive lock. The puts made under them land.
func TestLockNoCheck(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 2)
		if err != nil {
			return err
		}
		if w.Rank() == 1 {
			if err := errors.Join(win.Lock(0, rma.Exclusive, rma.NoCheck), win.Put([]int64{5}, 0, 0)); err != nil {
				return err
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if w.Rank() == 0 {
			if err := win.Lock(0, rma.Exclusive, 0); err != nil {
				return err
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if w.Rank() == 1 {
			if err := errors.Join(win.Unlock(0),
				win.LockAll(rma.NoCheck), win.Put([]int64{6}, 0, 1), win.UnlockAll()); err != nil {
				return err
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if w.Rank() == 0 {
			if err := win.Unlock(0); err != nil {
				return err
			}
			if got := win.Local(); got[0] != 5 || got[1] != 6 {
				return fmt.Errorf("window holds %v, want [5 6]", got)
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		return win.Free()
	})
}

// TestPSCWMisuse: the PSCW misuse sync/pscw used to refuse itself is
// refused by rma: Complete without Start (ErrNotStarted), Wait and Test
// without Post (ErrNotPosted), bad groups (ErrGroup); a Start that timed
// out opens nothing (Complete fails with ErrNotStarted) and may be called
// again. Each changes nothing: the epochs that follow move data.
func TestPSCWMisuse(t *testing.T) {
	shortTimeout(t, time.Second)
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		flag, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		defer flag.Free()
		other := 1 - w.Rank()
		_, testErr := win.Test()
		if err := errors.Join(
			expectErr("Complete without Start", win.Complete(), rma.ErrNotStarted),
			expectErr("Wait without Post", win.Wait(), rma.ErrNotPosted),
			expectErr("Test without Post", testErr, rma.ErrNotPosted),
			expectErr("Post with a duplicate", win.Post([]int{other, other}, 0), rma.ErrGroup),
			expectErr("Post to rank 2", win.Post([]int{2}, 0), rma.ErrGroup),
			expectErr("Start to rank -1", win.Start([]int{-1}, 0), rma.ErrGroup),
			expectErr("Start with too many", win.Start([]int{0, 1, 1, 0}, 0), rma.ErrGroup),
		); err != nil {
			return err
		}
		if w.Rank() == 0 {
			// Rank 1 posts only after this Start timed out, told by its flag.
			err := win.Start([]int{1}, 0)
			if err := errors.Join(
				expectErr("Start without a Post", err, transport.ErrTimeout),
				expectErr("Complete after the failed Start", win.Complete(), rma.ErrNotStarted),
				raise(flag, 1),
				win.Start([]int{1}, 0),
				win.Put([]int64{7}, 1, 0),
				win.Complete(),
			); err != nil {
				return err
			}
		} else {
			if err := errors.Join(awaitRaised(flag), win.Post([]int{0}, 0), win.Wait()); err != nil {
				return err
			}
			if got := win.Local()[0]; got != 7 {
				return fmt.Errorf("window holds %d, want 7", got)
			}
			if _, err := win.Test(); !errors.Is(err, rma.ErrNotPosted) {
				return fmt.Errorf("Test after the epoch ended: %v, want ErrNotPosted", err)
			}
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		return win.Free()
	})
}

// raise sets rank to's flag (element 0 of flag) under a lock: a signal
// between ranks that works when they are processes, as under rmarun.
func raise(flag *rma.Window[int64], to int) error {
	return errors.Join(flag.Lock(to, rma.Exclusive, 0), flag.Put([]int64{1}, to, 0), flag.Unlock(to))
}

// awaitRaised waits until another rank raised this rank's flag, retrying
// the bounded waits (the tests that signal set a short timeout).
func awaitRaised(flag *rma.Window[int64]) error {
	var err error
	for try := 0; try < 60; try++ {
		if err = flag.AwaitLocal(0, func(v int64) bool { return v == 1 }); !errors.Is(err, rma.ErrTimeout) {
			return err
		}
	}
	return err
}
