package transport

import (
	"fmt"
	"testing"
	"time"
)

// HasEitherNote finds a notification under either of its tags, from the
// rank that sent it only, without consuming it.
func TestHasEitherNote(t *testing.T) {
	openJob(t, 2, func(f *Fabric) error {
		a, b := MakeTag(TagUser, 3, 0), MakeTag(TagUser, 3, 1)
		if f.Rank() == 1 {
			if err := f.Notify(0, b); err != nil {
				return err
			}
			return f.AwaitNotes(a, 1, nil) // rank 0 has looked
		}
		deadline := time.Now().Add(10 * time.Second)
		for !f.HasEitherNote(a, b, 1) {
			if time.Now().After(deadline) {
				return fmt.Errorf("rank 1's notification never seen")
			}
			f.Progress()
			f.EndProgress()
		}
		switch {
		case f.HasNote(a, 1):
			return fmt.Errorf("found under the other tag")
		case !f.HasNote(b, 1) || !f.HasEitherNote(b, a, 1):
			return fmt.Errorf("not found under its tag")
		case f.HasEitherNote(a, b, 0):
			return fmt.Errorf("found from the wrong rank")
		}
		if err := f.AwaitNotes(b, 1, nil); err != nil { // still there: consumed now
			return err
		}
		if f.HasEitherNote(a, b, 1) {
			return fmt.Errorf("found after it was consumed")
		}
		return f.Notify(1, a)
	})
}
