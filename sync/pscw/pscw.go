// Package pscw is the post-start-complete-wait (generalized active target)
// synchronization of rmago windows (MPI_Win_post, MPI_Win_start,
// MPI_Win_complete, MPI_Win_wait, MPI_Win_test): one notification (a
// zero-length RDMA write with immediate data, tagged with the window's id)
// per peer for Post and for Complete, counted per sender by the receiving
// fabric; Start and Wait only take the notifications that arrived. Between
// ranks on shm the notifications are counts in the receiver's control
// words instead (direct notes: direct.go). Protocol, costs, waiting,
// failures: docs/sync-protocols.md.
//
// The package keeps no epoch state: package rma's state machine calls Post
// and Start only while that side has no epoch, Complete only after a Start
// that succeeded, Wait and Test only after a Post, and never two calls of
// one side at once; the exposure side (Post, Wait, Test) and the access
// side (Start, Complete) may run in two goroutines at once. A fabric error
// during Post or Complete leaves the counts undefined (the job is
// expected to end, as MPI's errors are fatal by default).
//
// A PSCW owns nothing to release; Close only refuses later calls.
package pscw

import (
	"errors"
	"fmt"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// ErrClosed means the PSCW was closed.
var ErrClosed = errors.New("pscw: closed")

// PSCW is one window's post-start-complete-wait state on this rank.
type PSCW struct {
	f    *transport.Fabric
	me   int
	size int
	err  error // sticky: ErrClosed

	postTag, completeTag uint32

	// Exposure side.
	exposure []int // the open epoch's group
	missing  []int // ranks of exposure whose completion has not arrived

	// Access side.
	access []int    // the open epoch's group
	seqs   []uint64 // Complete: sequence numbers, by index in access
	sig    []bool   // CompleteFlushing: by rank, its notification is signalled

	d directState // notes to and from ranks reached directly (direct.go)
}

// New returns the PSCW protocol of the window whose control region is c
// and whose id (equal on every rank, distinct among the live windows) is
// id. It is local (not collective).
func New(c *control.Region, id uint16) *PSCW {
	n := c.F.Size()
	p := &PSCW{
		f: c.F, me: c.F.Rank(), size: n,
		postTag:     transport.MakeTag(transport.TagPost, id, 0),
		completeTag: transport.MakeTag(transport.TagComplete, id, 0),
		exposure:    make([]int, 0, n), missing: make([]int, 0, n),
		access: make([]int, 0, n), seqs: make([]uint64, n), sig: make([]bool, n),
	}
	p.initDirect(c)
	return p
}

// Close ends the protocol: later calls fail with ErrClosed. Nothing waits:
// a Post's notifications need no completion, and Complete waits for its
// own.
func (p *PSCW) Close() error {
	p.err = ErrClosed
	return nil
}

// Post opens an exposure epoch of this rank's window to the ranks in group
// (MPI_Win_post): it sends each of them one notification and returns
// without waiting. group may be empty, and may contain this rank.
func (p *PSCW) Post(group []int) error { return p.post(group, false) }

// PostNoCheck opens an exposure epoch without telling the group
// (MPI_MODE_NOCHECK): the matching Starts must be StartNoCheck calls made
// only after this Post, as the program guarantees by other means.
func (p *PSCW) PostNoCheck(group []int) error { return p.post(group, true) }

func (p *PSCW) post(group []int, noCheck bool) error {
	if p.err != nil {
		return p.err
	}
	if !noCheck {
		for _, o := range group {
			var err error
			if p.direct(o) {
				err = p.notePost(o)
			} else {
				err = p.f.Notify(o, p.postTag)
			}
			if err != nil {
				return fmt.Errorf("pscw: post to rank %d: %w", o, err)
			}
		}
	}
	p.exposure = append(p.exposure[:0], group...)
	p.missing = append(p.missing[:0], group...)
	return nil
}

// Start opens an access epoch to the ranks in group (MPI_Win_start): it
// waits until each of them has posted an exposure epoch to this rank that
// no earlier Start matched. It waits in the fabric's completion queues
// (transport.Fabric.AwaitNoteEach), bounded by the fabric's timeout.
// group may be empty, and may contain this rank.
func (p *PSCW) Start(group []int) error { return p.start(group, false) }

// StartNoCheck opens an access epoch without waiting for the posts
// (MPI_MODE_NOCHECK): the matching Posts were PostNoCheck calls that have
// already happened, as the program guarantees by other means.
func (p *PSCW) StartNoCheck(group []int) error { return p.start(group, true) }

func (p *PSCW) start(group []int, noCheck bool) error {
	if p.err != nil {
		return p.err
	}
	if !noCheck {
		direct, notes := p.split(&p.d.access, group)
		if len(direct) > 0 {
			p.d.start.Ranks, p.d.start.Watch = direct, group
			if err := p.f.AwaitDirect(&p.d.start); err != nil {
				return err
			}
		}
		if len(notes) > 0 {
			if err := p.f.AwaitNoteEach(p.postTag, notes, group); err != nil {
				return fmt.Errorf("pscw: start: waiting for posts: %w", err)
			}
		}
		// All posted: take one post of each (only now, so that a Start
		// that fails consumes none and may be called again).
		for _, t := range direct {
			p.d.postTaken[t]++
		}
		for _, t := range notes {
			p.f.TakeNote(p.postTag, t)
		}
	}
	p.access = append(p.access[:0], group...)
	return nil
}

// Complete ends the access epoch (MPI_Win_complete): it sends each target
// one notification, behind this rank's puts to it on the same queue pair
// (so the target sees them when it takes the notification). A target
// whose provider takes payloads at post (transport.Fabric.CopiesPayload:
// soft, shm) is notified without a wait (its puts are locally complete
// once posted); the others' notifications are signalled, all posted
// before any is awaited, and Complete returns when they have completed
// (the puts' origin buffers are then free). The caller has flushed its gets and
// fetching atomics to the group before.
func (p *PSCW) Complete() error { return p.CompleteFlushing(nil) }

// CompleteFlushing is Complete, with the notifications to the ranks of
// after (reads to them still to be flushed) signalled and not awaited:
// the caller's Flush of those ranks then waits for them, whose completion
// implies the reads', instead of posting a request of its own.
func (p *PSCW) CompleteFlushing(after []int) error {
	if p.err != nil {
		return p.err
	}
	for _, r := range after {
		p.sig[r] = true
	}
	defer func() {
		for _, r := range after {
			p.sig[r] = false
		}
	}()
	var err error
	n := 0
	for i, t := range p.access {
		if p.direct(t) {
			// Its puts and reads completed at post.
			if e := p.noteComplete(t); e != nil {
				err = fmt.Errorf("pscw: complete to rank %d: %w", t, e)
				break
			}
			p.seqs[i] = 0
			n = i + 1
			continue
		}
		if p.sig[t] {
			if _, e := p.f.NotifySignaled(t, p.completeTag); e != nil {
				err = fmt.Errorf("pscw: complete to rank %d: %w", t, e)
				break
			}
			p.seqs[i] = 0
			n = i + 1
			continue
		}
		if p.f.CopiesPayload(t) {
			// Its puts are locally complete once posted: nothing to wait
			// for. The notification may wait to leave with what this
			// rank sends next (on soft, the next Post's notification:
			// one write to the socket, not two), or until it waits.
			if e := p.f.NotifySoon(t, p.completeTag); e != nil {
				err = fmt.Errorf("pscw: complete to rank %d: %w", t, e)
				break
			}
			p.seqs[i] = 0
			n = i + 1
			continue
		}
		seq, e := p.f.NotifySignaled(t, p.completeTag)
		if e != nil {
			err = fmt.Errorf("pscw: complete to rank %d: %w", t, e)
			break
		}
		p.seqs[i] = seq
		n = i + 1
	}
	for i, t := range p.access[:n] {
		if p.seqs[i] == 0 {
			continue
		}
		if e := p.f.Await(t, p.seqs[i]); e != nil && err == nil {
			err = fmt.Errorf("pscw: complete to rank %d: %w", t, e)
		}
	}
	return err
}

// Wait ends the exposure epoch (MPI_Win_wait): it returns once every rank
// of the posted group has completed its access epoch to this rank, so that
// their puts are in this rank's memory. It waits in the fabric's
// completion queues, bounded by the fabric's timeout; after a timeout the
// epoch is still open.
func (p *PSCW) Wait() error {
	if p.err != nil {
		return p.err
	}
	if p.done() {
		return nil
	}
	direct, notes := p.split(&p.d.exposure, p.missing)
	if len(direct) > 0 {
		p.d.wait.Ranks, p.d.wait.Watch = direct, p.exposure
		if err := p.f.AwaitDirect(&p.d.wait); err != nil {
			return err
		}
	}
	if len(notes) > 0 {
		if err := p.f.AwaitNoteEach(p.completeTag, notes, p.exposure); err != nil {
			return fmt.Errorf("pscw: wait: %w", err)
		}
	}
	p.done()
	return nil
}

// Test is the non-blocking Wait (MPI_Win_test): it reports whether every
// rank of the posted group has completed, and ends the exposure epoch if
// so. It fails if the connection to a rank of the group has failed.
func (p *PSCW) Test() (bool, error) {
	if p.err != nil {
		return false, p.err
	}
	if !p.done() {
		p.progress()
		if err := p.exposureFailed(); err != nil {
			return false, fmt.Errorf("pscw: test: %w", err)
		}
		if !p.done() {
			return false, nil
		}
	}
	return true, nil
}

// done reports whether the open exposure epoch's completions have all
// arrived, dropping from missing (and consuming) those that have.
func (p *PSCW) done() bool {
	keep := p.missing[:0]
	for _, o := range p.missing {
		switch {
		case p.direct(o) && p.completeArrived(o):
			p.d.doneTaken[o]++
		case !p.direct(o) && p.f.TakeNote(p.completeTag, o):
		default:
			keep = append(keep, o)
		}
	}
	p.missing = keep
	return len(keep) == 0
}

// failed returns the error of the first rank in ranks whose connection has
// failed.
func (p *PSCW) failed(ranks []int) error {
	for _, r := range ranks {
		if err := p.f.Err(r); err != nil {
			return fmt.Errorf("rank %d failed: %w", r, err)
		}
	}
	return nil
}

// exposureFailed returns the error of a rank of the exposure group that
// keeps the epoch from completing: a rank whose completion is missing and
// whose connection ended (failed or left), or any rank of the group that
// failed (transport.ErrPeer without ErrPeerGone), even after its
// completion arrived: the others, which may be waiting on it, may never
// complete, and a timeout would then blame them instead.
func (p *PSCW) exposureFailed() error { return p.groupFailed(p.missing, p.exposure) }

// groupFailed is exposureFailed for any wait: the first rank of missing
// whose connection ended, else the first rank of group that failed.
func (p *PSCW) groupFailed(missing, group []int) error {
	if err := p.failed(missing); err != nil {
		return err
	}
	for _, r := range group {
		if err := p.f.Err(r); err != nil && !errors.Is(err, transport.ErrPeerGone) {
			return fmt.Errorf("rank %d failed: %w", r, err)
		}
	}
	return nil
}

// progress polls the fabric's completion queue once, without blocking, so
// that a broken connection is noticed (recorded as that peer's error) even
// though this rank only polls its own memory.
func (p *PSCW) progress() {
	p.f.Progress()
	p.f.EndProgress() // one step: Test does not wait
}
