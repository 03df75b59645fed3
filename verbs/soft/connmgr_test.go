package soft

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// newQPOf makes another queue pair in s's context, on s's queues.
func newQPOf(t *testing.T, s *side) verbs.QP {
	t.Helper()
	q, err := s.pd.CreateQP(verbs.QPAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, MaxSendWR: 64, MaxRecvWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestDialOnDemand: a dial names no queue pair of the peer; the peer's
// acceptor gets the private data and makes the queue pair that takes the
// connection, and requests then run both ways.
func TestDialOnDemand(t *testing.T) {
	a, b := newSide(t, 64), newSide(t, 64)
	got := make(chan uint64, 1)
	b.ctx.(verbs.ConnManager).Accept(func(req verbs.ConnRequest) {
		got <- req.Private()
		if err := req.Accept(b.qp); err != nil {
			t.Error(err)
		}
	})
	if err := a.ctx.(verbs.ConnManager).Dial(a.qp, b.ctx.(verbs.ConnManager).ListenEndpoint(), 0xabcdef); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != 0xabcdef {
		t.Fatalf("private data %#x", p)
	}
	copy(a.buf, "on demand")
	if _, err := a.qp.PostSend(&verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 9), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess {
		t.Fatalf("write: %v", wc.Status)
	}
	if !bytes.Equal(b.buf[:9], []byte("on demand")) {
		t.Fatalf("target holds %q", b.buf[:9])
	}
	// The passive side's queue pair works too: it reads back.
	if _, err := b.qp.PostSend(&verbs.SendWR{Op: verbs.OpRead, Flags: verbs.Signaled, SGL: b.sge(16, 9), RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, b.sendCQ); wc.Status != verbs.StatusSuccess || !bytes.Equal(b.buf[16:25], []byte("on demand")) {
		t.Fatalf("read back: %v %q", wc.Status, b.buf[16:25])
	}
}

// TestDialRefused: a refusal says why: ErrPeerClosed for a peer that is
// leaving, a plain error otherwise (no acceptor installed).
func TestDialRefused(t *testing.T) {
	a, b := newSide(t, 64), newSide(t, 64)
	ep := b.ctx.(verbs.ConnManager).ListenEndpoint()
	if err := a.ctx.(verbs.ConnManager).Dial(a.qp, ep, 1); err == nil || errors.Is(err, verbs.ErrPeerClosed) {
		t.Fatalf("dial without an acceptor: %v", err)
	}
	b.ctx.(verbs.ConnManager).Accept(func(req verbs.ConnRequest) { req.Refuse(verbs.ErrPeerClosed) })
	if err := a.ctx.(verbs.ConnManager).Dial(newQPOf(t, a), ep, 1); !errors.Is(err, verbs.ErrPeerClosed) {
		t.Fatalf("dial of a leaving peer: %v", err)
	}
}

// TestDialCrossed: both sides dial each other at once; a's request wins
// (b's acceptor hands it to b's dialing queue pair, a's acceptor refuses
// b's with ErrCrossed), and both Dials return with the one connection.
func TestDialCrossed(t *testing.T) {
	a, b := newSide(t, 64), newSide(t, 64)
	a.ctx.(verbs.ConnManager).Accept(func(req verbs.ConnRequest) { req.Refuse(verbs.ErrCrossed) })
	b.ctx.(verbs.ConnManager).Accept(func(req verbs.ConnRequest) {
		if err := req.Accept(b.qp); err != nil {
			t.Error(err)
		}
	})
	errc := make(chan error, 1)
	go func() { errc <- b.ctx.(verbs.ConnManager).Dial(b.qp, a.ctx.(verbs.ConnManager).ListenEndpoint(), 2) }()
	if err := a.ctx.(verbs.ConnManager).Dial(a.qp, b.ctx.(verbs.ConnManager).ListenEndpoint(), 1); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	copy(b.buf, "crossed")
	if _, err := b.qp.PostSend(&verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: b.sge(0, 7), RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, b.sendCQ); wc.Status != verbs.StatusSuccess || !bytes.Equal(a.buf[:7], []byte("crossed")) {
		t.Fatalf("write over the crossed connection: %v %q", wc.Status, a.buf[:7])
	}
}
