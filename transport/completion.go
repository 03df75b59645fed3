package transport

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// Completions: the goroutine that needs one polls the shared completion
// queue and dispatches what it finds for everyone; Wait, Test and Flush of
// posted requests are built on that.

// Await waits until request seq to rank r has completed. If no signalled
// request at or after seq was posted, it posts one, since only signalled
// requests report completion.
func (f *Fabric) Await(r int, seq uint64) error { return f.awaitRequest(r, seq, 0) }

// AwaitWithin is Await bounded by d instead of the fabric's timeout, for a
// protocol undoing an attempt that already waited out a timeout: a rank
// that does not answer within d is given up, as after a timeout.
func (f *Fabric) AwaitWithin(r int, seq uint64, d time.Duration) error {
	return f.awaitRequest(r, seq, d)
}

// awaitRequest is Await with bound d (0: the fabric's timeout).
func (f *Fabric) awaitRequest(r int, seq uint64, d time.Duration) error {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return f.Err(r) // nothing was posted to it
	}
	if p.done.Load() >= seq {
		return f.Err(r)
	}
	p.postMu.Lock()
	if p.lastSignaled < seq {
		p.flushWR = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled}
		if _, err := f.postLocked(p, &p.flushWR); err != nil {
			p.postMu.Unlock()
			return err
		}
	}
	p.postMu.Unlock()
	if p.c.atPost && f.pollPosted(p.c) && p.done.Load() >= seq {
		return f.Err(r) // done at post: no clock, no wait
	}
	cond := func() bool { return p.done.Load() >= seq }
	op := waitOp{what: "wait", rank: r, seq: seq, fails: true}
	if d > 0 {
		return f.waitUntil(cond, op, time.Now().Add(d), nil)
	}
	return f.waitFor(cond, op, nil)
}

// Test reports whether request seq to rank r has completed, making
// progress once without blocking (it may post a signalled request so that
// completion can be seen at all).
func (f *Fabric) Test(r int, seq uint64) (bool, error) {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return true, f.Err(r) // nothing was posted to it
	}
	if p.done.Load() >= seq {
		return true, f.Err(r)
	}
	p.postMu.Lock()
	if p.lastSignaled < seq {
		p.flushWR = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled}
		if _, err := f.postLocked(p, &p.flushWR); err != nil {
			p.postMu.Unlock()
			return false, err
		}
	}
	p.postMu.Unlock()
	// Drive the providers too, not only the completion queues: a caller
	// that tests in a loop may hold the only processor and never block.
	for _, pg := range f.progs {
		pg.Progress()
	}
	f.EndProgress()
	f.mu.Lock()
	if !f.polling {
		if _, err := f.pollLocked(); err != nil {
			f.mu.Unlock()
			return false, err
		}
	}
	f.mu.Unlock()
	if err := f.Err(r); err != nil {
		return true, err
	}
	return p.done.Load() >= seq, nil
}

// Flush waits until every request posted to rank r so far has completed
// at the target (remote completion).
func (f *Fabric) Flush(r int) error {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return f.Err(r) // nothing was posted to it
	}
	if p.done.Load() >= p.posted.Load() {
		// Everything this goroutine posted before has completed (others'
		// posts racing with this Flush are theirs to flush).
		return f.Err(r)
	}
	p.postMu.Lock()
	target := p.posted.Load()
	if p.done.Load() >= target {
		p.postMu.Unlock()
		return f.Err(r)
	}
	if p.lastSignaled < target && p.c.atPost && f.pollPosted(p.c) {
		p.postMu.Unlock()
		return f.Err(r) // everything posted has completed, and its failures are counted
	}
	if p.lastSignaled < target {
		p.flushWR = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled}
		seq, err := f.postLocked(p, &p.flushWR)
		if err != nil {
			p.postMu.Unlock()
			return err
		}
		target = seq
	}
	p.postMu.Unlock()
	return f.waitFor(func() bool { return p.done.Load() >= target }, waitOp{what: "flush", rank: r, seq: target, fails: true}, nil)
}

// Outstanding reports whether a request posted to rank r has not
// completed yet (false for a rank nothing was posted to). A caller about to
// post a release that only needs to follow completed work uses it to skip
// waiting for the release.
func (f *Fabric) Outstanding(r int) bool {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return false
	}
	return p.done.Load() < p.posted.Load()
}

// FlushAll flushes every peer, the rank itself included. The flush
// requests are all posted before any is awaited, so the round trips
// overlap.
func (f *Fabric) FlushAll() error {
	for r := range f.size {
		f.postFlush(r)
	}
	var errs []error
	for r := range f.size {
		if err := f.Flush(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ReadsBeforeRecv reports whether rank r's provider delivers a
// notification only after the reads and atomics posted to r before it
// have taken their data and made their change at r
// (verbs.DeviceAttr.ReadsBeforeRecv). An epoch's closing notification
// may then go out before its reads complete, the wait for them
// overlapping the notification's way (PostFlushes before the
// notification, FlushRanks after it).
func (f *Fabric) ReadsBeforeRecv(r int) bool {
	p := f.peers[r].Load()
	return p != nil && p.c != nil && p.c.readsFirst
}

// AtomicsInOrder reports whether rank r's provider executes the atomics
// and accumulates posted to r in order with the requests after them, and
// takes their old values as it executes them
// (verbs.DeviceAttr.AtomicsInOrder): a lock's release posted behind them
// then cannot take effect first, and needs no flush before it.
func (f *Fabric) AtomicsInOrder(r int) bool {
	p := f.peers[r].Load()
	return p != nil && p.c != nil && p.c.atomsInOrder
}

// CopiesPayload reports whether rank r's provider has taken a write's
// payload when the post returns (verbs.DeviceAttr.PostCopiesPayload): the
// source buffer may then be reused at once, and a write is locally
// complete without waiting for its completion.
func (f *Fabric) CopiesPayload(r int) bool {
	p := f.peers[r].Load()
	return p != nil && p.c != nil && p.c.copies
}

// PostFlushes posts the request that a later Flush or FlushRanks of each
// rank of ranks waits for, without waiting.
func (f *Fabric) PostFlushes(ranks []int) {
	for _, r := range ranks {
		f.postFlush(r)
	}
}

// FlushRanks is Flush of each rank in ranks, the requests all posted
// before any is awaited.
func (f *Fabric) FlushRanks(ranks []int) error {
	for _, r := range ranks {
		f.postFlush(r)
	}
	var errs []error
	for _, r := range ranks {
		if err := f.Flush(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pollPosted dispatches every completion c's CQ holds, for a provider whose
// requests complete at post (verbs.DeviceAttr.CompletesAtPost): all that
// was posted is then accounted for. It does nothing and reports false if
// another goroutine is polling (it may hold completions not dispatched
// yet).
func (f *Fabric) pollPosted(c *pctx) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.polling {
		return false
	}
	for {
		n, err := c.cq.Poll(c.wcs)
		if err != nil {
			return false
		}
		if n > 0 {
			f.dispatch(c, c.wcs[:n])
			f.cond.Broadcast()
		}
		if n < len(c.wcs) {
			return true
		}
	}
}

// postFlush posts Flush's request to rank r, if one is needed, without
// waiting; the Flush that follows then only waits. Errors are left to it.
func (f *Fabric) postFlush(r int) {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	if target := p.posted.Load(); p.done.Load() < target && p.lastSignaled < target && !p.c.atPost {
		p.flushWR = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled}
		_, _ = f.postLocked(p, &p.flushWR) // a failure: the Flush that follows reports it
	}
}

// waitFor makes progress until cond holds (checked under f.mu). It fails
// if the connection to op.rank fails (op.rank < 0: none in particular;
// from, if not nil, lists ranks whose failure also ends the wait, unless
// the notification the wait expects from them has arrived), or on
// timeout. It allocates nothing unless it fails.
func (f *Fabric) waitFor(cond func() bool, op waitOp, from func(yield func(int) bool)) error {
	var deadline time.Time
	if f.timeout > 0 {
		if f.doneAtFirstLook(cond) {
			return nil
		}
		deadline = time.Now().Add(f.timeout)
	}
	return f.waitUntil(cond, op, deadline, from)
}

// doneAtFirstLook checks cond, then, if nobody else is polling, polls the
// completion queues once and checks again, so that a wait the first look
// satisfies reads no clock. Where the kernel trusts no TSC (under an
// emulator) a clock read is a system call, as dear as a short request: ibv
// on Soft-RoCE has a write's completion queued when its post returns.
// Errors are left to the wait that follows.
func (f *Fabric) doneAtFirstLook(cond func() bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cond() {
		return true
	}
	if f.polling {
		return false
	}
	// Polled as waitUntil polls, holding the polling token rather than
	// f.mu: a provider's poll may write (soft sends its corks first).
	f.polling = true
	f.mu.Unlock()
	got, _ := f.pollEach()
	f.mu.Lock()
	f.polling = false
	f.dispatchGot()
	f.cond.Broadcast()
	return got && cond()
}

// checkRank is the yield function waitUntil hands to its from iterator:
// it finds the failed ranks that end the wait (f.scan), leaving the error
// of one in f.scanErr. The group of a notification wait fails as a whole:
// a rank that failed (ErrPeer) ends the wait even after its notification
// arrived, as the peers it failed on may never notify (it stops there);
// a rank that left in order (ErrPeerGone) ends it only if its notification
// has not arrived, and is named only if no rank failed, since ranks may
// leave because of another's failure (in a fence, where such a rank counts
// as failed, too: f.scanGone). A leave barrier's wait (LeaveBarrier)
// needs nothing but the notes: a rank whose leave note came has left,
// failed or not. A rank not connected yet is connected in the background
// (kick), so that a wait for a rank that failed before it ever reached
// this one fails at once too. f.mu held.
func (f *Fabric) checkRank(r int) bool {
	p := f.peers[r].Load()
	if p == nil {
		f.kick(r)
		return true
	}
	leaveWait := f.scan.ntags > 0 && isLeave(f.scan.tags[0])
	e := p.err.Load()
	if e != nil && leaveWait && f.delivered(r) {
		// It has left: whatever it failed on, it no longer reaches this
		// rank, and the others this rank waits for leave as well, or fail
		// (a leave barrier that ended on it at once used to close this
		// rank's connections under ranks still in a fence with it).
		return true
	}
	if e == nil {
		// It called Close before its note (leaving.go)? Named after the
		// scan if no rank failed, and of such ranks the first that left.
		if o := f.left(r, leaveWait); o != 0 && !f.delivered(r) &&
			(f.scanLeft < 0 || o < f.leaving[f.scanLeft].Load()) {
			f.scanLeft = r
		}
		return true
	}
	if !errors.Is(*e, ErrPeerGone) {
		f.scanErr = *e
		return false
	}
	if f.scan.ntags > 0 && f.scan.tags[0]>>28 == TagFence && !f.delivered(r) {
		// It left before its note of a fence: a failure for the fence,
		// named after the scan if no rank failed (it may have left on one).
		if f.scanGone < 0 {
			f.scanGone = r
		}
		return true
	}
	if f.scanErr == nil && (f.scan.ntags == 0 || !f.delivered(r)) {
		f.scanErr = *e
	}
	return true
}

// waitUntil is waitFor with an explicit deadline (zero: none).
func (f *Fabric) waitUntil(cond func() bool, op waitOp, deadline time.Time, from func(yield func(int) bool)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := deadline // the wait's own deadline, then the grace's (propagate.go)
	for {
		if cond() {
			return nil
		}
		if f.failed != nil {
			return f.failed
		}
		if op.rank >= 0 {
			if err := f.Err(op.rank); err != nil {
				return fmt.Errorf("%s to rank %d: %w", op.what, op.rank, err)
			}
		}
		if from != nil {
			// Called directly rather than ranged over: a range-over-func
			// loop here would allocate its state on every wait. A failure
			// reaches the completion queue after everything the rank sent
			// before it, so its notification, if it sent one, has been
			// counted by now.
			f.scanErr, f.scanGone, f.scanLeft = nil, -1, -1
			f.scan = op
			from(f.checkFn)
			switch {
			case f.scanErr != nil:
			case f.scanGone >= 0:
				p := f.peers[f.scanGone].Load()
				f.scanErr = f.leftMidFence(f.scanGone, p, *p.err.Load())
			case f.scanLeft >= 0:
				f.scanErr = f.leftWait(f.scanLeft, op.ntags > 0 && op.tags[0]>>28 == TagFence)
			}
			if err := f.scanErr; err != nil {
				f.scanErr = nil
				return fmt.Errorf("%s: %w", op.what, err)
			}
		}
		if f.polling {
			f.cond.Wait()
			continue
		}
		mask := f.waitMask(op.rank, from)
		f.polling = true
		f.mu.Unlock()
		err := f.waitCQs(end, mask)
		f.mu.Lock()
		f.polling = false
		f.dispatchGot()
		f.cond.Broadcast()
		if errors.Is(err, verbs.ErrTimeout) {
			if !cond() && from != nil && end.Equal(deadline) {
				// The ranks still missing look healthy, but may be stuck
				// on one that failed: wait a little for a failure notice
				// naming it before blaming them.
				end = deadline.Add(cmp.Or(op.grace, f.noticeGrace()))
				continue
			}
			if !cond() && from != nil {
				stopped, running := f.missingState(from)
				if stopped == 0 && running > 0 && !op.spared {
					// The grace passed, but the ranks still missing run
					// (the kernel says so): they are more likely stuck on
					// a rank that failed than failed themselves, and the
					// rank waiting for that one may have a longer grace
					// (a dissemination step's is shorter than a fence's
					// first round's) or be late on a crowded node. Wait,
					// once, until half a grace past the longest grace.
					op.spared = true
					end = deadline.Add(f.noticeGrace() * 3 / 2)
					if now := time.Now(); !end.After(now) {
						end = now.Add(f.noticeGrace() / 2)
					}
					continue
				}
				// Blame, and give up, only the ranks seen stopped or
				// gone, if any: the running ones wait for them too.
				op.onlyStopped = stopped > 0 && running > 0
			}
			if !cond() {
				f.scan = op
				terr := f.timeoutErr(op, deadline, from)
				if op.fails && op.rank >= 0 {
					return f.failPeer(op.rank, terr)
				}
				if from != nil && op.tags[0]>>28 == TagFence {
					f.giveUpMissing(op, from, terr)
				}
				return terr
			}
		} else if err != nil {
			f.failed = fmt.Errorf("transport: completion queue: %w", err)
		}
	}
}

// dispatch records completions of context c; f.mu held.
func (f *Fabric) dispatch(c *pctx, wcs []verbs.WC) {
	for i := range wcs {
		wc := &wcs[i]
		if wc.Op == verbs.OpRecv || wc.Op == verbs.OpRecvImm {
			p := c.byQPN[wc.QPN]
			if p == nil {
				continue
			}
			if wc.Status != verbs.StatusSuccess {
				// On the loopback pair the receiving queue pair fails only
				// because the sending one did, which reports the cause.
				if p.selfRx == nil {
					f.setErr(p, wc)
				}
				continue
			}
			if isNotice(wc.Imm) {
				f.noticeArrived(p.rank, wc.Imm)
			} else {
				if isLeave(wc.Imm) {
					f.leaveArrived(p.rank)
				}
				f.noteArrived(wc.Imm, p.rank)
			}
			qp := p.qp
			if p.selfRx != nil {
				qp = p.selfRx
			}
			// A failed repost means the queue pair is in error; its
			// error completions say why.
			qp.PostRecv(&p.recvWR)
			continue
		}
		r := int(wc.ID & 0xffff)
		if r >= len(f.peers) {
			continue
		}
		p := f.peers[r].Load()
		if p == nil {
			continue
		}
		if wc.Status != verbs.StatusSuccess {
			f.setErr(p, wc)
			continue
		}
		advance(&p.done, wc.ID>>16)
	}
}

// setErr records a failed completion as the peer's sticky error. The cause
// (a remote access error, say) wins over the flushes that follow it.
func (f *Fabric) setErr(p *peer, wc *verbs.WC) {
	if f.closed.Load() {
		return
	}
	old := p.err.Load()
	if old != nil && !(errors.Is(*old, verbs.ErrFlushed) && wc.Status != verbs.StatusFlushed) {
		return
	}
	e := f.peerErr(p, wc)
	p.err.Store(&e)
	if old == nil {
		launch.NotifyPeerLost(p.rank) // rmarun names the first failure, not this rank's
	}
	if old == nil || !reportable(*old) {
		f.announce(p.rank, e) // once: the flushes' error is not reportable
	}
}
