package lock

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/rmago/rmago/sync/control"
)

// TestDirectLocks: in target mode (shm) TryDirect takes a free lock with
// one CPU atomic and refuses, changing nothing, one that conflicts (an
// exclusive holder, a shared holder for an exclusive locker, a waiting
// writer for a shared one), after which Lock still takes it once it is
// free; UnlockDirect releases what either took. In leader mode (soft)
// both refuse, so that rma falls back to Lock and Unlock. runJob checks
// that every lock word is back to 0.
func TestDirectLocks(t *testing.T) {
	runJob(t, 3, jobOpts{}, func(r *rank) error {
		l := New(r.C)
		if !l.target {
			if l.TryDirect(1, true) || l.TryDirect(1, false) || l.UnlockDirect(1, true) {
				return fmt.Errorf("rank %d: a direct lock call ran in leader mode", r.Me())
			}
			return nil
		}
		step := func(name string, fn func() error) error {
			var err error
			if fn != nil {
				err = fn()
			}
			if berr := r.F.Barrier(); err == nil && berr != nil {
				err = berr
			}
			if err != nil {
				return fmt.Errorf("rank %d, %s: %w", r.Me(), name, err)
			}
			return nil
		}
		const tgt = 2
		me := r.Me()
		// Rank 0 holds tgt exclusively; rank 1 can take it neither way.
		if err := step("exclusive taken", func() error {
			if me == 0 && !l.TryDirect(tgt, true) {
				return fmt.Errorf("TryDirect of a free lock refused")
			}
			return nil
		}); err != nil {
			return err
		}
		if err := step("conflicts refused", func() error {
			if me == 1 && (l.TryDirect(tgt, true) || l.TryDirect(tgt, false)) {
				return fmt.Errorf("TryDirect took a lock held exclusively")
			}
			if me == 0 && l.nexcl.Load() != 1 {
				return fmt.Errorf("nexcl %d, want 1", l.nexcl.Load())
			}
			return nil
		}); err != nil {
			return err
		}
		// Rank 0 releases; ranks 0 and 1 share it; an exclusive try fails.
		if err := step("released", func() error {
			if me == 0 && !l.UnlockDirect(tgt, true) {
				return fmt.Errorf("UnlockDirect refused")
			}
			return nil
		}); err != nil {
			return err
		}
		if err := step("shared taken", func() error {
			if me < 2 && !l.TryDirect(tgt, false) {
				return fmt.Errorf("shared TryDirect of a free lock refused")
			}
			return nil
		}); err != nil {
			return err
		}
		if err := step("exclusive refused while shared", func() error {
			if me == 2 && l.TryDirect(tgt, true) {
				return fmt.Errorf("exclusive TryDirect taken under shared holders")
			}
			return nil
		}); err != nil {
			return err
		}
		// Rank 2 waits as a writer (Lock) while they hold it; rank 0's
		// shared try is then refused (a waiting writer goes first).
		done := make(chan error, 1)
		if me == 2 {
			go func() { done <- l.Lock(tgt, true) }()
			// Until its waiting-writer count shows in this rank's own
			// word (bounded: Lock fails after the fabric's timeout).
			for r.C.Load(control.Lock)&writerMask == 0 && len(done) == 0 {
				runtime.Gosched()
			}
		}
		if err := step("writer waiting", nil); err != nil {
			return err
		}
		if err := step("shared refused behind a writer", func() error {
			if me == 0 && l.TryDirect(tgt, false) {
				return fmt.Errorf("shared TryDirect taken ahead of a waiting writer")
			}
			return nil
		}); err != nil {
			return err
		}
		if err := step("shared released", func() error {
			if me < 2 && !l.UnlockDirect(tgt, false) {
				return fmt.Errorf("shared UnlockDirect refused")
			}
			return nil
		}); err != nil {
			return err
		}
		return step("writer got it", func() error {
			if me != 2 {
				return nil
			}
			if err := <-done; err != nil {
				return err
			}
			if !l.UnlockDirect(tgt, true) {
				return fmt.Errorf("UnlockDirect of Lock's lock refused")
			}
			return nil
		})
	})
}
