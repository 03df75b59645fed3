package fence

import (
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// Direct notes (sync/control's notes.go): on a fence with control words,
// a rank notified directly (a node-local peer on shm) gets each round's
// note as a store into its words, not as a notification: the fence's
// number shifted left by one, plus one for a round-one note of a rank that
// put. Round-one notes (NoteFence) and barrier-only ones (NoteBarrier:
// round two, eager or lazy, and the dissemination steps, each of which
// hears from a different rank) have a word per sender and fence parity: a
// rank is never more than one fence ahead of another, so the word of the
// fence's parity holds either this fence's note or an older fence's. The
// waiter polls its own words (transport.Fabric.AwaitDirect). Every request
// to such a rank completed at post, so the note follows the epoch's puts
// as a notification would.

// directWait is one wait for direct notes of a fence: the kind of note, the
// fence number expected, and the wait itself (its functions bound once).
type directWait struct {
	x    *Fence
	kind int    // control.NoteFence or control.NoteBarrier
	num  uint32 // the fence whose notes are awaited
	w    transport.DirectWait
}

func (d *directWait) init(x *Fence) {
	d.x = x
	d.w.Arrived = d.arrived
}

// arrived reports whether rank r's note of the awaited kind and fence has
// arrived.
func (d *directWait) arrived(r int) bool {
	return d.x.c.Load(d.x.noteWord(r, d.kind, d.num))>>1 == uint64(d.num)
}

// await waits for the notes of kind and fence num from ranks, ending early
// if a rank of watch fails; grace (0: the fabric's) as AwaitNotesGrace.
func (d *directWait) await(what string, tag uint32, kind int, num uint32, ranks, watch []int, grace time.Duration) error {
	d.kind, d.num = kind, num
	d.w.What, d.w.Tag, d.w.Ranks, d.w.Watch, d.w.Grace = what, tag, ranks, watch, grace
	if d.w.Bell.Ring == nil {
		d.w.Bell = d.x.c.Bell()
	}
	return d.x.f.AwaitDirect(&d.w)
}

// direct reports whether rank r gets and sends this fence's notes
// directly.
func (x *Fence) direct(r int) bool { return x.c != nil && x.c.DirectNotes(r) }

// noteWord is the word where rank s's note of kind for fence num lands.
func (x *Fence) noteWord(s, kind int, num uint32) int {
	return control.NoteWord(x.f.Size(), s, kind+int(num&1))
}

// noteTo stores this rank's note of kind for fence num, with flag (1: it
// put, round one only), into rank r's words.
func (x *Fence) noteTo(r, kind int, num uint32, flag uint64) error {
	return x.c.NoteSet(r, x.noteWord(x.f.Rank(), kind, num), uint64(num)<<1|flag)
}

// flagged reports whether rank r's round-one note of fence num says it
// put.
func (x *Fence) flagged(r int, num uint32) bool {
	return x.c.Load(x.noteWord(r, control.NoteFence, num))&1 != 0
}

// others is every rank but this one (bound once).
func (x *Fence) othersList() []int {
	if x.others == nil {
		for r := range x.f.Size() {
			if r != x.f.Rank() {
				x.others = append(x.others, r)
			}
		}
	}
	return x.others
}
