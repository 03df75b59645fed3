package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/auth"
	"github.com/rmago/rmago/verbs"
)

// Faults of a peer: one that stops reading, stops halfway through a frame,
// never answers, or closes in order. Each must end in a bounded, named
// error (verbs.Config.Timeout), and must not hold up anything else. The
// misbehaving peer is a real socket that completes the handshake and then
// does only what the test says.

// faultTimeout is the contexts' timeout in these tests.
const faultTimeout = time.Second

// hangBound bounds what must not hang, so that a regression fails instead
// of blocking the suite; it is no measure of speed.
const hangBound = time.Minute

// newTimedSide is newSide with a context timeout.
func newTimedSide(t *testing.T, size int) *side {
	t.Helper()
	ctx, err := verbs.Open(Name, "", verbs.Config{Secret: secret, Timeout: faultTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	s := &side{ctx: ctx, buf: make([]byte, size)}
	if s.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessAll); err != nil {
		t.Fatal(err)
	}
	s.sendCQ, _ = ctx.CreateCQ(256)
	s.recvCQ, _ = ctx.CreateCQ(256)
	if s.qp, err = s.pd.CreateQP(verbs.QPAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, MaxSendWR: 64, MaxRecvWR: 16}); err != nil {
		t.Fatal(err)
	}
	return s
}

// rawPeer connects qp to a raw TCP socket that completes the handshake and
// then does nothing by itself. The fake endpoint's address sorts first, so
// qp waits and the raw side dials.
func rawPeer(t *testing.T, qp verbs.QP) net.Conn {
	t.Helper()
	fake := verbs.Endpoint{QPN: 7, Addr: "127.0.0.1:1"}
	errc := make(chan error, 1)
	go func() { errc <- qp.Connect(fake) }()
	conn, err := net.Dial("tcp", qp.Endpoint().Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var payload [auth.PayloadLen]byte
	binary.LittleEndian.PutUint32(payload[0:], qp.Num())
	binary.LittleEndian.PutUint32(payload[4:], fake.QPN)
	binary.LittleEndian.PutUint32(payload[8:], 64)
	if err := auth.Dial(conn, secret, authRole, payload); err != nil {
		t.Fatal(err)
	}
	var depth [4]byte
	if _, err := io.ReadFull(conn, depth[:]); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return conn
}

// sendPartialWrite sends a write request of n bytes to (addr, rkey) with
// only the first sent bytes of its payload.
func sendPartialWrite(t *testing.T, conn net.Conn, addr uint64, rkey uint32, n, sent int) {
	t.Helper()
	rawSend(t, conn, &frame{kind: kReqWrite, len: uint32(n), seq: 1, addr: addr, rkey: rkey}, make([]byte, sent))
}

// within runs fn and fails the test if it does not return within hangBound.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(hangBound):
		t.Fatalf("%s hangs", what)
	}
}

// failedWith waits for qp's flushed receive on cq (posted by the caller)
// and checks that the queue pair's cause wraps want.
func failedWith(t *testing.T, qp verbs.QP, cq verbs.CQ, want error) {
	t.Helper()
	wc := waitOne(t, cq)
	if wc.Status != verbs.StatusFlushed || wc.Op != verbs.OpRecv {
		t.Fatalf("receive after the failure: %+v", wc)
	}
	if err := qp.(verbs.ErrorReporter).Err(); !errors.Is(err, want) {
		t.Fatalf("queue pair's cause %v, want %v", err, want)
	}
}

// TestWriteToPeerNotReading (issue 10 item 3): a peer that takes no data
// fails the write after the timeout instead of blocking the poster for
// ever; the request completes with a transport error, the cause names a
// timeout, and later posts are refused with it.
func TestWriteToPeerNotReading(t *testing.T) {
	const size = 32 << 20 // more than the sockets buffer
	a := newTimedSide(t, size)
	rawPeer(t, a.qp)
	wr := verbs.SendWR{ID: 1, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, size), RemoteAddr: 1 << 20, RKey: 5}
	within(t, "a write to a peer that reads nothing", func() {
		if _, err := a.qp.PostSend(&wr); err != nil {
			t.Error(err)
		}
	})
	if wc := waitOne(t, a.sendCQ); wc.ID != 1 || wc.Status != verbs.StatusTransport {
		t.Fatalf("completion %+v", wc)
	}
	if err := a.qp.(verbs.ErrorReporter).Err(); !errors.Is(err, verbs.ErrTimeout) {
		t.Fatalf("cause %v", err)
	}
	if _, err := a.qp.PostSend(&wr); !errors.Is(err, verbs.ErrQPState) || !errors.Is(err, verbs.ErrTimeout) {
		t.Fatalf("post after the timeout: %v", err)
	}
}

// TestStalledFrameDoesNotStopWaiters (item 4): a peer that stopped halfway
// through a frame holds nobody but its own reader goroutine: a goroutine
// waiting for completions from a healthy peer (the process's poller) goes
// on completing round trips, and the stalled connection fails with a
// timeout.
func TestStalledFrameDoesNotStopWaiters(t *testing.T) {
	a, b := newTimedSide(t, 1<<20), newTimedSide(t, 1<<20)
	errc := make(chan error, 1)
	go func() { errc <- b.qp.Connect(a.qp.Endpoint()) }()
	if err := a.qp.Connect(b.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// A second queue pair of a's, with its own CQs, to the stalling peer.
	scq, _ := a.ctx.CreateCQ(16)
	rcq, _ := a.ctx.CreateCQ(16)
	stalled, err := a.pd.CreateQP(verbs.QPAttr{SendCQ: scq, RecvCQ: rcq, MaxSendWR: 16, MaxRecvWR: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.PostRecv(&verbs.RecvWR{ID: 99}); err != nil {
		t.Fatal(err)
	}
	conn := rawPeer(t, stalled)
	const rounds = 400
	within(t, "round trips to a healthy peer beside a stalled one", func() {
		for i := range rounds {
			if i == rounds/4 {
				// Half a frame, while this goroutine polls every stream.
				sendPartialWrite(t, conn, a.mr.Addr()+256<<10, a.mr.RKey(), 512<<10, 1000)
			}
			a.buf[0] = byte(i)
			wr := verbs.SendWR{ID: uint64(i), Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			if _, err := a.qp.PostSend(&wr); err != nil {
				t.Error(err)
				return
			}
			if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess || wc.ID != uint64(i) {
				t.Errorf("round %d: %+v", i, wc)
				return
			}
		}
	})
	if b.buf[0] != byte((rounds-1)%256) {
		t.Fatalf("b's memory holds %d", b.buf[0])
	}
	failedWith(t, stalled, rcq, verbs.ErrTimeout)
}

// TestDeregWithStalledPeer (item 5): deregistering a region is bounded by
// the timeout when a peer stopped halfway through a payload going into it
// (the responder holds the region), and when a peer does not answer a read
// whose destination it is (the requester holds it); the connections fail
// with a timeout.
func TestDeregWithStalledPeer(t *testing.T) {
	t.Run("responder", func(t *testing.T) {
		a := newTimedSide(t, 1<<20)
		if _, err := a.qp.PostRecv(&verbs.RecvWR{ID: 1}); err != nil {
			t.Fatal(err)
		}
		conn := rawPeer(t, a.qp)
		sendPartialWrite(t, conn, a.mr.Addr(), a.mr.RKey(), 512<<10, 1000)
		// Wait until the responder is inside the frame, holding the region.
		r := a.mr.(*region)
		for end := time.Now().Add(hangBound); r.inUse.TryLock(); {
			r.inUse.Unlock()
			if time.Now().After(end) {
				t.Fatal("the responder never took the frame")
			}
			time.Sleep(time.Millisecond)
		}
		within(t, "Dereg under a stalled payload", func() {
			if err := a.mr.Dereg(); err != nil {
				t.Error(err)
			}
		})
		failedWith(t, a.qp, a.recvCQ, verbs.ErrTimeout)
	})
	t.Run("requester", func(t *testing.T) {
		a := newTimedSide(t, 1<<20)
		if _, err := a.qp.PostRecv(&verbs.RecvWR{ID: 1}); err != nil {
			t.Fatal(err)
		}
		rawPeer(t, a.qp) // never answers
		rd := verbs.SendWR{ID: 2, Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(0, 64), RemoteAddr: 1 << 20, RKey: 5}
		if _, err := a.qp.PostSend(&rd); err != nil {
			t.Fatal(err)
		}
		within(t, "Dereg of an unanswered read's destination", func() {
			if err := a.mr.Dereg(); err != nil {
				t.Error(err)
			}
		})
		if wc := waitOne(t, a.sendCQ); wc.ID != 2 || wc.Status != verbs.StatusTransport {
			t.Fatalf("read %+v", wc)
		}
		failedWith(t, a.qp, a.recvCQ, verbs.ErrTimeout)
	})
}

// TestGoodbyeEndsWaits (item 6): a peer that closes in order completes
// what it executed, and the other side learns at once that nothing more
// will come: its posted receives complete as flushed, its cause is
// verbs.ErrPeerClosed, and posts are refused with it.
func TestGoodbyeEndsWaits(t *testing.T) {
	a, b := connected(t, 64)
	for i := range 2 {
		if _, err := a.qp.PostRecv(&verbs.RecvWR{ID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// One notification arrives before the goodbye and completes as usual.
	note := verbs.SendWR{ID: 5, Op: verbs.OpWriteImm, Flags: verbs.Signaled, Imm: 42}
	if _, err := b.qp.PostSend(&note); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, b.sendCQ); wc.Status != verbs.StatusSuccess {
		t.Fatalf("notification %+v", wc)
	}
	if err := b.qp.Close(); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, a.recvCQ); wc.Status != verbs.StatusSuccess || wc.Imm != 42 {
		t.Fatalf("notification received %+v", wc)
	}
	failedWith(t, a.qp, a.recvCQ, verbs.ErrPeerClosed)
	wr := verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&wr); !errors.Is(err, verbs.ErrQPState) || !errors.Is(err, verbs.ErrPeerClosed) {
		t.Fatalf("post after goodbye: %v", err)
	}
}

// TestLargePayloadInPieces: payloads of resumeMin and more are received in
// pieces by whoever drives the stream (payload.go): a large write with
// immediate lands whole and consumes a receive, a large read returns the
// right bytes, and a large write the target refuses is drained unread and
// leaves its memory untouched.
func TestLargePayloadInPieces(t *testing.T) {
	const size = 4 << 20
	a, b := connected(t, size)
	for i := range a.buf {
		a.buf[i] = byte(i*13 + 5)
	}
	if _, err := b.qp.PostRecv(&verbs.RecvWR{ID: 77}); err != nil {
		t.Fatal(err)
	}
	n := size / 2
	// b waits while the write arrives: its waiting goroutine receives it.
	recvd := make(chan verbs.WC, 1)
	go func() {
		wc := make([]verbs.WC, 1)
		b.recvCQ.Wait(wc, time.Now().Add(hangBound))
		recvd <- wc[0]
	}()
	wr := verbs.SendWR{ID: 1, Op: verbs.OpWriteImm, Flags: verbs.Signaled, Imm: 9, SGL: a.sge(0, n), RemoteAddr: b.mr.Addr() + 16, RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != 1 || wc.Status != verbs.StatusSuccess {
		t.Fatalf("write %+v", wc)
	}
	if wc := <-recvd; wc.ID != 77 || wc.Imm != 9 || wc.Status != verbs.StatusSuccess {
		t.Fatalf("receive %+v", wc)
	}
	if !bytes.Equal(b.buf[16:16+n], a.buf[:n]) {
		t.Fatal("written data differs")
	}
	rd := verbs.SendWR{ID: 2, Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(n, resumeMin+3), RemoteAddr: b.mr.Addr() + 16, RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&rd); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != 2 || wc.Status != verbs.StatusSuccess {
		t.Fatalf("read %+v", wc)
	}
	if !bytes.Equal(a.buf[n:n+resumeMin+3], a.buf[:resumeMin+3]) {
		t.Fatal("read data differs")
	}
	before := bytes.Clone(b.buf)
	bad := verbs.SendWR{ID: 3, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, n), RemoteAddr: b.mr.Addr() + uint64(size-n/2), RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&bad); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != 3 || wc.Status != verbs.StatusRemoteAccess {
		t.Fatalf("refused write %+v", wc)
	}
	if !bytes.Equal(b.buf, before) {
		t.Fatal("a refused write changed the target's memory")
	}
}
