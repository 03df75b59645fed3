package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// loopPair connects two queue pairs of one context (a rank's connection
// to itself), on one CQ.
func loopPair(t testing.TB) (s *side, a, b verbs.QP) {
	t.Helper()
	s = newSide(t, 4096)
	b, err := s.mr.(*region).pd.CreateQP(verbs.QPAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, MaxSendWR: 64, MaxRecvWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	a = s.qp
	errc := make(chan error, 1)
	go func() { errc <- b.Connect(a.Endpoint()) }()
	if err := a.Connect(b.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if a.(*qp).loop != b.(*qp) || b.(*qp).loop != a.(*qp) {
		t.Fatal("queue pairs of one context not connected as loopback")
	}
	return s, a, b
}

// TestLoopback: requests between two queue pairs of one context execute at
// once with the responder's checks: writes, reads, atomics, a write with
// immediate and a send into posted receives; a bad rkey completes with a
// remote access error, leaves memory untouched and fails the pair.
func TestLoopback(t *testing.T) {
	s, a, b := loopPair(t)
	buf, mr := s.buf, s.mr
	copy(buf, "hello")
	binary.LittleEndian.PutUint64(buf[512:], 40)
	recvs := []verbs.RecvWR{{ID: 1, SGL: s.sge(1024, 8)}, {ID: 2, SGL: s.sge(1100, 8)}}
	recvs[0].Next = &recvs[1]
	if _, err := b.PostRecv(&recvs[0]); err != nil {
		t.Fatal(err)
	}
	wrs := []verbs.SendWR{
		{ID: 10, Op: verbs.OpWrite, SGL: s.sge(0, 5), RemoteAddr: mr.Addr() + 100, RKey: mr.RKey()},
		{ID: 11, Op: verbs.OpRead, SGL: s.sge(200, 5), RemoteAddr: mr.Addr() + 100, RKey: mr.RKey()},
		{ID: 12, Op: verbs.OpFetchAdd, SGL: s.sge(600, 8), RemoteAddr: mr.Addr() + 512, RKey: mr.RKey(), CompareAdd: 2},
		{ID: 13, Op: verbs.OpCompareSwap, SGL: s.sge(608, 8), RemoteAddr: mr.Addr() + 512, RKey: mr.RKey(), CompareAdd: 42, Swap: 7},
		{ID: 14, Op: verbs.OpWriteImm, Imm: 99},
		{ID: 15, Op: verbs.OpSend, SGL: s.sge(0, 5)},
	}
	for i := range wrs {
		wrs[i].Flags = verbs.Signaled
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	if _, err := a.PostSend(&wrs[0]); err != nil {
		t.Fatal(err)
	}
	for id := uint64(10); id <= 15; id++ {
		if wc := waitOne(t, s.sendCQ); wc.ID != id || wc.Status != verbs.StatusSuccess {
			t.Fatalf("completion %d: %+v", id, wc)
		}
	}
	if wc := waitOne(t, s.recvCQ); wc.ID != 1 || !wc.HasImm || wc.Imm != 99 || wc.Op != verbs.OpRecvImm {
		t.Fatalf("write with immediate: %+v", wc)
	}
	if wc := waitOne(t, s.recvCQ); wc.ID != 2 || wc.ByteLen != 5 || wc.Op != verbs.OpRecv {
		t.Fatalf("send: %+v", wc)
	}
	switch {
	case string(buf[100:105]) != "hello", string(buf[200:205]) != "hello", string(buf[1100:1105]) != "hello":
		t.Fatalf("data: %q %q %q", buf[100:105], buf[200:205], buf[1100:1105])
	case binary.LittleEndian.Uint64(buf[600:]) != 40, binary.LittleEndian.Uint64(buf[608:]) != 42:
		t.Fatal("old values of the atomics")
	case binary.LittleEndian.Uint64(buf[512:]) != 7:
		t.Fatalf("word %d after fetch-add and compare-and-swap", binary.LittleEndian.Uint64(buf[512:]))
	}
	before := bytes.Clone(buf)
	bad := verbs.SendWR{ID: 20, Op: verbs.OpWrite, SGL: s.sge(0, 5), RemoteAddr: mr.Addr() + 100, RKey: mr.RKey() ^ 0x10000}
	if _, err := a.PostSend(&bad); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, s.sendCQ); wc.ID != 20 || wc.Status != verbs.StatusRemoteAccess || !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
		t.Fatalf("bad rkey: %+v", wc)
	}
	if !bytes.Equal(buf, before) {
		t.Fatal("memory changed by a refused request")
	}
	if _, err := a.PostSend(&wrs[0]); !errors.Is(err, verbs.ErrQPState) {
		t.Fatalf("post after the failure: %v", err)
	}
}

// Both queue pairs of a loopback pair closed at once (as transport's
// Disconnect does): each Close fails its partner too; both return, and
// each pair's posted receive is flushed exactly once.
func TestLoopbackConcurrentClose(t *testing.T) {
	for i := range 50 {
		s, a, b := loopPair(t)
		for _, q := range []verbs.QP{a, b} {
			if _, err := q.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: s.sge(0, 8)}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for _, q := range []verbs.QP{a, b} {
			wg.Go(func() { q.Close() })
		}
		wg.Wait()
		var wc [4]verbs.WC
		got := 0
		for got < 2 {
			n, err := s.recvCQ.Wait(wc[got:], time.Now().Add(5*time.Second))
			if err != nil || n == 0 {
				t.Fatalf("round %d: %d receives flushed, want 2 (%v)", i, got, err)
			}
			got += n
		}
		for _, c := range wc[:got] {
			if c.ID != uint64(i) || c.Status != verbs.StatusFlushed {
				t.Fatalf("round %d: %+v", i, c)
			}
		}
		if n, _ := s.recvCQ.Poll(wc[:]); n != 0 {
			t.Fatalf("round %d: %d more completions", i, n)
		}
	}
}
