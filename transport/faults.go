package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// Faults: how a failed peer, a peer that left and a wait that timed out
// are reported. Every error names the rank; errors.Is tells them apart:
//
//   - ErrPeerGone: the peer closed its end in order (it called Close, or
//     its program ended): nothing more sent to it runs. It is also ErrPeer.
//   - ErrPeer: the peer failed (its process died, the connection broke, it
//     refused a request); with ErrTimeout too when it stopped taking or
//     sending data for the timeout (a stopped or hung process).
//   - ErrTimeout: a wait reached RMAGO_TIMEOUT.

// ErrPeerGone means the peer left the job: it closed its end of the
// connection in order. errors.Is(err, ErrPeer) holds too.
var ErrPeerGone error = peerGone{}

type peerGone struct{}

func (peerGone) Error() string { return "transport: peer left the job" }

// Is makes a departure a peer failure too, for the operations that still
// needed the peer.
func (peerGone) Is(target error) bool { return target == ErrPeer }

// peerErr is rank r's sticky error after a failure whose cause is the
// provider's (verbs.ErrorReporter) or, without one, the completion's.
func (f *Fabric) peerErr(p *peer, wc *verbs.WC) error {
	var cause error
	if er, ok := p.qp.(verbs.ErrorReporter); ok {
		cause = er.Err()
	}
	if cause == nil {
		if wc == nil {
			return nil
		}
		cause = wc.Err()
	}
	return rankErr(p.rank, cause)
}

// rankErr wraps cause, a failure of the connection to rank r.
func rankErr(r int, cause error) error {
	switch {
	case errors.Is(cause, verbs.ErrPeerClosed):
		return fmt.Errorf("%w: rank %d closed its connection; operations that need it fail (did it call Close early, or return from main?): %w", ErrPeerGone, r, cause)
	case errors.Is(cause, verbs.ErrTimeout):
		return fmt.Errorf("%w: rank %d (%w; raise RMAGO_TIMEOUT if it is only slow): %w", ErrPeer, r, ErrTimeout, cause)
	}
	return fmt.Errorf("%w: rank %d: %w", ErrPeer, r, cause)
}

// waitOp says what a wait waits for: it names the wait in its errors and
// tells which failed ranks it still needs. It is passed by value, so that
// waiting allocates nothing.
type waitOp struct {
	what  string    // the operation: "flush", "wait", ...
	rank  int       // the rank whose requests it waits for, or -1
	seq   uint64    // that rank's request
	tags  [2]uint32 // notification waits: the tags
	ntags int
	count int  // notification waits: how many
	fails bool // a timeout fails the connection to rank (failPeer)
	// grace, if not zero, replaces noticeGrace for this wait (a
	// dissemination step's: see AwaitNotesGrace).
	grace time.Duration
	// spared: the wait was extended once because the ranks it missed
	// were seen running (missingState).
	spared bool
	// onlyStopped: of the ranks the wait missed, some were seen stopped
	// or gone and some running; it blames and gives up only the former.
	onlyStopped bool
	// arrived, for a wait for direct notes (AwaitDirect), reports whether
	// rank r's note has arrived.
	arrived func(r int) bool
}

// missingState counts the ranks a notification wait still misses (from,
// without their notification and with no error recorded) that their
// queue pairs see stopped or gone, and those they see running
// (verbs.PeerRunner: shm peers, whose processes the kernel shows). A rank
// seen running is not the one that failed: blaming it would name a
// healthy rank, and giving it up would make every survivor name it.
// f.mu held.
func (f *Fabric) missingState(from func(yield func(int) bool)) (stopped, running int) {
	from(func(r int) bool {
		if r == f.rank || f.delivered(r) || f.peers[r].Load() == nil || f.Err(r) != nil {
			return true
		}
		if run, known := f.peerRunning(r); known && run {
			running++
		} else if known {
			stopped++
		}
		return true
	})
	return stopped, running
}

// peerRunning asks rank r's queue pair whether its process runs
// (verbs.PeerRunner); known is false when it cannot tell.
func (f *Fabric) peerRunning(r int) (running, known bool) {
	p := f.peers[r].Load()
	if p == nil {
		return false, false
	}
	pr, ok := p.qp.(verbs.PeerRunner)
	if !ok {
		return false, false
	}
	return pr.PeerRunning()
}

// suspect reports whether rank r, which a wait that timed out missed,
// is to be blamed: not when op found that some of the missed ranks were
// stopped or gone and r is seen running. f.mu held.
func (f *Fabric) suspect(op waitOp, r int) bool {
	if !op.onlyStopped {
		return true
	}
	run, known := f.peerRunning(r)
	return !known || !run
}

// failPeer fails the connection to rank r after a wait for one of its
// requests reached the timeout (err): like a NIC whose retries ran out, the
// fabric gives the peer up. The error becomes r's sticky error, so every
// later operation to r fails at once instead of waiting out the timeout
// again, and the queue pair enters the error state, so its outstanding
// requests complete and release the memory they hold (deregistering it
// need not wait). f.mu held.
func (f *Fabric) failPeer(r int, err error) error {
	p := f.peers[r].Load()
	if p == nil { // never connected: nothing of it to give up
		return fmt.Errorf("%w: rank %d: %w", ErrPeer, r, err)
	}
	e := fmt.Errorf("%w: rank %d gave no answer within %v, its connection is closed (is it stopped or hung?): %w", ErrPeer, r, f.timeout, err)
	if old := p.err.Load(); old != nil {
		return *old
	}
	p.err.Store(&e)
	launch.NotifyPeerLost(r) // rmarun names the first failure, not this rank's
	f.announce(r, e)
	if s, ok := p.qp.(verbs.ErrorSetter); ok && p.selfRx == nil {
		s.SetError(fmt.Errorf("%w: the fabric gave rank %d up after %v without an answer", verbs.ErrTimeout, r, f.timeout))
	}
	return e
}

// giveUpMissing gives up (failPeer) every connected rank of a fence's
// notification wait that timed out without its notification: the fence
// failed, so this rank stops in the middle of a collective step, and the
// ranks that go on waiting for it (the fence's next round) learn from its
// failure notices which rank it was waiting for, instead of blaming this
// rank at their own timeout. Only fences do it: a rank leaving (Close's
// barrier) must not tell the others that the ranks it left behind failed.
// f.mu held.
func (f *Fabric) giveUpMissing(op waitOp, from func(yield func(int) bool), err error) {
	from(func(r int) bool {
		if r != f.rank && !f.delivered(r) && f.peers[r].Load() != nil && f.Err(r) == nil && f.suspect(op, r) {
			f.failPeer(r, err)
		}
		return true
	})
}

// timeoutErr is the error of a wait that reached its deadline; f.mu held.
func (f *Fabric) timeoutErr(op waitOp, deadline time.Time, from func(yield func(int) bool)) error {
	var what string
	switch {
	case op.rank >= 0:
		what = fmt.Sprintf("%s: request %d to rank %d did not complete", op.what, op.seq, op.rank)
	case op.ntags > 0 || op.arrived != nil:
		var missing []int
		if from != nil {
			from(func(r int) bool {
				if !f.delivered(r) && f.suspect(op, r) {
					missing = append(missing, r)
				}
				return true
			})
		}
		n := 0
		for _, tag := range op.tags[:op.ntags] {
			n += f.noteCount(tag)
		}
		if op.ntags == 0 {
			n = op.count - len(missing)
		}
		what = fmt.Sprintf("%s: %d of %d notifications (tag %#x) arrived; none from %s", op.what, n, op.count, op.tags[0], RankList(missing))
	default:
		what = op.what
	}
	return fmt.Errorf("%w: %s within %v (deadline %s; RMAGO_TIMEOUT sets the bound; is a rank stopped, hung or not calling the matching operation?)",
		ErrTimeout, what, f.timeout, deadline.Format("15:04:05.000"))
}

// RankList names ranks in an error message: "rank 3", or "ranks [1 3 4]"
// (the first 16, then how many more). Every error that names the ranks a
// wait is missing uses it, so that people and the fault suite read one form.
func RankList(ranks []int) string {
	switch {
	case len(ranks) == 1:
		return fmt.Sprintf("rank %d", ranks[0])
	case len(ranks) > 16:
		return fmt.Sprintf("ranks %v (+%d more)", ranks[:16], len(ranks)-16)
	}
	return fmt.Sprintf("ranks %v", ranks)
}
