// Package fence is the fence synchronization of rmago windows
// (MPI_Win_fence): one or two rounds of notifications among all ranks
// (zero-length RDMA writes with immediate data), each following the
// rank's puts down the same queue pairs. Protocol and costs:
// docs/sync-protocols.md.
//
// It keeps no epoch state: package rma's state machine runs one Sync at a
// time per window, once the epoch's operations have been issued.
package fence

import "github.com/rmago/rmago/transport"

// putBit marks a round-one notification from a rank that put data.
const putBit = 2

// Fence is one window's fence protocol: its id and its rounds so far.
type Fence struct {
	f     *transport.Fabric
	id    uint16
	round uint32 // barrier rounds so far: consecutive rounds alternate tags
}

// New returns the fence of the window with the given id (equal on every rank).
func New(f *transport.Fabric, id uint16) *Fence { return &Fence{f: f, id: id} }

// Sync runs one fence. flush lists the ranks with reads or atomics to
// complete; put says whether this rank put data since the last fence.
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
