package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// Failure propagation, in the spirit of ULFM's failure notification: a rank
// that sees a peer fail (its connection broke) or gives a peer up (it gave
// no answer within the timeout) tells every other rank it is connected to
// with a failure notice, so that a survivor that had nothing outstanding to
// the failed rank, or that waits for a rank stuck on it, learns the failed
// rank's number instead of timing out on a healthy one.
//
// A notice is a zero-length RDMA write with immediate data, like a
// notification, whose tag kind (tagFailure) is reserved: the immediate
// carries the failed rank and whether it was given up after the timeout.
// It takes one of the receives every queue pair keeps posted, so it works
// the same on hardware. It is sent best effort, from a goroutine per peer,
// never waiting for a full send queue: the rank that saw the failure never
// waits for anyone to send it.
//
// The rank that receives a notice records the named rank as failed
// ("reported by rank R"), as its sticky error, and closes its own queue
// pair to it: its waits involving the rank fail at once naming it (a group
// wait fails even if the rank's notification arrived, see checkRank), and
// a rank given up by others cannot later report, once resumed, the ranks
// that cut it off. Notices are never relayed, a notice from a rank already
// known failed is ignored, and a departure in order (ErrPeerGone) is no
// failure and sends none, unless it came in the middle of a fence, before
// the note a fence wait of this rank needed (leftMidFence).

// Layout of a failure notice's immediate data.
const (
	tagFailure     = 4       // the tag kind of a failure notice (kinds below TagUser are the transport's)
	noticeTimedOut = 1 << 27 // the rank was given up after the timeout
	noticeLeft     = 1 << 26 // the rank left in order in the middle of a fence (leftMidFence)
	noticeRankMask = 1<<24 - 1
)

// noticeGrace is how long a notification wait that reached the timeout
// while missing healthy-looking ranks keeps waiting for a failure notice
// naming the rank they may be stuck on, and how long Disconnect lets the
// notices being sent go out.
func (f *Fabric) noticeGrace() time.Duration {
	if f.timeout <= 0 {
		return time.Second
	}
	return min(time.Second, f.timeout/2)
}

// NoticeGrace is how long a wait that reached the timeout while missing
// healthy-looking ranks should keep waiting for a failure notice before it
// blames them: min(1 s, timeout/2). Waits that poll their own memory
// (Poller) apply it themselves: past their deadline, they keep polling
// for that long and fail naming the rank whose Err became non-nil (a
// reported failure is a sticky error too).
func (f *Fabric) NoticeGrace() time.Duration { return f.noticeGrace() }

// reportable reports whether e, a peer's first sticky error, is a failure
// this rank saw itself and tells the others of: the connection broke or
// the peer was given up, not an orderly departure nor a refused request
// (a live peer's answer).
func reportable(e error) bool {
	if errors.Is(e, ErrPeerGone) {
		return false
	}
	return errors.Is(e, verbs.ErrTransport) || errors.Is(e, verbs.ErrTimeout) || errors.Is(e, ErrTimeout)
}

// announce sends a failure notice naming rank r, whose sticky error e has
// just been recorded, to every other peer whose connection is up. It
// returns at once. f.mu held or not.
func (f *Fabric) announce(r int, e error) {
	if r == f.rank || f.closed.Load() || !reportable(e) {
		return
	}
	imm := uint32(tagFailure)<<28 | uint32(r)&noticeRankMask
	if errors.Is(e, ErrTimeout) || errors.Is(e, verbs.ErrTimeout) {
		imm |= noticeTimedOut
	}
	f.tell(r, imm)
}

// tell sends the failure notice imm about rank r to every other peer whose
// connection is up, from a goroutine each; it returns at once.
func (f *Fabric) tell(r int, imm uint32) {
	for i := range f.peers {
		q := f.peers[i].Load() // nil: not connected, nothing to tell it through
		if q == nil || q.rank == f.rank || q.rank == r || q.err.Load() != nil {
			continue
		}
		f.noticesOut.Add(1)
		go f.sendNotice(q, imm)
	}
}

// sendNotice posts one failure notice to q, unless q's send queue is full
// (best effort: it never waits for a peer).
func (f *Fabric) sendNotice(q *peer, imm uint32) {
	defer f.noticesOut.Add(-1)
	q.postMu.Lock()
	defer q.postMu.Unlock()
	if q.posted.Load()+1-q.done.Load() >= sendDepth-1 {
		return
	}
	q.failWR = verbs.SendWR{Op: verbs.OpWriteImm, Imm: imm}
	f.postLocked(q, &q.failWR) // a failure here is q's own, reported by its completions
}

// awaitNotices lets the failure notices being sent go out before the
// connections close, for at most the grace.
func (f *Fabric) awaitNotices() {
	if f.noticesOut.Load() == 0 {
		return
	}
	deadline := time.Now().Add(f.noticeGrace())
	for f.noticesOut.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// leftMidFence records that rank r, which left the job in order (gone,
// its sticky error), did so before the note a fence's wait of this rank
// needed from it: it left before the fence's end, so for the fence it
// failed. A departure is no failure in general (a rank may leave once past
// a barrier), so no notice told the others; the ranks whose fence waits
// for a rank stuck on r, and not for r itself (a dissemination step, the
// gathered form's wait for rank 0), would wait out the timeout and blame
// that rank. Now r's sticky error here becomes a failure, and a notice
// (noticeLeft) makes it one at the others, whose fence waits watch the
// failed ranks and end at once naming r. f.mu held or not.
func (f *Fabric) leftMidFence(r int, p *peer, gone error) error {
	e := fmt.Errorf("%w: rank %d left the job in the middle of a fence, before its note (%v)", ErrPeer, r, gone)
	p.err.Store(&e)
	if r != f.rank && !f.closed.Load() {
		f.tell(r, uint32(tagFailure)<<28|uint32(r)&noticeRankMask|noticeLeft)
	}
	return e
}

// isNotice reports whether a notification's immediate data is a failure
// notice.
func isNotice(imm uint32) bool { return imm>>28 == tagFailure }

// noticeArrived records a failure notice from rank from; f.mu held.
func (f *Fabric) noticeArrived(from int, imm uint32) {
	r := int(imm & noticeRankMask)
	if r >= f.size || r == f.rank || r == from || f.closed.Load() {
		return
	}
	if f.Err(from) != nil {
		// A rank known failed reports nothing: once resumed, a rank that
		// was given up sees the connections cut to it as failures.
		return
	}
	p := f.peers[r].Load()
	if p == nil {
		// Not connected yet: a wait for it connects (kick), and learns
		// of its failure from the attempt.
		return
	}
	if old := p.err.Load(); old != nil && (imm&noticeLeft == 0 || !errors.Is(*old, ErrPeerGone)) {
		return // known already (a departure seen here becomes a failure below)
	}
	var e error
	switch {
	case imm&noticeLeft != 0:
		e = fmt.Errorf("%w: rank %d failed (reported by rank %d: it left the job in the middle of a fence, before its note)", ErrPeer, r, from)
		p.err.Store(&e)
		return // its connection has ended already
	case imm&noticeTimedOut != 0:
		e = fmt.Errorf("%w: rank %d failed (reported by rank %d, which gave it up after no answer within its timeout: %w)", ErrPeer, r, from, ErrTimeout)
	default:
		e = fmt.Errorf("%w: rank %d failed (reported by rank %d, whose connection to it broke)", ErrPeer, r, from)
	}
	p.err.Store(&e)
	if s, ok := p.qp.(verbs.ErrorSetter); ok && p.selfRx == nil {
		s.SetError(fmt.Errorf("%w: rank %d was reported failed by rank %d", verbs.ErrTransport, r, from))
	}
}

// recordErr records e, the provider's cause of the failure of p's queue
// pair found by a post, as p's sticky error if it has none, as setErr does
// for the completions that will follow: the peers are told now, in case
// this rank ends on the error before it polls them.
func (f *Fabric) recordErr(p *peer, e error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed.Load() || p.err.Load() != nil {
		return
	}
	p.err.Store(&e)
	launch.NotifyPeerLost(p.rank) // rmarun names the first failure, not this rank's
	f.announce(p.rank, e)
}
