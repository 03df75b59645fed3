package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/verbs"
)

var secret = []byte("test secret of the shm job")

// testTimeout bounds the contexts' waits for a peer in these tests.
const testTimeout = 5 * time.Second

// side is one end of a connected pair: its own context, a region of
// shared memory (memfd) and one of Go memory (created), and its queues.
type side struct {
	ctx     verbs.Context
	pd      verbs.PD
	mem     *memfd.Mem
	buf     []byte // in mem
	mr      verbs.MR
	goBuf   []byte // Go heap, pinned
	goMR    verbs.MR
	pin     runtime.Pinner
	qp      verbs.QP
	sendCQ  verbs.CQ
	recvCQ  verbs.CQ
	recvBuf []byte
	recvMR  verbs.MR
}

func newSide(t testing.TB, size int) *side {
	t.Helper()
	ctx, err := verbs.Open(Name, "", testConfig(secret))
	if err != nil {
		t.Fatal(err)
	}
	s := &side{ctx: ctx}
	s.pd, _ = ctx.AllocPD()
	if s.mem, err = memfd.Alloc(size, "rmago-test"); err != nil {
		t.Fatal(err)
	}
	s.buf = s.mem.Bytes()
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessAll); err != nil {
		t.Fatal(err)
	}
	s.goBuf = make([]byte, size)
	s.pin.Pin(&s.goBuf[0])
	if s.goMR, err = s.pd.RegMR(s.goBuf, verbs.AccessAll); err != nil {
		t.Fatal(err)
	}
	s.recvBuf = make([]byte, 256)
	s.pin.Pin(&s.recvBuf[0])
	if s.recvMR, err = s.pd.RegMR(s.recvBuf, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	s.sendCQ, _ = ctx.CreateCQ(1024)
	s.recvCQ, _ = ctx.CreateCQ(1024)
	if s.qp, err = s.pd.CreateQP(verbs.QPAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, MaxSendWR: 64, MaxRecvWR: 128}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.ctx.Close()
		s.pin.Unpin()
		s.mem.Free()
	})
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

// post posts one signalled request and waits for its completion.
func post(t testing.TB, s *side, wr *verbs.SendWR) verbs.WC {
	t.Helper()
	wr.Flags |= verbs.Signaled
	if _, err := s.qp.PostSend(wr); err != nil {
		t.Fatalf("post %v: %v", wr.Op, err)
	}
	wc := waitWC(t, s.sendCQ)
	s.ctx.(verbs.MemorySyncer).SyncMemory()
	return wc
}

func waitWC(t testing.TB, cq verbs.CQ) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	n, err := cq.Wait(wc[:], time.Now().Add(testTimeout))
	if err != nil || n != 1 {
		t.Fatalf("waiting for a completion: %d, %v", n, err)
	}
	return wc[0]
}

func sge(mr verbs.MR, off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}}
}

// The data path on both kinds of memory: writes and reads of exact bytes,
// fetch-and-add and compare-and-swap with their old values.
func TestWriteReadAtomics(t *testing.T) {
	testWriteReadAtomics(t)
}

// The same through the owner's socket, where cross-memory attach is refused.
func TestWriteReadAtomicsNoVM(t *testing.T) {
	t.Setenv(config.EnvShmCMA, "off")
	testWriteReadAtomics(t)
}

func testWriteReadAtomics(t *testing.T) {
	a, b := connected(t, 1<<16)
	for _, kind := range []string{"memfd", "created"} {
		mr, buf := b.mr, b.buf
		if kind == "created" {
			mr, buf = b.goMR, b.goBuf
		}
		for i := range 4096 {
			a.buf[i] = byte(i*7 + 3)
		}
		wc := post(t, a, &verbs.SendWR{Op: verbs.OpWrite, SGL: sge(a.mr, 0, 4096), RemoteAddr: mr.Addr() + 100, RKey: mr.RKey()})
		if wc.Status != verbs.StatusSuccess || !bytes.Equal(buf[100:4196], a.buf[:4096]) {
			t.Fatalf("%s: write: %v, data differs", kind, wc.Status)
		}
		for i := range 1000 {
			buf[20000+i] = byte(i * 13)
		}
		wc = post(t, a, &verbs.SendWR{Op: verbs.OpRead, SGL: sge(a.mr, 8192, 1000), RemoteAddr: mr.Addr() + 20000, RKey: mr.RKey()})
		if wc.Status != verbs.StatusSuccess || !bytes.Equal(a.buf[8192:9192], buf[20000:21000]) {
			t.Fatalf("%s: read: %v, data differs", kind, wc.Status)
		}
		binary.LittleEndian.PutUint64(buf[64:], 40)
		wc = post(t, a, &verbs.SendWR{Op: verbs.OpFetchAdd, SGL: sge(a.mr, 0, 8), RemoteAddr: mr.Addr() + 64, RKey: mr.RKey(), CompareAdd: 2})
		if wc.Status != verbs.StatusSuccess || binary.LittleEndian.Uint64(a.buf) != 40 || binary.LittleEndian.Uint64(buf[64:]) != 42 {
			t.Fatalf("%s: fetch-add: %v, old %d, now %d", kind, wc.Status, binary.LittleEndian.Uint64(a.buf), binary.LittleEndian.Uint64(buf[64:]))
		}
		wc = post(t, a, &verbs.SendWR{Op: verbs.OpCompareSwap, SGL: sge(a.mr, 8, 8), RemoteAddr: mr.Addr() + 64, RKey: mr.RKey(), CompareAdd: 42, Swap: 7})
		if wc.Status != verbs.StatusSuccess || binary.LittleEndian.Uint64(a.buf[8:]) != 42 || binary.LittleEndian.Uint64(buf[64:]) != 7 {
			t.Fatalf("%s: compare-swap: %v", kind, wc.Status)
		}
		wc = post(t, a, &verbs.SendWR{Op: verbs.OpCompareSwap, SGL: sge(a.mr, 8, 8), RemoteAddr: mr.Addr() + 64, RKey: mr.RKey(), CompareAdd: 42, Swap: 9})
		if wc.Status != verbs.StatusSuccess || binary.LittleEndian.Uint64(a.buf[8:]) != 7 || binary.LittleEndian.Uint64(buf[64:]) != 7 {
			t.Fatalf("%s: failed compare-swap: %v", kind, wc.Status)
		}
	}
}

// Refused requests complete with a remote access error, leave the target
// untouched and put the queue pair in the error state.
func TestRefusals(t *testing.T) {
	cases := []struct {
		name string
		wr   func(b *side) verbs.SendWR
	}{
		{"bad rkey", func(b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x10000}
		}},
		{"past the end", func(b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, RemoteAddr: b.mr.Addr() + uint64(len(b.buf)) - 8, RKey: b.mr.RKey()}
		}},
		{"before the start", func(b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpRead, RemoteAddr: b.mr.Addr() - 16, RKey: b.mr.RKey()}
		}},
		{"no atomic access", func(b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpFetchAdd, RemoteAddr: b.recvMR.Addr(), RKey: b.recvMR.RKey(), CompareAdd: 1}
		}},
		{"created past the end", func(b *side) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, RemoteAddr: b.goMR.Addr() + uint64(len(b.goBuf)) - 8, RKey: b.goMR.RKey()}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := connected(t, 1<<14)
			before := append([]byte(nil), b.buf...)
			wr := c.wr(b)
			n := 16
			if wr.Op == verbs.OpFetchAdd {
				n = 8
			}
			wr.SGL = sge(a.mr, 0, n)
			for i := range n {
				a.buf[i] = 0xee
			}
			wc := post(t, a, &wr)
			if !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
				t.Fatalf("completion %v, want a remote access error", wc.Err())
			}
			if !bytes.Equal(b.buf, before) {
				t.Fatal("refused request changed the target")
			}
			if _, err := a.qp.PostSend(&verbs.SendWR{Op: verbs.OpWrite}); !errors.Is(err, verbs.ErrQPState) || !errors.Is(err, verbs.ErrRemoteAccess) {
				t.Fatalf("post after refusal: %v", err)
			}
		})
	}
}

// Writes with immediate data arrive in order, each after its data, into
// the posted receives; without a receive a write with immediate fails
// with receiver not ready.
func TestWriteImmOrder(t *testing.T) {
	a, b := connected(t, 1<<16)
	const n = 100
	for range n {
		if _, err := b.qp.PostRecv(&verbs.RecvWR{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		a.buf[i] = byte(i + 1)
		wr := verbs.SendWR{ID: uint64(i), Op: verbs.OpWriteImm, SGL: sge(a.mr, i, 1), RemoteAddr: b.mr.Addr() + uint64(i), RKey: b.mr.RKey(), Imm: uint32(1000 + i)}
		if _, err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		wc := waitWC(t, b.recvCQ)
		if wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpRecvImm || !wc.HasImm || wc.Imm != uint32(1000+i) || b.buf[i] != byte(i+1) {
			t.Fatalf("receive %d: %+v, data %d", i, wc, b.buf[i])
		}
	}
	// A send's payload lands in the receive's buffer.
	if _, err := b.qp.PostRecv(&verbs.RecvWR{ID: 77, SGL: sge(b.recvMR, 0, 256)}); err != nil {
		t.Fatal(err)
	}
	copy(a.buf, "hello, shared memory")
	post(t, a, &verbs.SendWR{Op: verbs.OpSend, SGL: sge(a.mr, 0, 20)})
	if wc := waitWC(t, b.recvCQ); wc.ID != 77 || wc.Op != verbs.OpRecv || wc.ByteLen != 20 || string(b.recvBuf[:20]) != "hello, shared memory" {
		t.Fatalf("send: %+v %q", wc, b.recvBuf[:20])
	}
	wc := post(t, a, &verbs.SendWR{Op: verbs.OpWriteImm, Imm: 1})
	if !errors.Is(wc.Err(), verbs.ErrRNR) {
		t.Fatalf("write-imm without a receive: %v", wc.Err())
	}
}

// A deregistered region is refused, as a freed window must be.
func TestDeregRefused(t *testing.T) {
	a, b := connected(t, 1<<14)
	wr := verbs.SendWR{Op: verbs.OpWrite, SGL: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if wc := post(t, a, &wr); wc.Status != verbs.StatusSuccess {
		t.Fatal(wc.Err())
	}
	if err := b.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if wc := post(t, a, &wr); !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
		t.Fatalf("write to a deregistered region: %v", wc.Err())
	}
}

// An orderly close is reported to the peer as verbs.ErrPeerClosed, with
// its posted receives flushed.
func TestPeerClose(t *testing.T) {
	a, b := connected(t, 1<<12)
	if _, err := a.qp.PostRecv(&verbs.RecvWR{ID: 5}); err != nil {
		t.Fatal(err)
	}
	b.qp.Close()
	wc := waitWC(t, a.recvCQ)
	if wc.ID != 5 || wc.Status != verbs.StatusFlushed {
		t.Fatalf("receive after the peer closed: %+v", wc)
	}
	if err := a.qp.(verbs.ErrorReporter).Err(); !errors.Is(err, verbs.ErrPeerClosed) {
		t.Fatalf("cause %v", err)
	}
}

// A peer that does not know the job's secret is refused before anything
// is mapped.
func TestWrongSecret(t *testing.T) {
	a := newSide(t, 4096)
	a.ctx.(verbs.ConnManager).Accept(func(req verbs.ConnRequest) { req.Accept(a.qp) })
	ctx, err := verbs.Open(Name, "", verbs.Config{Secret: []byte("some other job"), Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16)
	q, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.(verbs.ConnManager).Dial(q, a.ctx.(verbs.ConnManager).ListenEndpoint(), 1); !errors.Is(err, verbs.ErrAuth) {
		t.Fatalf("dial with the wrong secret: %v", err)
	}
}

// testConfig is the configuration the tests open contexts with: the
// provider's settings from the environment, as transport passes them
// (tests and their child processes set RMAGO_SHM_CMA=off for the
// owner's-socket path).
func testConfig(secret []byte) verbs.Config {
	s, err := config.FromEnv()
	if err != nil {
		panic(err)
	}
	return verbs.Config{Secret: secret, Timeout: testTimeout, ShmSpin: s.ShmSpin, ShmNoCMA: !s.ShmCMA}
}

// TestSpinDefault: CQ.Wait polls for DefaultSpin, also on a node that
// shares its cores (where it yields the core between polls), unless
// verbs.Config.ShmSpin says otherwise (negative: not at all).
func TestSpinDefault(t *testing.T) {
	for _, c := range []struct {
		spin  time.Duration
		share bool
		want  time.Duration
	}{
		{0, false, DefaultSpin},
		{0, true, DefaultSpin},
		{-1, false, 0},
		{-1, true, 0},
		{200 * time.Microsecond, true, 200 * time.Microsecond},
	} {
		ctx, err := verbs.Open(Name, "", verbs.Config{Secret: []byte("spin default"), Timeout: testTimeout, ShmSpin: c.spin, ShareCores: c.share})
		if err != nil {
			t.Fatal(err)
		}
		if d := ctx.(*device); d.spin != c.want || d.shareCores != c.share {
			t.Errorf("ShmSpin %v, ShareCores %v: CQ.Wait polls for %v (yielding to processes: %v), want %v (%v)", c.spin, c.share, d.spin, d.shareCores, c.want, c.share)
		}
		ctx.Close()
	}
}

// TestWake: Wake ends a Wait that sleeps without a deadline, and makes a
// Wait that starts after it return at once, with no completion and no
// error; a Wait after that sleeps again (to its deadline here). Wake on a
// closed queue does nothing.
func TestWake(t *testing.T) {
	ctx, err := verbs.Open(Name, "", verbs.Config{Secret: secret, Timeout: testTimeout, ShmSpin: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	q, err := ctx.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 4)
	w := q.(verbs.Waker)
	w.Wake()
	if n, err := q.Wait(wc, time.Time{}); n != 0 || err != nil {
		t.Fatalf("Wait after Wake: %d completions, %v; want 0, nil", n, err)
	}
	done := make(chan error)
	go func() {
		n, err := q.Wait(wc, time.Time{})
		if n != 0 {
			err = fmt.Errorf("%d completions", n)
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it sleep (it returns either way)
	w.Wake()
	if err := <-done; err != nil {
		t.Fatalf("a woken Wait: %v", err)
	}
	if n, err := q.Wait(wc, time.Now().Add(time.Millisecond)); n != 0 || !errors.Is(err, verbs.ErrTimeout) {
		t.Fatalf("Wait with nothing to report: %d, %v; want 0, ErrTimeout", n, err)
	}
	q.Close()
	w.Wake()
}

// Both queue pairs of a loopback pair closed at once (as transport's
// Disconnect does): each Close fails its partner too, and neither may
// free its inbox while the other's fail is still draining it.
func TestLoopbackConcurrentClose(t *testing.T) {
	s := newSide(t, 1<<12)
	for i := range 200 {
		var qps [2]verbs.QP
		for j := range qps {
			q, err := s.pd.CreateQP(verbs.QPAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, MaxSendWR: 8, MaxRecvWR: 8})
			if err != nil {
				t.Fatal(err)
			}
			qps[j] = q
		}
		for j := range qps {
			if err := qps[j].Connect(qps[1-j].Endpoint()); err != nil {
				t.Fatal(err)
			}
			if _, err := qps[j].PostRecv(&verbs.RecvWR{ID: uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for _, q := range qps {
			wg.Go(func() { q.Close() })
		}
		wg.Wait()
		for range qps { // each receive flushed, once
			if wc := waitWC(t, s.recvCQ); wc.ID != uint64(i) || wc.Status != verbs.StatusFlushed {
				t.Fatalf("round %d: %+v", i, wc)
			}
		}
	}
}
