package transport

import (
	"cmp"
	"errors"
	"fmt"
)

// Collectives of the whole job built on notifications and RDMA writes:
// barriers and a small allgather through the world control region.

// gatherSlot is the bytes a rank contributes to one fabric allgather.
const gatherSlot = 64

// Barrier returns once every rank has entered it. It is built on
// notifications: each rank notifies every other and waits for all of them.
// Everything a rank posted before the barrier is visible at its targets
// after it (each notification is ordered after the requests before it), but
// gets (reads) are complete only once Flush says so.
func (f *Fabric) Barrier() error {
	f.barSeq++
	return f.TagBarrier(MakeTag(TagWorld, 0, f.barSeq))
}

// TagBarrier is a barrier whose notifications carry tag, so that barriers
// of independent objects (windows) never take each other's notifications.
// Callers alternate tags between consecutive barriers (MakeTag's seq does):
// no rank can be more than one barrier ahead of another.
func (f *Fabric) TagBarrier(tag uint32) error {
	for i := 1; i < f.size; i++ {
		if err := f.Notify((f.rank+i)%f.size, tag); err != nil {
			return err
		}
	}
	return f.AwaitNotes(tag, f.size-1, f.othersFn)
}

// LeaveBarrier is the barrier before a rank leaves the job (Close): a
// Barrier whose notifications are signalled and awaited, so that none is
// still queued when the rank destroys its queue pairs. A rank has every
// other's notification before its own have necessarily gone out, and a
// queue pair destroyed with them queued never delivers them (Soft-RoCE
// dropped them, and a peer waited for a notification that never came).
// A flush posted after the barrier would not do: the peer may have left
// by then, and nothing would answer it. A peer that left meanwhile
// (ErrPeerGone) had this rank's notification, since it left the barrier.
//
// The failure notices this rank is sending go out first: the leave note
// must come after them on each queue pair, so that a rank that learns of
// this one's leaving knows already of the failure it left on, and names
// that rank, not this one (leaving.go).
func (f *Fabric) LeaveBarrier() error {
	f.awaitNotices()
	tag := uint32(leaveTag)
	seqs := make([]uint64, f.size)
	var nerr error
	for i := 1; i < f.size; i++ {
		// A rank that cannot be notified (it failed) does not keep the
		// others from their notes: they would wait out the timeout.
		r := (f.rank + i) % f.size
		seq, err := f.NotifySignaled(r, tag)
		nerr = cmp.Or(nerr, err)
		seqs[r] = seq
	}
	if err := f.AwaitNotes(tag, f.size-1, f.othersFn); err != nil {
		return cmp.Or(nerr, err)
	}
	var errs []error
	for r, seq := range seqs {
		if seq == 0 {
			continue
		}
		if err := f.Await(r, seq); err != nil && !errors.Is(err, ErrPeerGone) {
			errs = append(errs, err)
		}
	}
	return cmp.Or(nerr, errors.Join(errs...))
}

func (f *Fabric) others(yield func(int) bool) {
	for r := range f.size {
		if r != f.rank && !yield(r) {
			return
		}
	}
}

// Tag kinds.
const (
	TagWorld  = 1 // world barrier
	TagGather = 2 // allgather
	TagFence  = 3 // window fence
	// 4 is the failure notices' kind (propagate.go).
	TagPost     = 5 // PSCW post: an exposure epoch opened to the receiver
	TagComplete = 6 // PSCW complete: the sender's access epoch to the receiver ended
	TagUser     = 8 // first kind free for higher layers
)

// MakeTag builds a notification tag from a kind (4 bits), an object id
// (16 bits) and a sequence number, of which only the parity is kept (bit
// 0). Bits 1 to 11 are free for the caller's flags.
func MakeTag(kind uint8, id uint16, seq uint32) uint32 {
	return uint32(kind&0xf)<<28 | uint32(id)<<12 | seq&1
}

// Allgather gives every rank's data (at most 64 bytes each) to every rank,
// through RDMA writes into the world control region and a barrier. It is
// collective. out[r] receives rank r's bytes.
func (f *Fabric) Allgather(mine []byte, out [][]byte) error {
	if len(mine) > gatherSlot {
		return fmt.Errorf("transport: allgather of %d bytes (max %d)", len(mine), gatherSlot)
	}
	f.gatherSeq++
	half := f.gatherSeq % 2
	slotOff := func(r int) int { return (half*f.size + r) * gatherSlot }
	ctrl := f.ctrl.Bytes()
	src := ctrl[slotOff(f.rank) : slotOff(f.rank)+gatherSlot]
	clear(src)
	copy(src, mine)
	for r := range f.size {
		if r == f.rank {
			continue
		}
		if _, err := f.Write(r, f.ctrl.Local(slotOff(f.rank)), f.ctrl.Remote(r, slotOff(f.rank)), gatherSlot); err != nil {
			return err
		}
	}
	if err := f.TagBarrier(MakeTag(TagGather, 0, uint32(f.gatherSeq))); err != nil {
		return err
	}
	for r := range f.size {
		copy(out[r], ctrl[slotOff(r):slotOff(r)+gatherSlot])
	}
	return nil
}
