package soft

import (
	"encoding/binary"
	"time"

	"github.com/rmago/rmago/verbs"
)

// Coalescing small requests. Every frame used to leave in its own writev, so
// an 8-byte put stream was one system call per put on each side. Now the
// frames of small unsignalled writes and accumulates without results (their
// payload copied, so that posting still takes the payload:
// verbs.DeviceAttr.PostCopiesPayload) and reads wait in the queue pair's cork
// buffer, and leave, in order and in one gather write, with the next request
// that is sent at once: a signalled or fenced request, an atomic, a fetching
// accumulate, a write with immediate data or a send, a large write. (An 8-byte
// accumulate stream went from one system call per accumulate, 0.6-0.8 MB/s, to
// 10-12 MB/s.) Atomics are held back only when posted with verbs.Coalesce (a
// lock's release nobody waits for), and then at most corkAtomicDelay: other
// ranks may wait for it. The cork is also sent when it is full, when a
// completion queue of the context is polled or waited on, when the context is
// driven (device.Progress), at Close, and when the cork's timer fires,
// corkDelay after its first frame (a Go timer: later once the program
// computes), so that a request posted and followed by nothing still reaches
// the peer. What a peer waits for is held back only while the program comes
// back for it (hold.go).
//
// A small write whose target bytes follow the cork's last frame's (an
// unsignalled write to the same rkey) is merged into it: the frame grows
// by its payload, so that the peer checks, and copies, one write instead
// of many. Consecutive puts of a stream, such as put_bw's, then cost one
// header together. An unsignalled write merges before anything else is
// done for it (mergeFast), and the request that began the frame stands
// for it; a signalled one takes a sequence number and a pending entry,
// and the frame takes its number and acknowledgement (mergeWrite). One
// difference a program can see, only when it accesses memory it was not
// granted: a merged write that fails the target's check fails whole, and
// the error completes the frame's request (the one that began it, or the
// last signalled one merged; on hardware the earlier writes would have
// landed before the queue pair failed).
//
// Ordering is unchanged: the cork holds frames in sequence order and
// whatever is sent at once goes after them, in the same write; a
// signalled completion still implies every earlier request completed.
// As before, a read's data is taken from memory when its response is
// written, after the requests that arrived with it ran: a later write to
// the same bytes in one batch may show in it (in MPI terms the two
// conflict within an epoch); a Fence flag on the write orders them.

// corkSize is the cork buffer of a queue pair (allocated when it
// connects).
const corkSize = 64 << 10

// corkMax is the largest write payload copied into the cork; larger
// writes leave at once, straight from registered memory.
const corkMax = 8 << 10

// corkDelay bounds how long a frame may wait in the cork when nothing
// else sends it (device.corkDelay; tests lengthen it).
const corkDelay = 200 * time.Microsecond

// coalescable reports whether a request goes into the cork: an unfenced
// write or accumulate without results of at most corkMax bytes, or read,
// unsignalled or signalled with verbs.Coalesce (transport signals one
// write in so many only so that the send queue drains: nobody waits for
// it yet, and whoever comes to wait for it sends the cork), or a
// notification (zero-length write with immediate data) posted unsignalled
// with verbs.Coalesce.
func coalescable(kind uint8, signaled, fenced, coalesce bool, n uint64) bool {
	if fenced {
		return false
	}
	switch kind {
	case kReqWrite, kReqAcc:
		return n <= corkMax && (!signaled || coalesce)
	case kReqRead:
		return !signaled || coalesce
	case kReqWriteImm:
		return coalesce && !signaled && n == 0
	case kReqFAA, kReqCAS:
		return coalesce // a lock's release nobody waits for (corkAtomicDelay)
	}
	return false
}

// corkAtomicDelay bounds how long an atomic waits in the cork when
// nothing else sends it: a lock's release, which other ranks may be
// waiting for.
const corkAtomicDelay = 20 * time.Microsecond

// corkFrame appends f and its payload (a write's data or an accumulate's
// operand, copied) to the
// cork; sendMu held. A full cork is sent first.
func (q *qp) corkFrame(f *frame, payload *[maxSGE][]byte, nseg int) {
	if q.mergeWrite(f, payload, nseg) {
		return
	}
	need := hdrLen
	if f.hasPayload() {
		need += int(f.len)
	}
	if q.corkLen+need > len(q.cork) {
		q.sendQueued()
	}
	f.encode((*[hdrLen]byte)(q.cork[q.corkLen:]))
	q.corkLast = q.corkLen
	off := q.corkLen + hdrLen
	if f.hasPayload() {
		for i := range nseg {
			off += copy(q.cork[off:], payload[i])
		}
	}
	q.corkLen = off
	if f.kind == kReqFAA || f.kind == kReqCAS {
		q.armCork(min(corkAtomicDelay, q.ctx.corkDelay))
	}
	if !q.corked.Load() {
		q.corked.Store(true)
		q.ctx.prog.ncorked.Add(1)
		if !q.corkArmed {
			q.corkArmed = true
			q.armSends = q.sends.Load()
			q.corkTimer.Reset(q.ctx.corkDelay)
		}
	}
}

// armCork sets the cork's timer to fire within d, for something that may
// wait no longer (an atomic, held answers); sendMu held. A timer already
// set within d is left alone (the time it has left is not known: one
// set for d or less, corkShort, is taken to be within it).
func (q *qp) armCork(d time.Duration) {
	if q.corkArmed && q.corkShort <= d && q.corkShort > 0 {
		return
	}
	q.corkArmed, q.corkShort = true, d
	q.armSends = q.sends.Load()
	q.corkTimer.Reset(d)
}

// mergeWrite appends write f to the cork's last frame instead of adding a
// frame, if f may join it (extendable); sendMu held. The frame takes f's
// sequence number, and its acknowledgement flag if f is signalled (the
// response to it then completes them all): the peer's count of the requests it
// executed (its goodbye) stays exact.
func (q *qp) mergeWrite(f *frame, payload *[maxSGE][]byte, nseg int) bool {
	if f.kind != kReqWrite || f.flags&^flagAck != 0 {
		return false
	}
	h, n, ok := q.extendable(f.rkey, f.addr, f.len)
	if !ok {
		return false
	}
	h[2] = f.flags
	binary.LittleEndian.PutUint32(h[4:], n+f.len)
	binary.LittleEndian.PutUint64(h[8:], f.seq)
	off := q.corkLen
	for i := range nseg {
		off += copy(q.cork[off:], payload[i])
	}
	q.corkLen = off
	return true
}

// extendable returns the header of the cork's last frame and its payload
// length if a write of n bytes to rkey at addr may join it: the frame is
// an unsignalled write without immediate data to the same rkey whose
// target bytes these follow, not yet in the batch's gather list, and the
// payload stays within corkMax and the cork; sendMu held.
func (q *qp) extendable(rkey uint32, addr uint64, n uint32) ([]byte, uint32, bool) {
	if q.corkLen == 0 || q.corkLast < q.corkRef {
		return nil, 0, false
	}
	h := q.cork[q.corkLast : q.corkLast+hdrLen]
	cur := binary.LittleEndian.Uint32(h[4:])
	if h[0] != kReqWrite || h[2] != 0 || binary.LittleEndian.Uint32(h[24:]) != rkey ||
		binary.LittleEndian.Uint64(h[16:])+uint64(cur) != addr ||
		int(cur)+int(n) > corkMax || q.corkLen+int(n) > len(q.cork) {
		return nil, 0, false
	}
	return h, cur, true
}

// mergeFast appends wr, a lone unsignalled write, to the cork's last
// frame before any of postOne's work, when it may join it (extendable;
// sendMu held). Unlike mergeWrite's, the write takes no sequence number
// and no pending entry:
// the request that began the frame stands for it, and completes when the
// frame does. Nothing else tells them apart: an unsignalled write has no
// completion of its own, the peer executes the frame as one request (its
// goodbye's count stays exact), and if the frame is refused or its queue
// pair fails, the frame's request takes the error completion. It reports
// false, having done nothing, for anything else (postOne then takes it).
//
// It is the 8-byte put stream's path (OSU's put_bw: 64 adjacent puts and
// a flush), where postOne's frame, pending entry and pending-ring lock
// were a fifth of each put's time (29.1-29.4 -> 35.7-36.2 MB/s).
func (q *qp) mergeFast(wr *verbs.SendWR) bool {
	if wr.Op != verbs.OpWrite || wr.Flags&^(verbs.Inline|verbs.Coalesce) != 0 || len(wr.SGL) != 1 ||
		q.loop != nil || q.failed.Load() {
		return false
	}
	s := wr.SGL[0]
	h, n, ok := q.extendable(wr.RKey, wr.RemoteAddr, s.Length)
	if !ok {
		return false
	}
	_, b, err := q.resolve(s, 0)
	if err != nil {
		return false // postOne reports it
	}
	q.corkLen += copy(q.cork[q.corkLen:], b)
	binary.LittleEndian.PutUint32(h[4:], n+s.Length)
	release()
	return true
}

// uncork puts what the cork holds beyond what the batch already refers to
// into the batch's gather list, before the frame queued next; sendMu
// held.
func (q *qp) uncork() {
	if q.corkLen > q.corkRef {
		q.bufs[q.nbufs] = q.cork[q.corkRef:q.corkLen]
		q.nbufs++
		q.corkRef = q.corkLen
	}
}

// corkSent records that the cork's frames were written; sendMu held.
func (q *qp) corkSent() {
	q.corkLen, q.corkRef = 0, 0
	q.sends.Add(1)
	if q.corkAwaited > 0 {
		if !q.expiring {
			q.ctx.hold.cameBack() // the program sent it: a post, a poll or a wait
		}
		q.corkAwaited = 0
	}
	if q.corked.Load() {
		q.corked.Store(false)
		q.ctx.prog.ncorked.Add(-1)
		// The timer is left running: stopping it and setting it again
		// for the next cork cost 0.3-0.4 us per round trip. It fires at
		// most once per corkDelay, and sends what the cork holds then,
		// which may have waited less than corkDelay (early is harmless).
	}
}

// sendCork sends the cork unless another goroutine is posting (it sends
// it, or corks more and leaves it to the next flush point).
func (q *qp) sendCork() {
	if q.corked.Load() && q.sendMu.TryLock() {
		q.sendQueued()
		q.sendMu.Unlock()
	}
}

// corkExpired is the cork timer's function: corkDelay has passed since
// the first frame of a cork, perhaps one already sent; whatever the cork
// holds now goes.
func (q *qp) corkExpired() {
	q.sendMu.Lock()
	q.corkArmed, q.corkShort = false, 0
	if (q.corkAwaited > 0 || q.respHeld.Load()) && q.sends.Load() == q.armSends {
		// Awaited traffic has waited since the timer was set, with
		// nothing written meanwhile: the program left it behind (hold.go).
		q.ctx.hold.leftBehind()
	}
	q.expiring = true
	if q.corked.Load() {
		q.sendQueued()
	}
	q.expiring = false
	if q.sendHeldAnswers() { // answers held for a request (held.go)
		// The stream's owner may have held them and not yet let go of
		// it: try again within the bound, so they are never left behind.
		q.armCork(q.ctx.answerDelay)
	}
	q.sendMu.Unlock()
}

// sendCorks sends the corks of the context's queue pairs: a goroutine
// that polls or waits for completions or drives the context may be
// waiting for what they hold.
func (g *progress) sendCorks() {
	if g.ncorked.Load() == 0 {
		return
	}
	list := g.qps.Load()
	if list == nil {
		return
	}
	for _, p := range *list {
		p.sendCork()
	}
}
