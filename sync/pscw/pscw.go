// Package pscw is the post-start-complete-wait (generalized active target)
// synchronization of rmago windows (MPI_Win_post, MPI_Win_start,
// MPI_Win_complete, MPI_Win_wait, MPI_Win_test): counters on the window's
// control region (package sync/control) that only grow, changed by remote
// fetch-and-adds; a rank only polls its own words.
// Words, protocol, costs, waiting, failures: docs/sync-protocols.md.
//
// The package keeps no epoch state: package rma's state machine calls Post
// and Start only while that side has no epoch, Complete only after a Start
// that succeeded, Wait and Test only after a Post, and never two calls of
// one side at once; the exposure side (Post, Wait, Test) and the access
// side (Start, Complete) may run in two goroutines at once. A fabric error
// during Post or Complete leaves the counters undefined (the job is
// expected to end, as MPI's errors are fatal by default).
//
// A PSCW owns a small registered array of result words (one per rank, where
// the old values of its atomics land: each written only by the queue pair
// to that rank); Close releases it.
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
	c    *control.Region
	f    *transport.Fabric
	me   int
	size int
	err  error // sticky: allocation failure, or ErrClosed

	// Result words: word r receives the old values of atomics to rank r.
	land *transport.Region

	// Exposure side.
	exposure []int    // the open epoch's group
	missing  []int    // ranks of exposure whose completion has not arrived
	expected []uint64 // per origin: completions expected by the end of the open epoch
	postSeq  []uint64 // per rank: the last post atomic's sequence number

	// Access side.
	access  []int    // the open epoch's group
	starts  []uint64 // per target: checked Starts so far
	pending []int    // targets Start still waits for
	seqs    []uint64 // Complete: sequence numbers, by index in access
}

// New returns the PSCW protocol of the window whose control region is c.
// It is local (not collective). It allocates and registers the result
// words; if that fails, every call returns the error.
func New(c *control.Region) *PSCW {
	n := c.F.Size()
	p := &PSCW{
		c: c, f: c.F, me: c.F.Rank(), size: n,
		exposure: make([]int, 0, n), missing: make([]int, 0, n), expected: make([]uint64, n), postSeq: make([]uint64, n),
		access: make([]int, 0, n), starts: make([]uint64, n), pending: make([]int, 0, n), seqs: make([]uint64, n),
	}
	land, err := c.F.AllocRegion(8*n, transport.LocalOnly)
	if err != nil {
		p.err = fmt.Errorf("pscw: result words: %w", err)
		return p
	}
	p.land = land
	return p
}

// Close waits for this rank's outstanding post atomics and releases the
// result words. Call it when the window is freed, before its control
// region is closed. Later calls fail with ErrClosed.
func (p *PSCW) Close() error {
	if p.land == nil {
		p.err = ErrClosed
		return nil
	}
	var errs []error
	for r, seq := range p.postSeq {
		if seq != 0 {
			if err := p.f.Wait(r, seq); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, p.land.Close())
	p.land, p.err = nil, ErrClosed
	return errors.Join(errs...)
}

// landAt is the result word for atomics to rank r.
func (p *PSCW) landAt(r int) transport.Local {
	return p.land.Local(8 * r)
}

// Post opens an exposure epoch of this rank's window to the ranks in group
// (MPI_Win_post): it tells each of them with one remote atomic and returns
// without waiting for the atomics. group may be empty, and may contain
// this rank.
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
			seq, err := p.f.FetchAdd(o, p.landAt(o), p.c.RemoteAt(o, control.PostBase+p.me), 1)
			if err != nil {
				return fmt.Errorf("pscw: post to rank %d: %w", o, err)
			}
			p.postSeq[o] = seq
		}
	}
	p.exposure = append(p.exposure[:0], group...)
	p.missing = append(p.missing[:0], group...)
	for _, o := range group {
		p.expected[o]++
	}
	return nil
}

// Start opens an access epoch to the ranks in group (MPI_Win_start): it
// waits until each of them has posted an exposure epoch to this rank that
// no earlier Start matched. It polls local memory only, bounded by the
// fabric's timeout. group may be empty, and may contain this rank.
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
		p.pending = p.pending[:0]
		for _, t := range group {
			if !p.postedBy(t) {
				p.pending = append(p.pending, t)
			}
		}
		b := p.f.NewLocalWait()
		defer b.Done()
		for len(p.pending) > 0 {
			if err := p.groupFailed(p.pending, group); err != nil {
				return fmt.Errorf("pscw: start: waiting for a post: %w", err)
			}
			if !b.Pause() {
				if b.Grace() {
					continue
				}
				return fmt.Errorf("pscw: start: %w after %v (%d of %d ranks did not post: no post from %s)",
					transport.ErrTimeout, p.f.Timeout(), len(p.pending), len(group), transport.RankList(p.pending))
			}
			keep := p.pending[:0]
			for _, t := range p.pending {
				if !p.postedBy(t) {
					keep = append(keep, t)
				}
			}
			p.pending = keep
		}
		for _, t := range group {
			p.starts[t]++
		}
	}
	p.access = append(p.access[:0], group...)
	return nil
}

// postedBy reports whether rank t posted an exposure epoch to this rank
// that no Start matched yet.
func (p *PSCW) postedBy(t int) bool {
	return p.c.Load(control.PostBase+t) > p.starts[t]
}

// Complete ends the access epoch (MPI_Win_complete): it adds one to each
// target's word that counts this rank's completions (control.CompleteFrom),
// behind this rank's puts to it, and returns once all the additions have
// completed. The caller has flushed its gets and fetching atomics to the
// group before.
func (p *PSCW) Complete() error {
	if p.err != nil {
		return p.err
	}
	var err error
	n := 0
	for i, t := range p.access {
		seq, e := p.f.PostAtomic(t, transport.Atomic{Op: transport.FetchAddOp, Local: p.landAt(t),
			Remote: p.c.RemoteAt(t, control.CompleteFrom(p.size, p.me)), CompareAdd: 1})
		if e != nil {
			err = fmt.Errorf("pscw: complete to rank %d: %w", t, e)
			break
		}
		p.seqs[i] = seq
		n = i + 1
	}
	if err == nil && p.f.Device().PostCopiesPayload {
		// The puts are locally complete once posted, and the targets'
		// Wait counts the atomics: nothing to wait for here. A failure
		// surfaces at the next operation on that connection.
		return nil
	}
	for i, t := range p.access[:n] {
		if e := p.f.Wait(t, p.seqs[i]); e != nil && err == nil {
			err = fmt.Errorf("pscw: complete to rank %d: %w", t, e)
		}
	}
	return err
}

// Wait ends the exposure epoch (MPI_Win_wait): it returns once every rank
// of the posted group has completed its access epoch to this rank, so that
// their puts are in this rank's memory. It polls local memory only, bounded
// by the fabric's timeout; after a timeout the epoch is still open.
func (p *PSCW) Wait() error {
	if p.err != nil {
		return p.err
	}
	b := p.f.NewLocalWait()
	defer b.Done()
	for !p.done() {
		if err := p.exposureFailed(); err != nil {
			return fmt.Errorf("pscw: wait: %w", err)
		}
		if !b.Pause() {
			if b.Grace() {
				continue
			}
			return fmt.Errorf("pscw: wait: %w after %v (%d of %d completions arrived: none from %s)",
				transport.ErrTimeout, p.f.Timeout(), len(p.exposure)-len(p.missing), len(p.exposure), transport.RankList(p.missing))
		}
	}
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
// arrived, dropping from missing the origins whose completion has. An
// origin's word may run ahead only with StartNoCheck origins that already
// completed their next epoch.
func (p *PSCW) done() bool {
	keep := p.missing[:0]
	for _, o := range p.missing {
		if p.c.Load(control.CompleteFrom(p.size, o)) < p.expected[o] {
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
