// Package fence is the fence synchronization protocol of rmago windows
// (MPI_Win_fence), built on the fabric's own operations.
//
// A fence completes every operation issued on the window since the last
// fence, on every rank, then opens the next epoch:
//  1. reads and atomics this rank issued are flushed (waited for), so their
//     results are in local memory and the targets are done reading;
//  2. round one: each rank sends every other rank a notification (an RDMA
//     write with immediate data tagged with the window, the round's parity
//     and whether this rank put anything this epoch) and waits for one from
//     each. A notification travels down the same reliable-connected queue
//     pair as the puts before it, and RC executes requests in order, so
//     after round one every rank has received every put addressed to it;
//  3. round two, only if some rank put something and the job has three
//     ranks or more: the same exchange again, so that every rank knows every
//     other rank's memory is complete before it accesses it (a Get in the
//     next epoch must see the puts of this one, and a put in the next epoch
//     must land after them). With two ranks no third party exists: a rank's
//     own later requests to its peer follow its puts down the same queue
//     pair, its puts to itself were flushed, and the peer has seen every put
//     to it after round one.
//
// A fence thus costs one round of notifications with no puts and two with
// them, one round trip in all, and never waits for put acknowledgements.
package fence

import "github.com/rmago/rmago/transport"

// putBit marks a round-one notification from a rank that put data.
const putBit = 2

// Fence is one window's fence state.
type Fence struct {
	f     *transport.Fabric
	id    uint16
	round uint32 // barrier rounds so far: consecutive rounds alternate tags
}

// New returns the fence of the window with the given id (equal on every rank).
func New(f *transport.Fabric, id uint16) *Fence { return &Fence{f: f, id: id} }

// Sync runs one fence. flush lists the ranks with reads or atomics to
// complete; put says whether this rank put data since the last fence. It
// must not run concurrently with itself on one Fence (package rma refuses
// a second goroutine's Fence while one runs).
func (x *Fence) Sync(flush []int, put bool) error {
	for _, r := range flush {
		if err := x.f.Flush(r); err != nil {
			return err
		}
	}
	anyPut, err := x.barrier(put)
	if err != nil || !anyPut || x.f.Size() <= 2 {
		return err
	}
	_, err = x.barrier(false)
	return err
}

// barrier is one round: a notification to every other rank, one awaited
// from each. It reports whether any rank flagged a put.
func (x *Fence) barrier(put bool) (bool, error) {
	x.round++
	tag := transport.MakeTag(transport.TagFence, x.id, x.round)
	mine := tag
	if put {
		mine |= putBit
	}
	f := x.f
	for i := 1; i < f.Size(); i++ {
		if err := f.Notify((f.Rank()+i)%f.Size(), mine); err != nil {
			return false, err
		}
	}
	withPut, err := f.WaitNotifyEither(tag, tag|putBit, f.Size()-1)
	return put || withPut > 0, err
}
