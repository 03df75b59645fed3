package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/auth"
	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
)

var secret = []byte("test secret of the job")

// envConfig is the verbs.Config the tests' contexts open with: the job's
// secret, and RMAGO_SOFT_SPIN passed on as transport passes it.
func envConfig() (verbs.Config, error) {
	s, err := config.FromEnv()
	spin := s.SoftSpin
	if spin == 0 {
		spin = -1 // never poll
	}
	return verbs.Config{Secret: secret, Spin: spin, TCPCongestion: s.TCPCongestion}, err
}

// side is one end of a connected pair: its own context, region and queues.
type side struct {
	ctx    verbs.Context
	pd     verbs.PD
	mr     verbs.MR
	buf    []byte
	qp     verbs.QP
	sendCQ verbs.CQ
	recvCQ verbs.CQ
}

func newSide(t testing.TB, size int) *side {
	t.Helper()
	cfg, err := envConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := verbs.Open(Name, "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := ctx.AllocPD()
	s := &side{ctx: ctx, pd: pd, buf: make([]byte, size)}
	if s.mr, err = pd.RegMR(s.buf, verbs.AccessAll); err != nil {
		t.Fatal(err)
	}
	s.sendCQ, _ = ctx.CreateCQ(256)
	s.recvCQ, _ = ctx.CreateCQ(256)
	if s.qp, err = pd.CreateQP(verbs.QPAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, MaxSendWR: 64, MaxRecvWR: 16}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return s
}

// connected returns two sides in separate contexts with connected QPs.
func connected(t testing.TB, size int) (*side, *side) {
	a, b := newSide(t, size), newSide(t, size)
	errc := make(chan error, 1)
	go func() { errc <- b.qp.Connect(a.qp.Endpoint()) }()
	if err := a.qp.Connect(b.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return a, b
}

func waitOne(t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	n, err := cq.Wait(wc, time.Now().Add(10*time.Second))
	if err != nil || n != 1 {
		t.Fatalf("wait: n=%d err=%v", n, err)
	}
	return wc[0]
}

func (s *side) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}}
}

func TestWriteReadSizes(t *testing.T) {
	const size = 8 << 20
	a, b := connected(t, size)
	for _, n := range []int{1, 7, 64, 4096, 65537, 1 << 20, 3 << 20} {
		for i := 0; i < n; i++ {
			a.buf[i] = byte(i*7 + n)
		}
		wr := verbs.SendWR{ID: uint64(n), Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, n), RemoteAddr: b.mr.Addr() + 1, RKey: b.mr.RKey()}
		if _, err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess || wc.ID != uint64(n) {
			t.Fatalf("write %d: %+v", n, wc)
		}
		if !bytes.Equal(b.buf[1:1+n], a.buf[:n]) {
			t.Fatalf("write of %d bytes: data differs", n)
		}
		// Read it back into a's second half.
		rd := verbs.SendWR{ID: 1, Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(size/2, n), RemoteAddr: b.mr.Addr() + 1, RKey: b.mr.RKey()}
		if _, err := a.qp.PostSend(&rd); err != nil {
			t.Fatal(err)
		}
		if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess {
			t.Fatalf("read %d: %+v", n, wc)
		}
		if !bytes.Equal(a.buf[size/2:size/2+n], a.buf[:n]) {
			t.Fatalf("read of %d bytes: data differs", n)
		}
	}
}

func TestUnsignaledThenSignaled(t *testing.T) {
	a, b := connected(t, 1024)
	for i := 0; i < 10; i++ {
		a.buf[i] = byte(i + 1)
		wr := verbs.SendWR{ID: uint64(i), Op: verbs.OpWrite, SGL: a.sge(i, 1), RemoteAddr: b.mr.Addr() + uint64(i), RKey: b.mr.RKey()}
		if i == 9 {
			wr.Flags = verbs.Signaled
		}
		if _, err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != 9 || wc.Status != verbs.StatusSuccess {
		t.Fatalf("%+v", wc)
	}
	if n, _ := a.sendCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("unsignaled writes produced %d completions", n)
	}
	if !bytes.Equal(b.buf[:10], []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("got %v", b.buf[:10])
	}
}

func TestAtomics(t *testing.T) {
	a, b := connected(t, 64)
	binary.LittleEndian.PutUint64(b.buf[8:], 100)
	post := func(wr verbs.SendWR) uint64 {
		wr.Flags, wr.SGL, wr.RKey = verbs.Signaled, a.sge(0, 8), b.mr.RKey()
		if _, err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess {
			t.Fatalf("%+v", wc)
		}
		return binary.LittleEndian.Uint64(a.buf[:8])
	}
	addr := b.mr.Addr() + 8
	if old := post(verbs.SendWR{Op: verbs.OpFetchAdd, RemoteAddr: addr, CompareAdd: 5}); old != 100 {
		t.Fatalf("fetch-add old %d", old)
	}
	if old := post(verbs.SendWR{Op: verbs.OpCompareSwap, RemoteAddr: addr, CompareAdd: 1, Swap: 7}); old != 105 {
		t.Fatalf("failed CAS old %d", old)
	}
	if old := post(verbs.SendWR{Op: verbs.OpCompareSwap, RemoteAddr: addr, CompareAdd: 105, Swap: 7}); old != 105 {
		t.Fatalf("CAS old %d", old)
	}
	if got := binary.LittleEndian.Uint64(b.buf[8:]); got != 7 {
		t.Fatalf("after CAS %d", got)
	}
	wr := verbs.SendWR{Op: verbs.OpFetchAdd, SGL: a.sge(0, 8), RemoteAddr: addr + 4, RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&wr); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("misaligned atomic: %v", err)
	}
}

func TestWriteImmAndSend(t *testing.T) {
	a, b := connected(t, 256)
	rwr := verbs.RecvWR{ID: 77, SGL: b.sge(128, 64)}
	rwr2 := verbs.RecvWR{ID: 78, SGL: b.sge(128, 64)}
	rwr.Next = &rwr2
	if _, err := b.qp.PostRecv(&rwr); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, "hello")
	w := verbs.SendWR{Op: verbs.OpWriteImm, SGL: a.sge(0, 5), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Imm: 0xdeadbeef}
	s := verbs.SendWR{Op: verbs.OpSend, Flags: verbs.Signaled, SGL: a.sge(0, 5)}
	w.Next = &s
	if _, err := a.qp.PostSend(&w); err != nil {
		t.Fatal(err)
	}
	wc := waitOne(t, b.recvCQ)
	if wc.ID != 77 || wc.Op != verbs.OpRecvImm || !wc.HasImm || wc.Imm != 0xdeadbeef || string(b.buf[:5]) != "hello" {
		t.Fatalf("write-imm: %+v %q", wc, b.buf[:5])
	}
	wc = waitOne(t, b.recvCQ)
	if wc.ID != 78 || wc.Op != verbs.OpRecv || wc.ByteLen != 5 || string(b.buf[128:133]) != "hello" {
		t.Fatalf("send: %+v %q", wc, b.buf[128:133])
	}
	if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess {
		t.Fatalf("%+v", wc)
	}
}

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(a, b *side) verbs.SendWR
	}{
		{"out of bounds", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(0, 16), RemoteAddr: b.mr.Addr() + 60, RKey: b.mr.RKey()}
		}},
		{"below region", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(0, 4), RemoteAddr: b.mr.Addr() - 4, RKey: b.mr.RKey()}
		}},
		{"wrong rkey", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(0, 4), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x10000}
		}},
		{"read out of bounds", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpRead, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()}
		}},
		{"atomic wrong rkey", func(a, b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpFetchAdd, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: 12345}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := connected(t, 64)
			for i := range a.buf {
				a.buf[i] = 0xAA
			}
			wr := c.wr(a, b)
			wr.ID = 1
			if _, err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			wc := waitOne(t, a.sendCQ)
			if wc.ID != 1 || wc.Status != verbs.StatusRemoteAccess || !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
				t.Fatalf("got %+v, want remote access error on wr 1", wc)
			}
			later := verbs.SendWR{ID: 2, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			if !bytes.Equal(b.buf, make([]byte, 64)) {
				t.Fatalf("target memory touched: %v", b.buf)
			}
			if _, err := a.qp.PostSend(&later); !errors.Is(err, verbs.ErrQPState) {
				t.Fatalf("post after error: %v", err)
			}
		})
	}
}

func TestPeerGoneFlushes(t *testing.T) {
	a, b := connected(t, 64)
	b.ctx.Close()
	rd := verbs.SendWR{ID: 9, Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&rd); err != nil && !errors.Is(err, verbs.ErrQPState) {
		t.Fatal(err)
	} else if err == nil {
		if wc := waitOne(t, a.sendCQ); wc.Status == verbs.StatusSuccess {
			t.Fatalf("read from a closed peer succeeded: %+v", wc)
		}
	}
}

func TestUnauthenticatedConnectionRefused(t *testing.T) {
	b := newSide(t, 64)
	ep := b.qp.Endpoint()
	for _, key := range [][]byte{[]byte("wrong secret"), nil} {
		conn, err := net.Dial("tcp", ep.Addr)
		if err != nil {
			t.Fatal(err)
		}
		var payload [auth.PayloadLen]byte
		binary.LittleEndian.PutUint32(payload[0:], ep.QPN)
		binary.LittleEndian.PutUint32(payload[8:], 16)
		if key == nil {
			// Not even the handshake: raw request frames.
			f := frame{kind: kReqWrite, len: 4, seq: 1, addr: b.mr.Addr(), rkey: b.mr.RKey()}
			var hb [hdrLen]byte
			f.encode(&hb)
			conn.Write(append(append(hb[:], 1, 2, 3, 4), make([]byte, 64)...))
		} else if err := auth.Dial(conn, key, authRole, payload); err == nil {
			t.Fatal("wrong secret accepted")
		}
		conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		buf := make([]byte, 256)
		for {
			if _, err := conn.Read(buf); err != nil {
				break // closed by the listener
			}
		}
		conn.Close()
	}
	if !bytes.Equal(b.buf, make([]byte, 64)) {
		t.Fatalf("memory written by an unauthenticated peer: %v", b.buf)
	}
}

func TestLocalProtection(t *testing.T) {
	a, b := connected(t, 64)
	wr := verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{{Addr: a.mr.Addr() + 60, Length: 8, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&wr); !errors.Is(err, verbs.ErrLocalAccess) {
		t.Fatalf("got %v", err)
	}
}

func TestDeregisteredRegionRefused(t *testing.T) {
	a, b := connected(t, 64)
	b.mr.Dereg()
	wr := verbs.SendWR{ID: 3, Op: verbs.OpWrite, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	a.qp.PostSend(&wr)
	if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusRemoteAccess {
		t.Fatalf("%+v", wc)
	}
}

func TestFrameDecode(t *testing.T) {
	good := frame{kind: kReqWrite, flags: flagAck, len: 10, seq: 3, addr: 1 << 40, rkey: 5, imm: 6, arg0: 7, arg1: 8}
	var b [hdrLen]byte
	good.encode(&b)
	var got frame
	if err := got.decode(&b); err != nil || got != good {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	bad := []frame{
		{kind: 99},
		{kind: kReqWrite, len: maxPayload + 1},
		{kind: kReqFAA, len: 4},
		{kind: kRespNak},
		{kind: kRespAck, len: 3},
		{kind: kReqRead, flags: flagAck},
	}
	for _, f := range bad {
		f.encode(&b)
		if err := got.decode(&b); !errors.Is(err, errFrame) {
			t.Errorf("%+v accepted", f)
		}
	}
}
