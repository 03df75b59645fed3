package rma_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestSyncErrors: synchronization misuse fails with a sentinel error that
// says what failed, on which rank, and what to do: Flush and FlushAll with
// no access epoch (they used to return nil), an invalid lock type, and
// Free while each kind of epoch is open (it used to advise Fence for
// every one).
func TestSyncErrors(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 1)
		if err != nil {
			return err
		}
		other := 1 - w.Rank()
		check := func(what string, err, want error, says ...string) error {
			if !errors.Is(err, want) {
				return errors.New(what + ": got " + errString(err) + ", want " + want.Error())
			}
			for _, s := range says {
				if !strings.Contains(err.Error(), s) {
					return errors.New(what + ": error " + err.Error() + " does not say " + s)
				}
			}
			return nil
		}
		if err := errors.Join(
			check("Flush with no epoch", win.Flush(other), rma.ErrNoEpoch, "Flush", "Lock"),
			check("FlushLocal with no epoch", win.FlushLocal(other), rma.ErrNoEpoch),
			check("FlushAll with no epoch", win.FlushAll(), rma.ErrNoEpoch, "FlushAll"),
			check("FlushLocalAll with no epoch", win.FlushLocalAll(), rma.ErrNoEpoch),
			check("LockType(0)", win.Lock(other, rma.LockType(0), 0), rma.ErrLockType, "LockType(0)", "Exclusive"),
			check("LockType(9)", win.Lock(other, rma.LockType(9), 0), rma.ErrLockType),
		); err != nil {
			return err
		}
		// Free names the open epoch and the call that ends it.
		for _, c := range []struct {
			open, close func() error
			says        string
		}{
			{func() error { return win.Lock(other, rma.Shared, 0) }, func() error { return win.Unlock(other) }, "Unlock("},
			{func() error { return win.LockAll(0) }, win.UnlockAll, "UnlockAll"},
			// Exposure to itself, then access to itself inside it.
			{func() error { return win.Post([]int{w.Rank()}, 0) }, func() error { return nil }, "Wait"},
			{func() error { return win.Start([]int{w.Rank()}, 0) }, func() error { return errors.Join(win.Complete(), win.Wait()) }, "Complete"},
		} {
			if err := c.open(); err != nil {
				return err
			}
			if err := check("Free while open", win.Free(), rma.ErrEpochOpen, c.says, "rank"); err != nil {
				return err
			}
			if err := c.close(); err != nil {
				return err
			}
		}
		// Inside a fence epoch after a put: Free asks for a Fence.
		if err := errors.Join(win.Fence(0), win.Put([]int64{1}, other, 0)); err != nil {
			return err
		}
		if err := check("Free after a put", win.Free(), rma.ErrEpochOpen, "Fence"); err != nil {
			return err
		}
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		return win.Free()
	})
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
