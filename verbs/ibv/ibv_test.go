//go:build ibv && linux && cgo

package ibv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// These tests need an RDMA device (ci/softroce/run.sh gives them rxe0 in a
// VM); without one they skip.

const waitFor = 60 * time.Second // rxe under QEMU TCG is slow

// openOrSkip opens the default device, or skips the test when there is none.
func openOrSkip(t *testing.T) verbs.Context {
	t.Helper()
	ctx, err := verbs.Open("ibv", "", verbs.Config{GIDIndex: -1})
	if errors.Is(err, verbs.ErrNoDevice) {
		t.Skipf("no RDMA device: %v", err)
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Errorf("context close: %v", err)
		}
	})
	return ctx
}

// mmapBuf returns n bytes outside the Go heap.
func mmapBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// side is one end of a loopback connection: its memory, region, CQ and QP.
type side struct {
	raw []byte // the whole mapping: guard page, region, guard page
	mem []byte // registered region
	mr  verbs.MR
	cq  verbs.CQ
	qp  verbs.QP
}

type pair struct {
	ctx  verbs.Context
	pd   verbs.PD
	a, b *side
}

const regionSize = 2 << 20

// newPair makes two connected RC queue pairs on one device, each with its
// own CQ and a registered 2 MiB region. The regions sit inside larger
// mappings with a guard page either side, so that out-of-bounds accesses
// hit mapped but unregistered memory.
func newPair(t *testing.T, ctx verbs.Context) *pair {
	t.Helper()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	p := &pair{ctx: ctx, pd: pd}
	t.Cleanup(func() {
		if err := pd.Close(); err != nil {
			t.Errorf("pd close: %v", err)
		}
	})
	mk := func() *side {
		page := os.Getpagesize()
		raw := mmapBuf(t, regionSize+2*page)
		s := &side{raw: raw, mem: raw[page : page+regionSize]}
		if s.mr, err = pd.RegMR(s.mem, verbs.AccessAll); err != nil {
			t.Fatalf("RegMR: %v", err)
		}
		if s.cq, err = ctx.CreateCQ(256); err != nil {
			t.Fatalf("CreateCQ: %v", err)
		}
		if s.qp, err = pd.CreateQP(verbs.QPAttr{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 64, MaxRecvWR: 64, MaxSGE: 2, MaxInline: 64}); err != nil {
			t.Fatalf("CreateQP: %v", err)
		}
		t.Cleanup(func() {
			for _, err := range []error{s.qp.Close(), s.cq.Close(), s.mr.Dereg()} {
				if err != nil {
					t.Errorf("close: %v", err)
				}
			}
		})
		return s
	}
	p.a, p.b = mk(), mk()
	if err := p.a.qp.Connect(p.b.qp.Endpoint()); err != nil {
		t.Fatalf("connect a: %v", err)
	}
	if err := p.b.qp.Connect(p.a.qp.Endpoint()); err != nil {
		t.Fatalf("connect b: %v", err)
	}
	return p
}

// addr is the virtual address of s.mem[off].
func (s *side) addr(off int) uint64 { return s.mr.Addr() + uint64(off) }

func (s *side) sge(off, n int) []verbs.SGE {
	return []verbs.SGE{{Addr: s.addr(off), Length: uint32(n), LKey: s.mr.LKey()}}
}

// wait collects exactly n completions from cq.
func wait(t *testing.T, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	var got []verbs.WC
	buf := make([]verbs.WC, 16)
	deadline := time.Now().Add(waitFor)
	for len(got) < n {
		k, err := cq.Wait(buf, deadline)
		if err != nil {
			t.Fatalf("waiting for %d completions (have %v): %v", n, got, err)
		}
		got = append(got, buf[:k]...)
	}
	if len(got) != n {
		t.Fatalf("got %d completions, want %d: %v", len(got), n, got)
	}
	return got
}

// post1 posts one signalled request and returns its completion.
func post1(t *testing.T, s *side, wr *verbs.SendWR) verbs.WC {
	t.Helper()
	wr.Flags |= verbs.Signaled
	if bad, err := s.qp.PostSend(wr); err != nil {
		t.Fatalf("PostSend %v: %v (bad %p)", wr.Op, err, bad)
	}
	return wait(t, s.cq, 1)[0]
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
}

func TestDeviceAttr(t *testing.T) {
	ctx := openOrSkip(t)
	a := ctx.Attr()
	t.Logf("device %+v", a)
	if a.Provider != "ibv" || a.Name == "" || a.MTU < 256 || a.MaxQPWR < 64 || a.MaxSGE < 1 || a.MaxMRSize < regionSize || !a.PortActive {
		t.Errorf("implausible attributes %+v", a)
	}
	if a.LinkLayer != "Ethernet" && a.LinkLayer != "InfiniBand" {
		t.Errorf("link layer %q", a.LinkLayer)
	}
	devs, err := verbs.Open("ibv", a.Name, verbs.Config{GIDIndex: -1})
	if err != nil {
		t.Fatalf("open by name %q: %v", a.Name, err)
	}
	devs.Close()
	list, err := (provider{}).Devices()
	if err != nil || !slices.ContainsFunc(list, func(d verbs.DeviceAttr) bool { return d.Name == a.Name }) {
		t.Errorf("Devices() = %v, %v; want %s listed", list, err, a.Name)
	}
	if !Available("", "") {
		t.Errorf("Available() = false with %s open", a.Name)
	}
	if _, err := verbs.Open("ibv", "no-such-dev", verbs.Config{GIDIndex: -1}); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("open unknown device: %v, want ErrNoDevice", err)
	}

	p := newPair(t, ctx)
	ep := p.a.qp.Endpoint()
	t.Logf("endpoint %+v", ep)
	if ep.QPN != p.a.qp.Num() || ep.QPN == 0 || ep.PSN > 0xffffff || ep.MTU != a.MTU || ep.Device != a.Name {
		t.Errorf("endpoint %+v", ep)
	}
	if a.LinkLayer == "Ethernet" {
		if len(ep.GID) != 16 {
			t.Errorf("RoCE endpoint without a 16-byte GID: %+v", ep)
		}
		// In the softroce VM, /init found the RoCE v2 GID of 192.0.2.1.
		if want := os.Getenv("RMAGO_GID_INDEX"); want != "" {
			if strconv.Itoa(ep.GIDIndex) != want {
				t.Errorf("GID index %d, want %s", ep.GIDIndex, want)
			}
			if !bytes.Equal(ep.GID[10:], []byte{0xff, 0xff, 192, 0, 2, 1}) {
				t.Errorf("GID % x is not ::ffff:192.0.2.1", ep.GID)
			}
		}
	}
	if got := p.a.mr.Addr(); got != uint64(uintptrOf(p.a.mem)) || p.a.mr.Len() != regionSize || p.a.mr.Access() != verbs.AccessAll {
		t.Errorf("MR addr %#x len %d access %v; buffer at %#x", got, p.a.mr.Len(), p.a.mr.Access(), uintptrOf(p.a.mem))
	}
	if p.a.mr.LKey() == 0 && p.a.mr.RKey() == 0 {
		t.Errorf("zero keys")
	}
}

func TestWriteSizes(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	for i, n := range []int{1, 2, 7, 8, 63, 64, 1000, 4096, 4097, 65536, 65537, 1 << 20} {
		src, dst := 3+i, 5+2*i // odd offsets: unaligned addresses
		fill(p.a.mem[src:src+n], byte(i+1))
		clear(p.b.mem)
		wc := post1(t, p.a, &verbs.SendWR{ID: uint64(100 + i), Op: verbs.OpWrite, SGL: p.a.sge(src, n), RemoteAddr: p.b.addr(dst), RKey: p.b.mr.RKey()})
		if wc.Status != verbs.StatusSuccess || wc.ID != uint64(100+i) || wc.Op != verbs.OpWrite || wc.QPN != p.a.qp.Num() {
			t.Fatalf("write %d: completion %+v (%v)", n, wc, wc.Err())
		}
		if !bytes.Equal(p.b.mem[dst:dst+n], p.a.mem[src:src+n]) {
			t.Fatalf("write %d bytes: target differs", n)
		}
		if slices.ContainsFunc(p.b.mem[:dst], nonZero) || slices.ContainsFunc(p.b.mem[dst+n:], nonZero) {
			t.Fatalf("write %d bytes touched memory outside [%d,+%d)", n, dst, n)
		}
	}
}

func nonZero(b byte) bool { return b != 0 }

func TestRead(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	for i, n := range []int{1, 8, 4096, 100000, 1 << 20} {
		fill(p.b.mem[:n], byte(0x40+i))
		clear(p.a.mem)
		wc := post1(t, p.a, &verbs.SendWR{ID: 7, Op: verbs.OpRead, SGL: p.a.sge(16, n), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey()})
		if wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpRead {
			t.Fatalf("read %d: %+v", n, wc)
		}
		if !bytes.Equal(p.a.mem[16:16+n], p.b.mem[:n]) || slices.ContainsFunc(p.a.mem[16+n:], nonZero) {
			t.Fatalf("read %d bytes: wrong data", n)
		}
	}
	// Two SGEs: scatter one remote range into two local pieces.
	fill(p.b.mem[:300], 9)
	clear(p.a.mem[:4096])
	sgl := []verbs.SGE{p.a.sge(0, 100)[0], p.a.sge(1000, 200)[0]}
	if wc := post1(t, p.a, &verbs.SendWR{Op: verbs.OpRead, SGL: sgl, RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey()}); wc.Status != verbs.StatusSuccess {
		t.Fatalf("2-SGE read: %+v", wc)
	}
	if !bytes.Equal(p.a.mem[:100], p.b.mem[:100]) || !bytes.Equal(p.a.mem[1000:1200], p.b.mem[100:300]) {
		t.Fatalf("2-SGE read scattered wrongly")
	}
}

func TestWriteImm(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	// The write with immediate consumes a receive; its buffer stays unused.
	if bad, err := p.b.qp.PostRecv(&verbs.RecvWR{ID: 55, SGL: p.b.sge(regionSize-64, 64)}); err != nil {
		t.Fatalf("PostRecv: %v (%p)", err, bad)
	}
	fill(p.a.mem[:5000], 0x11)
	const imm = 0xdeadbeef
	wc := post1(t, p.a, &verbs.SendWR{ID: 56, Op: verbs.OpWriteImm, SGL: p.a.sge(0, 5000), RemoteAddr: p.b.addr(128), RKey: p.b.mr.RKey(), Imm: imm})
	if wc.Status != verbs.StatusSuccess || wc.ID != 56 {
		t.Fatalf("sender completion %+v", wc)
	}
	rc := wait(t, p.b.cq, 1)[0]
	if rc.Status != verbs.StatusSuccess || rc.ID != 55 || rc.Op != verbs.OpRecvImm || !rc.HasImm || rc.Imm != imm || rc.ByteLen != 5000 || rc.QPN != p.b.qp.Num() {
		t.Fatalf("receiver completion %+v, want recv-imm id 55 imm %#x len 5000", rc, uint32(imm))
	}
	if !bytes.Equal(p.b.mem[128:5128], p.a.mem[:5000]) {
		t.Fatalf("data of write with immediate differs")
	}
	if slices.ContainsFunc(p.b.mem[regionSize-64:], nonZero) {
		t.Fatalf("write with immediate wrote into the receive buffer")
	}
	// A zero-length write with immediate is a pure notification.
	p.b.qp.PostRecv(&verbs.RecvWR{ID: 57})
	if wc := post1(t, p.a, &verbs.SendWR{ID: 58, Op: verbs.OpWriteImm, RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey(), Imm: 1}); wc.Status != verbs.StatusSuccess {
		t.Fatalf("zero-length write-imm: %+v", wc)
	}
	if rc := wait(t, p.b.cq, 1)[0]; rc.ID != 57 || rc.Imm != 1 || rc.ByteLen != 0 || rc.Op != verbs.OpRecvImm {
		t.Fatalf("zero-length write-imm receive: %+v", rc)
	}
}

func TestAtomics(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	if p.ctx.Attr().AtomicCap == verbs.AtomicNone {
		t.Skip("device without atomics")
	}
	word := func(s *side, off int) uint64 { return binary.NativeEndian.Uint64(s.mem[off:]) }
	binary.NativeEndian.PutUint64(p.b.mem[64:], 40)
	rkey := p.b.mr.RKey()

	wc := post1(t, p.a, &verbs.SendWR{ID: 1, Op: verbs.OpFetchAdd, SGL: p.a.sge(8, 8), RemoteAddr: p.b.addr(64), RKey: rkey, CompareAdd: 2})
	if wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpFetchAdd || word(p.a, 8) != 40 || word(p.b, 64) != 42 {
		t.Fatalf("fetch-add: %+v old %d target %d; want old 40 target 42", wc, word(p.a, 8), word(p.b, 64))
	}
	wc = post1(t, p.a, &verbs.SendWR{ID: 2, Op: verbs.OpCompareSwap, SGL: p.a.sge(16, 8), RemoteAddr: p.b.addr(64), RKey: rkey, CompareAdd: 42, Swap: 1 << 40})
	if wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpCompareSwap || word(p.a, 16) != 42 || word(p.b, 64) != 1<<40 {
		t.Fatalf("compare-swap (equal): %+v old %d target %d", wc, word(p.a, 16), word(p.b, 64))
	}
	wc = post1(t, p.a, &verbs.SendWR{ID: 3, Op: verbs.OpCompareSwap, SGL: p.a.sge(24, 8), RemoteAddr: p.b.addr(64), RKey: rkey, CompareAdd: 42, Swap: 7})
	if wc.Status != verbs.StatusSuccess || word(p.a, 24) != 1<<40 || word(p.b, 64) != 1<<40 {
		t.Fatalf("compare-swap (different): %+v old %d target %d", wc, word(p.a, 24), word(p.b, 64))
	}
	// Fetch-add wraps modulo 2^64.
	binary.NativeEndian.PutUint64(p.b.mem[72:], ^uint64(0))
	wc = post1(t, p.a, &verbs.SendWR{ID: 4, Op: verbs.OpFetchAdd, SGL: p.a.sge(32, 8), RemoteAddr: p.b.addr(72), RKey: rkey, CompareAdd: 3})
	if wc.Status != verbs.StatusSuccess || word(p.a, 32) != ^uint64(0) || word(p.b, 72) != 2 {
		t.Fatalf("fetch-add wrap: old %#x target %d", word(p.a, 32), word(p.b, 72))
	}
	// A chain of 50 unsignalled fetch-adds and a signalled last one.
	binary.NativeEndian.PutUint64(p.b.mem[80:], 0)
	wrs := make([]verbs.SendWR, 51)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Op: verbs.OpFetchAdd, SGL: p.a.sge(1024+8*i, 8), RemoteAddr: p.b.addr(80), RKey: rkey, CompareAdd: 1}
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	wrs[50].Flags = verbs.Signaled
	if bad, err := p.a.qp.PostSend(&wrs[0]); err != nil {
		t.Fatalf("PostSend chain: %v (bad %p)", err, bad)
	}
	// The last request's completion implies the earlier ones completed.
	if wc := wait(t, p.a.cq, 1)[0]; wc.ID != 50 || wc.Status != verbs.StatusSuccess {
		t.Fatalf("chain tail: %+v", wc)
	}
	if word(p.b, 80) != 51 {
		t.Fatalf("after 51 fetch-adds the counter is %d", word(p.b, 80))
	}
	for i := range 51 {
		if old := word(p.a, 1024+8*i); old != uint64(i) {
			t.Fatalf("fetch-add %d of the chain saw %d, want %d (requests out of order?)", i, old, i)
		}
	}
	// Invalid atomics are refused before posting.
	for _, bad := range []verbs.SendWR{
		{Op: verbs.OpFetchAdd, SGL: p.a.sge(0, 4), RemoteAddr: p.b.addr(64), RKey: rkey},
		{Op: verbs.OpFetchAdd, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(66), RKey: rkey},
		{Op: verbs.OpCompareSwap, RemoteAddr: p.b.addr(64), RKey: rkey},
		{Op: verbs.OpCompareSwap, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(64), RKey: rkey, Flags: verbs.Inline},
	} {
		if got, err := p.a.qp.PostSend(&bad); !errors.Is(err, verbs.ErrInvalid) || got != &bad {
			t.Errorf("invalid atomic %+v: %v", bad, err)
		}
	}
}

func TestSendRecv(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	// Two receives, posted as one chain.
	r2 := verbs.RecvWR{ID: 2, SGL: p.b.sge(4096, 4096)}
	r1 := verbs.RecvWR{ID: 1, SGL: p.b.sge(0, 256), Next: &r2}
	if bad, err := p.b.qp.PostRecv(&r1); err != nil {
		t.Fatalf("PostRecv: %v %p", err, bad)
	}
	fill(p.a.mem[:3000], 0x21)
	wc := post1(t, p.a, &verbs.SendWR{ID: 10, Op: verbs.OpSend, SGL: p.a.sge(0, 100)})
	if wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpSend {
		t.Fatalf("send completion %+v", wc)
	}
	rc := wait(t, p.b.cq, 1)[0]
	if rc.Status != verbs.StatusSuccess || rc.ID != 1 || rc.Op != verbs.OpRecv || rc.ByteLen != 100 || rc.HasImm {
		t.Fatalf("recv completion %+v", rc)
	}
	if !bytes.Equal(p.b.mem[:100], p.a.mem[:100]) || slices.ContainsFunc(p.b.mem[100:4096], nonZero) {
		t.Fatalf("received data differs")
	}
	// An inline send, gathered from two SGEs, into the second receive.
	inl := p.ctx.Attr().MaxInline
	t.Logf("max inline %d", inl)
	flags := verbs.SendFlags(0)
	if inl >= 48 {
		flags = verbs.Inline
	}
	sgl := []verbs.SGE{p.a.sge(200, 16)[0], p.a.sge(500, 32)[0]}
	wc = post1(t, p.a, &verbs.SendWR{ID: 11, Op: verbs.OpSend, SGL: sgl, Flags: flags})
	if wc.Status != verbs.StatusSuccess {
		t.Fatalf("gather send: %+v", wc)
	}
	rc = wait(t, p.b.cq, 1)[0]
	if rc.ID != 2 || rc.ByteLen != 48 || !bytes.Equal(p.b.mem[4096:4096+48], append(slices.Clone(p.a.mem[200:216]), p.a.mem[500:532]...)) {
		t.Fatalf("gather send received %+v", rc)
	}
}

func TestChainOrdered(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	// 100 writes (more than one post batch), only every 10th signalled, each
	// overwriting the same 8 bytes: the last write must win.
	const n = 100
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		binary.NativeEndian.PutUint64(p.a.mem[8*i:], uint64(i+1))
		wrs[i] = verbs.SendWR{ID: uint64(i), Op: verbs.OpWrite, SGL: p.a.sge(8*i, 8), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey()}
		if i%10 == 9 {
			wrs[i].Flags = verbs.Signaled
		}
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	// The queue holds 64: post in two chains.
	wrs[49].Next = nil
	for _, head := range []*verbs.SendWR{&wrs[0], &wrs[50]} {
		if bad, err := p.a.qp.PostSend(head); err != nil {
			t.Fatalf("PostSend: %v (bad %d)", err, bad.ID)
		}
		got := wait(t, p.a.cq, 5)
		for i, wc := range got {
			if want := head.ID + uint64(10*i+9); wc.ID != want || wc.Status != verbs.StatusSuccess {
				t.Fatalf("completion %d: %+v, want id %d", i, wc, want)
			}
		}
	}
	if v := binary.NativeEndian.Uint64(p.b.mem); v != n {
		t.Fatalf("target holds %d, want %d", v, n)
	}
}

func TestRemoteAccessError(t *testing.T) {
	ctx := openOrSkip(t)
	cases := []struct {
		name string
		wr   func(p *pair) verbs.SendWR
	}{
		{"past the end", func(p *pair) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: p.a.sge(0, 64), RemoteAddr: p.b.addr(regionSize - 32), RKey: p.b.mr.RKey()}
		}},
		{"after the end", func(p *pair) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: p.a.sge(0, 64), RemoteAddr: p.b.addr(regionSize + 64), RKey: p.b.mr.RKey()}
		}},
		{"before the start", func(p *pair) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: p.a.sge(0, 64), RemoteAddr: p.b.addr(0) - 128, RKey: p.b.mr.RKey()}
		}},
		{"wrong rkey", func(p *pair) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpWrite, SGL: p.a.sge(0, 64), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey() ^ 0x5a00}
		}},
		{"read wrong rkey", func(p *pair) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpRead, SGL: p.a.sge(0, 64), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey() + 0x100}
		}},
		{"atomic past the end", func(p *pair) verbs.SendWR {
			return verbs.SendWR{Op: verbs.OpFetchAdd, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(regionSize), RKey: p.b.mr.RKey(), CompareAdd: 1}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Fresh queue pairs: the error moves them to the error state.
			p := newPair(t, ctx)
			fill(p.a.mem[:64], 0x77)
			whole := p.b.raw // the region and the guard pages around it
			wr := c.wr(p)
			wr.ID = 99
			wc := post1(t, p.a, &wr)
			if wc.Status != verbs.StatusRemoteAccess || wc.ID != 99 || !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
				t.Fatalf("completion %+v (%v), want remote access error", wc, wc.Err())
			}
			if slices.ContainsFunc(whole, nonZero) {
				t.Fatalf("target memory changed by a refused request")
			}
			// The requester is now in the error state: later requests flush
			// (or are refused at post time).
			next := verbs.SendWR{ID: 100, Op: verbs.OpWrite, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey(), Flags: verbs.Signaled}
			if _, err := p.a.qp.PostSend(&next); err == nil {
				if wc := wait(t, p.a.cq, 1)[0]; wc.Status != verbs.StatusFlushed || wc.ID != 100 {
					t.Fatalf("request after the error: %+v, want flushed", wc)
				}
			} else if !errors.Is(err, verbs.ErrQPState) {
				t.Fatalf("post after the error: %v", err)
			}
			if slices.ContainsFunc(whole, nonZero) {
				t.Fatalf("target memory changed after the error")
			}
			// Drain whatever the responder side reported.
			var buf [8]verbs.WC
			p.b.cq.Poll(buf[:])
		})
	}
}

func TestContractErrors(t *testing.T) {
	ctx := openOrSkip(t)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	if _, err := pd.RegMR(nil, verbs.AccessAll); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("empty RegMR: %v", err)
	}
	buf := mmapBuf(t, 4096)
	if _, err := pd.RegMR(buf, verbs.AccessRemoteWrite); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("remote write without local write: %v", err)
	}
	if _, err := ctx.CreateCQ(0); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("CQ depth 0: %v", err)
	}
	cq, err := ctx.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	var wc [4]verbs.WC
	start := time.Now()
	if n, err := cq.Wait(wc[:], time.Now().Add(20*time.Millisecond)); n != 0 || !errors.Is(err, verbs.ErrTimeout) {
		t.Errorf("Wait on an empty CQ: %d, %v", n, err)
	}
	if d := time.Since(start); d < 20*time.Millisecond || d > 2*time.Second {
		t.Errorf("Wait returned after %v", d)
	}
	if _, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 0}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("QP depth 0: %v", err)
	}
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(buf, verbs.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	wr := verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}, RemoteAddr: mr.Addr(), RKey: mr.RKey()}
	if _, err := qp.PostSend(&wr); !errors.Is(err, verbs.ErrQPState) {
		t.Errorf("PostSend before Connect: %v", err)
	}
	// Receives may be posted before Connect.
	if _, err := qp.PostRecv(&verbs.RecvWR{ID: 1, SGL: wr.SGL}); err != nil {
		t.Errorf("PostRecv before Connect: %v", err)
	}
	two := verbs.RecvWR{SGL: []verbs.SGE{wr.SGL[0], wr.SGL[0]}}
	if bad, err := qp.PostRecv(&two); !errors.Is(err, verbs.ErrInvalid) || bad != &two {
		t.Errorf("PostRecv with 2 SGEs on a 1-SGE QP: %v", err)
	}
	if err := qp.Connect(verbs.Endpoint{QPN: 5}); !errors.Is(err, verbs.ErrInvalid) && ctx.Attr().LinkLayer == "Ethernet" {
		t.Errorf("connect without GID on RoCE: %v", err)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := qp.PostSend(&wr); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("PostSend after Close: %v", err)
	}
	if err := qp.Close(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// TestHotPathAllocs checks that posting and waiting do not allocate, in
// Wait's busy phase and through its sleep on the completion channel (spin 0).
func TestHotPathAllocs(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey()}
	wc := make([]verbs.WC, 4)
	deadline := time.Now().Add(time.Hour)
	for _, spin := range []int{-1, 0, 1 << 30} {
		withSpin(t, spin)
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := p.a.qp.PostSend(&wr); err != nil {
				panic(err)
			}
			if n, err := p.a.cq.Wait(wc, deadline); n != 1 || err != nil || wc[0].Status != verbs.StatusSuccess {
				panic("bad completion")
			}
		})
		if allocs != 0 {
			t.Errorf("spin %s: %.1f allocations per write+wait, want 0", spinName(spin), allocs)
		}
	}
}

// TestWriteLatency logs the round trip of signalled 8-byte writes, to set
// beside perftest's ib_write_lat (which measures half a ping-pong).
func TestWriteLatency(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	const iters = 2000
	lat := make([]time.Duration, iters)
	wc := make([]verbs.WC, 1)
	// spin 0 always sleeps on the completion channel; 1<<30 always polls.
	for _, spin := range []int{-1, 0, 1 << 30} {
		withSpin(t, spin)
		for _, op := range []verbs.Opcode{verbs.OpWrite, verbs.OpRead, verbs.OpFetchAdd} {
			wr := verbs.SendWR{Op: op, Flags: verbs.Signaled, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey()}
			for i := range lat {
				t0 := time.Now()
				if _, err := p.a.qp.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				if n, err := p.a.cq.Wait(wc, time.Now().Add(waitFor)); n != 1 || err != nil || wc[0].Status != verbs.StatusSuccess {
					t.Fatalf("%v: %d %v %+v", op, n, err, wc[0])
				}
				lat[i] = time.Since(t0)
			}
			slices.Sort(lat)
			t.Logf("spin %s: %v 8 B: median %.2f µs, p99 %.2f µs, max %.2f µs (post to completion, %d iterations)", spinName(spin), op,
				float64(lat[iters/2].Nanoseconds())/1e3, float64(lat[iters*99/100].Nanoseconds())/1e3,
				float64(lat[iters-1].Nanoseconds())/1e3, iters)
		}
	}
}

// TestConcurrentAtomics runs fetch-adds from several queue pairs, each
// driven by its own goroutine, on one target word: every old value must be
// seen exactly once.
func TestConcurrentAtomics(t *testing.T) {
	ctx := openOrSkip(t)
	if ctx.Attr().AtomicCap == verbs.AtomicNone {
		t.Skip("device without atomics")
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	const workers, iters = 4, 300
	target := mmapBuf(t, 4096)
	local := mmapBuf(t, workers*iters*8)
	tmr, err := pd.RegMR(target, verbs.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tmr.Dereg() })
	lmr, err := pd.RegMR(local, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lmr.Dereg() })
	type conn struct {
		cq     verbs.CQ
		qp, rq verbs.QP
	}
	conns := make([]conn, workers)
	for i := range conns {
		c := &conns[i]
		if c.cq, err = ctx.CreateCQ(64); err != nil {
			t.Fatal(err)
		}
		attr := verbs.QPAttr{SendCQ: c.cq, RecvCQ: c.cq, MaxSendWR: 16, MaxRecvWR: 1}
		if c.qp, err = pd.CreateQP(attr); err != nil {
			t.Fatal(err)
		}
		if c.rq, err = pd.CreateQP(attr); err != nil {
			t.Fatal(err)
		}
		if err := c.qp.Connect(c.rq.Endpoint()); err != nil {
			t.Fatal(err)
		}
		if err := c.rq.Connect(c.qp.Endpoint()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.qp.Close(); c.rq.Close(); c.cq.Close() })
	}
	errs := make(chan error, workers)
	for w := range conns {
		go func() {
			c := conns[w]
			wc := make([]verbs.WC, 1)
			for i := range iters {
				off := uint64(8 * (w*iters + i))
				wr := verbs.SendWR{ID: off, Op: verbs.OpFetchAdd, Flags: verbs.Signaled,
					SGL:        []verbs.SGE{{Addr: lmr.Addr() + off, Length: 8, LKey: lmr.LKey()}},
					RemoteAddr: tmr.Addr() + 8, RKey: tmr.RKey(), CompareAdd: 1}
				if _, err := c.qp.PostSend(&wr); err != nil {
					errs <- err
					return
				}
				if n, err := c.cq.Wait(wc, time.Now().Add(waitFor)); n != 1 || err != nil || wc[0].Status != verbs.StatusSuccess || wc[0].ID != off {
					errs <- fmt.Errorf("worker %d op %d: %d %v %+v", w, i, n, err, wc[0])
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := binary.NativeEndian.Uint64(target[8:]); got != workers*iters {
		t.Fatalf("counter %d, want %d", got, workers*iters)
	}
	seen := make([]bool, workers*iters)
	for i := range seen {
		old := binary.NativeEndian.Uint64(local[8*i:])
		if old >= uint64(len(seen)) || seen[old] {
			t.Fatalf("old value %d seen twice or out of range", old)
		}
		seen[old] = true
	}
}
