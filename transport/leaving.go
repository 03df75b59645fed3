package transport

import "fmt"

// A rank that calls Close sends its leave barrier's notes (LeaveBarrier)
// to every other rank and sends no other note after them. A rank whose
// wait still expects another note from it (a fence's, PSCW's, a barrier's)
// would wait out its timeout for nothing: the note it waits for is either
// in already (notes arrive in the order they were sent) or never comes.
// So once the leave note is in, such a wait fails at once, naming the rank
// (ErrPeerGone; in a fence, a failure the others are told of, as when the
// rank's connection ended: leftMidFence). Accesses to the leaving rank's
// windows go on: it serves them until every rank has left.
//
// Ranks also leave because of another's failure: a wait names a failed
// rank before one that left, and, of the ranks that left, the one whose
// leave note came first.

// leaveTag is the tag of LeaveBarrier's notes: a world tag (MakeTag
// leaves bits 1 to 11 to the caller) without a barrier's parity, since a
// rank leaves once; so ranks that ran different numbers of barriers (one
// failed) still leave together.
const leaveTag = TagWorld<<28 | 1<<1

// isLeave reports whether a note's tag is a leave barrier's.
func isLeave(tag uint32) bool { return tag == leaveTag }

// leaveArrived records that rank r's leave note came; f.mu held.
func (f *Fabric) leaveArrived(r int) {
	if f.leaving[r].Load() == 0 {
		f.leaves++
		f.leaving[r].Store(f.leaves)
	}
}

// left is the order in which rank r's leave note came (0: it did not, or
// the running wait is a leave barrier's own, leaveWait, which expects it).
// Callers read it before they look for the note they wait for: a note sent
// before the leave note is then seen.
func (f *Fabric) left(r int, leaveWait bool) uint32 {
	if leaveWait {
		return 0
	}
	return f.leaving[r].Load()
}

// firstLeft is, of ranks whose note is missing (arrived false), the one
// whose leave note came first, or -1.
func (f *Fabric) firstLeft(ranks []int, leaveWait bool, arrived func(r int) bool) int {
	first, order := -1, uint32(0)
	for _, r := range ranks {
		if o := f.left(r, leaveWait); o != 0 && (first < 0 || o < order) && !arrived(r) {
			first, order = r, o
		}
	}
	return first
}

// leftWait is the error of a wait that misses rank r's note, r having
// called Close: in a fence (fence), a failure of r the others are told of
// (leftMidFence: a rank stuck on r in a dissemination step watches failed
// ranks, not departed ones).
func (f *Fabric) leftWait(r int, fence bool) error {
	e := leftError(r)
	if p := f.peers[r].Load(); fence && p != nil {
		return f.leftMidFence(r, p, e)
	}
	return e
}

// leftError is the error of a wait for a note from rank r, which called
// Close before sending it.
func leftError(r int) error {
	return fmt.Errorf("%w: rank %d called Close (it left the job) while this rank waits for its note", ErrPeerGone, r)
}
