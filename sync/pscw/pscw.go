// Package pscw is the post-start-complete-wait (generalized active target)
// synchronization of rmago windows (MPI_Win_post, MPI_Win_start,
// MPI_Win_complete, MPI_Win_wait, MPI_Win_test), built on remote atomics on
// the window's control region (package sync/control). A rank only ever
// polls its own words; peers change them through the NIC.
//
// # Words
//
// On every rank T, in T's control region:
//
//   - PostBase+O counts the exposure epochs T was granted by rank O: O adds
//     1 there when it posts a group containing T;
//   - CompleteFrom(O) counts the access epochs to T that O ended: O adds 1
//     there when it completes. Counting per origin (one word per rank, as
//     for posts) lets a Wait that times out name the ranks that did not
//     complete.
//
// Both only grow, so no epoch ever resets a word and consecutive epochs
// cannot be confused: each rank counts, per target, the Starts it made
// toward it, and, per origin, the groups it posted that contained it.
//
// # Protocol
//
//   - Post(group) on T: for each O in group, fetch-add O.PostBase+T += 1.
//     Post does not wait for the atomics: it returns once they are posted.
//     Their effect is proven by the completions Wait counts (an origin
//     cannot complete before it saw the post), and a failure of O's
//     connection surfaces in Wait or Test. T then expects one more
//     completion from each O in group.
//   - Start(group) on O: for each T in group, wait until O's own word
//     PostBase+T exceeds the number of Starts O already made toward T, then
//     count this one. Only local memory is polled (transport.LocalWait).
//   - Complete on O: for each T of the access epoch, fetch-add
//     T.CompleteFrom(O) += 1, posted behind O's puts to T on the same reliable
//     queue pair, so executed after them; all are posted before any is
//     awaited, and Complete returns when all have completed, or at once
//     when the provider takes payloads at post time
//     (DeviceAttr.PostCopiesPayload, the soft provider: the puts are then
//     locally complete, and the targets' Wait counts the atomics).
//   - Wait on T: wait until, for each O of the posted group, T's own word
//     CompleteFrom(O) reaches the number of T's groups that contained O
//     (checking only the origins not yet seen complete). Test is the same
//     check, once. A wait that times out names the origins not heard
//     from; a Start that times out names the ranks that did not post.
//
// # Costs
//
//	Post(k ranks)   k atomics, not awaited (0 round trips)
//	Start           0 atomics (local polling)
//	Complete(k)     k atomics, 1 round trip (all in flight together; 0 on soft)
//	Wait, Test      0 atomics (local polling of k words, fewer as they arrive)
//
// Every Complete atomic is a signalled request, so its own completion tells
// the fabric's Wait it is done without an extra flush request.
//
// # Waiting
//
// Start and Wait poll local words, sleeping between polls: 1 µs at first,
// doubling up to 1 ms (Go stretches the short sleeps to a few tens of
// microseconds). They sleep rather than spin with runtime.Gosched: a
// goroutine that only yields keeps its processor away from the network
// poller, which with the soft provider starves the very socket reads that
// would change the word (an in-process 2-rank epoch took ~1.8 ms with a
// yielding poll, ~0.14 ms with sleeps). Each poll also checks
// the connections to the ranks waited for and makes progress on the
// fabric's completion queue, so that a peer that dies abruptly (its
// connection breaks) fails the wait at once with that connection's error.
// A peer that ends in order, or simply never posts or completes, fails the
// wait after the fabric's timeout (transport.Fabric.Timeout) with an error
// wrapping transport.ErrTimeout. After a timeout the epoch is as before the
// call: a Start that timed out opened nothing and can be called again, a
// Wait that timed out leaves the exposure epoch open.
//
// # NoCheck
//
// PostNoCheck and StartNoCheck (MPI_MODE_NOCHECK) skip the handshake: the
// program guarantees that each matching Start happens after the Post has
// completed everywhere it matters (by some other synchronization). The
// post atomics are skipped and so is the wait for them, and the counters
// stay in step only if the assertion is used on both sides of every
// matching pair, as MPI requires: a PostNoCheck must be matched by
// StartNoCheck calls and vice versa. Complete and Wait are unchanged.
//
// # What the caller does
//
// Before Complete the caller completes (flushes) its gets and fetching
// atomics to the group: the target may reuse its memory as soon as Wait
// returns, and Complete's atomic is ordered only behind requests on the
// same queue pair, which covers puts (RC executes them in order at the
// target) but not a read's response on its way back. Puts need no flush.
// Wait returning means every put of the group's origins is in this rank's
// memory.
//
// # Concurrency and errors
//
// The exposure side (Post, Wait, Test) and the access side (Start,
// Complete) keep separate state and may be driven by two goroutines at
// once; calls of one side must not run concurrently. Package rma ensures
// both for a window used by many goroutines: each side has one epoch at a
// time, opened and closed under the window's state machine, and its calls
// run without the window's mutex, so that a Wait or a Start blocking here
// never keeps another goroutine's Complete or Post (which peers may be
// waiting for) from running. Misuse (ErrNotStarted,
// ErrNotPosted, ErrEpochOpen, ErrGroup) changes nothing. A fabric error
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

// Misuse errors, errors.Is-able. They leave the state unchanged.
var (
	// ErrNotStarted: Complete without an access epoch (Start).
	ErrNotStarted = errors.New("pscw: no access epoch (complete without start)")
	// ErrNotPosted: Wait or Test without an exposure epoch (Post).
	ErrNotPosted = errors.New("pscw: no exposure epoch (wait without post)")
	// ErrEpochOpen: Post while an exposure epoch is open, or Start while an
	// access epoch is open.
	ErrEpochOpen = errors.New("pscw: epoch already open")
	// ErrGroup: a group names a rank out of range or a rank twice.
	ErrGroup = errors.New("pscw: bad group")
	// ErrClosed: the PSCW was closed.
	ErrClosed = errors.New("pscw: closed")
)

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
	posted   bool
	exposure []int    // the open epoch's group
	missing  []int    // ranks of exposure whose completion has not arrived
	expected []uint64 // per origin: completions expected by the end of the open epoch
	postSeq  []uint64 // per rank: the last post atomic's sequence number
	markE    []uint32 // group validation
	stampE   uint32

	// Access side.
	started bool
	access  []int    // the open epoch's group
	starts  []uint64 // per target: checked Starts so far
	pending []int    // targets Start still waits for
	seqs    []uint64 // Complete: sequence numbers, by index in access
	markA   []uint32
	stampA  uint32
}

// New returns the PSCW protocol of the window whose control region is c.
// It is local (not collective). It allocates and registers the result
// words; if that fails, every call returns the error.
func New(c *control.Region) *PSCW {
	n := c.F.Size()
	p := &PSCW{
		c: c, f: c.F, me: c.F.Rank(), size: n,
		exposure: make([]int, 0, n), missing: make([]int, 0, n), expected: make([]uint64, n),
		postSeq: make([]uint64, n), markE: make([]uint32, n),
		access: make([]int, 0, n), starts: make([]uint64, n), pending: make([]int, 0, n),
		seqs: make([]uint64, n), markA: make([]uint32, n),
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
	if p.posted {
		return fmt.Errorf("%w: post while an exposure epoch is open", ErrEpochOpen)
	}
	if err := checkGroup(group, p.size, p.markE, &p.stampE); err != nil {
		return err
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
	p.posted = true
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
	if p.started {
		return fmt.Errorf("%w: start while an access epoch is open", ErrEpochOpen)
	}
	if err := checkGroup(group, p.size, p.markA, &p.stampA); err != nil {
		return err
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
	p.started = true
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
	if !p.started {
		return ErrNotStarted
	}
	p.started = false
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
	if !p.posted {
		return ErrNotPosted
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
	p.posted = false
	return nil
}

// Test is the non-blocking Wait (MPI_Win_test): it reports whether every
// rank of the posted group has completed, and ends the exposure epoch if
// so. It fails if the connection to a rank of the group has failed.
func (p *PSCW) Test() (bool, error) {
	if p.err != nil {
		return false, p.err
	}
	if !p.posted {
		return false, ErrNotPosted
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
	p.posted = false
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

// checkGroup validates a group: ranks in [0, size), none twice. mark and
// stamp make the duplicate check allocation-free.
func checkGroup(group []int, size int, mark []uint32, stamp *uint32) error {
	if len(group) > size {
		return fmt.Errorf("%w: %d ranks in a job of %d", ErrGroup, len(group), size)
	}
	*stamp++
	if *stamp == 0 {
		clear(mark)
		*stamp = 1
	}
	for _, r := range group {
		if r < 0 || r >= size {
			return fmt.Errorf("%w: rank %d out of range [0, %d)", ErrGroup, r, size)
		}
		if mark[r] == *stamp {
			return fmt.Errorf("%w: rank %d appears twice", ErrGroup, r)
		}
		mark[r] = *stamp
	}
	return nil
}
