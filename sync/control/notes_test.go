package control_test

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/sync/control/controltest"
)

// TestNoteSet: a note stored into a peer's words, through the mapping or,
// where it is missing, as a write through the queue pair, is in the
// peer's word after a barrier, and the rank's own words take notes too
// (PSCW to itself). Only between ranks notified directly (shm: make test
// runs it with RMAGO_PROVIDER=shm, and on two pretend nodes); on soft it
// checks nothing.
func TestNoteSet(t *testing.T) {
	const n = 3
	controltest.Run(t, n, controltest.Options{}, func(r *controltest.Rank) error {
		me := r.Me()
		right, left := (me+1)%n, (me+n-1)%n
		if me == 0 {
			control.Unmapped(r.C, right) // rank 0 writes through its queue pair
		}
		for round := uint64(1); round <= 3; round++ {
			want := round<<8 | uint64(me)
			if r.C.DirectNotes(right) {
				if err := r.C.NoteSet(right, control.NoteWord(n, me, control.NoteComplete), want); err != nil {
					return err
				}
			}
			if r.C.DirectNotes(me) {
				if err := r.C.NoteSet(me, control.NoteWord(n, me, control.NotePost), want); err != nil {
					return err
				}
			}
			if err := r.F.Barrier(); err != nil {
				return err
			}
			if r.C.DirectNotes(left) {
				if got, want := r.C.Load(control.NoteWord(n, left, control.NoteComplete)), round<<8|uint64(left); got != want {
					return fmt.Errorf("round %d: rank %d's note in my words %#x, want %#x", round, left, got, want)
				}
			}
			if r.C.DirectNotes(me) {
				if got := r.C.Load(control.NoteWord(n, me, control.NotePost)); got != want {
					return fmt.Errorf("round %d: my own note %#x, want %#x", round, got, want)
				}
			}
			if err := r.F.Barrier(); err != nil {
				return err
			}
		}
		return nil
	})
}
