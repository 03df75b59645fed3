package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// accPost posts one accumulate from the origin's memory at off (n bytes)
// to the target's address and waits for its completion.
func accPost(t *testing.T, qp verbs.QP, cq verbs.CQ, sgl []verbs.SGE, addr uint64, rkey uint32, acc verbs.Accumulate) verbs.WC {
	t.Helper()
	wr := verbs.SendWR{ID: 7, Op: verbs.OpAccumulate, Flags: verbs.Signaled, SGL: sgl, RemoteAddr: addr, RKey: rkey, Acc: acc}
	if _, err := qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	return waitOne(t, cq)
}

// TestAccumulateSizes: int64 sums and fetching sums of sizes around the
// pieces the responder applies (the stream's buffer, resumeMin, the fetch
// limit), over a connection and over loopback, give exact results and old
// values, and leave the bytes around the target untouched.
func TestAccumulateSizes(t *testing.T) {
	const size = 4 << 20
	a, b := connected(t, size)
	ls, la, _ := loopPair(t)
	_ = ls
	type pair struct {
		name   string
		origin *side
		qp     verbs.QP
		cq     verbs.CQ
		target *side
		obase  int // origin bytes start here (loopback: the second half)
	}
	lsz := len(ls.buf)
	pairs := []pair{{"peer", a, a.qp, a.sendCQ, b, 0}, {"loopback", ls, la, ls.sendCQ, ls, lsz / 2}}
	for _, p := range pairs {
		limit := len(p.target.buf) - p.obase - 64
		if p.obase > 0 {
			limit = p.obase - 64
		}
		for _, n := range []int{8, 24, resumeMin - 8, resumeMin, resumeMin + 8, 64<<10 - 8, 64<<10 + 8, 1<<20 + 24, 3 << 20} {
			if n > limit {
				continue
			}
			for _, fetch := range []bool{false, true} {
				if fetch && n > maxFetchAcc {
					continue
				}
				t.Run(fmt.Sprintf("%s/%d/fetch=%v", p.name, n, fetch), func(t *testing.T) {
					tgt := p.target.buf[8 : 8+n+8] // a guard word either side
					for i := range tgt {
						tgt[i] = 0
					}
					for i := 0; i < n; i += 8 {
						binary.LittleEndian.PutUint64(tgt[i:], uint64(i/8)*3)
					}
					orig := p.origin.buf[p.obase : p.obase+n]
					for i := 0; i < n; i += 8 {
						binary.LittleEndian.PutUint64(orig[i:], uint64(i/8)+1<<40)
					}
					wc := accPost(t, p.qp, p.cq, p.origin.sge(p.obase, n), p.target.mr.Addr()+8, p.target.mr.RKey(),
						verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64, Fetch: fetch})
					if wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpAccumulate {
						t.Fatalf("completion %+v", wc)
					}
					for i := 0; i < n; i += 8 {
						k := uint64(i / 8)
						if got := binary.LittleEndian.Uint64(tgt[i:]); got != 3*k+k+1<<40 {
							t.Fatalf("element %d = %d, want %d", k, got, 3*k+k+1<<40)
						}
						if fetch {
							if got := binary.LittleEndian.Uint64(orig[i:]); got != 3*k {
								t.Fatalf("old value %d = %d, want %d", k, got, 3*k)
							}
						}
					}
					if !bytes.Equal(p.target.buf[:8], make([]byte, 8)) || !bytes.Equal(tgt[n:], make([]byte, 8)) {
						t.Fatal("memory beside the target changed")
					}
				})
			}
		}
	}
}

// TestAccumulateSmallElements: int8 and float32 accumulates that begin and
// end mid-word change exactly their elements.
func TestAccumulateSmallElements(t *testing.T) {
	a, b := connected(t, 256)
	for i := range b.buf {
		b.buf[i] = byte(i)
	}
	for i := range 13 {
		a.buf[i] = byte(200 + i)
	}
	if wc := accPost(t, a.qp, a.sendCQ, a.sge(0, 13), b.mr.Addr()+3, b.mr.RKey(), verbs.Accumulate{Op: verbs.AccMax, Type: verbs.Uint8, Fetch: true}); wc.Status != verbs.StatusSuccess {
		t.Fatalf("%+v", wc)
	}
	for i := range b.buf {
		want := byte(i)
		if i >= 3 && i < 16 {
			want = byte(200 + i - 3)
			if a.buf[i-3] != byte(i) {
				t.Fatalf("old value %d = %d", i-3, a.buf[i-3])
			}
		}
		if b.buf[i] != want {
			t.Fatalf("byte %d = %d, want %d", i, b.buf[i], want)
		}
	}
	// NoOp fetch: an atomic read, no operand sent.
	clear(a.buf[:16])
	if wc := accPost(t, a.qp, a.sendCQ, a.sge(0, 6), b.mr.Addr()+2, b.mr.RKey(), verbs.Accumulate{Op: verbs.AccNoOp, Type: verbs.Int16, Fetch: true}); wc.Status != verbs.StatusSuccess {
		t.Fatalf("%+v", wc)
	}
	if !bytes.Equal(a.buf[:6], b.buf[2:8]) {
		t.Fatalf("NoOp read %v, target %v", a.buf[:6], b.buf[2:8])
	}
}

// TestAccumulateConcurrentWithAtomics: two origins (one of them the
// target's own loopback pair) accumulate into the same words, while a
// third runs fetch-adds and compare-and-swap increments on them: every
// update counts.
func TestAccumulateConcurrentWithAtomics(t *testing.T) {
	const k, words = 200, 16
	a, b := connected(t, 4096)
	c, d := connected(t, 4096)
	_ = d
	// Target: b's memory; origins a (peer), c (another peer, atomics).
	// The third origin is b's own loopback pair.
	lb, err := b.pd.CreateQP(verbs.QPAttr{SendCQ: b.sendCQ, RecvCQ: b.recvCQ, MaxSendWR: 64, MaxRecvWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	lb2, _ := b.pd.CreateQP(verbs.QPAttr{SendCQ: b.sendCQ, RecvCQ: b.recvCQ, MaxSendWR: 64, MaxRecvWR: 16})
	errc := make(chan error, 1)
	go func() { errc <- lb2.Connect(lb.Endpoint()) }()
	if err := lb.Connect(lb2.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// c's queue pair reaches b: connect a fresh one of c's to a fresh one of b's.
	cq2, _ := c.pd.CreateQP(verbs.QPAttr{SendCQ: c.sendCQ, RecvCQ: c.recvCQ, MaxSendWR: 64, MaxRecvWR: 16})
	bq2, _ := b.pd.CreateQP(verbs.QPAttr{SendCQ: b.recvCQ, RecvCQ: b.recvCQ, MaxSendWR: 64, MaxRecvWR: 16})
	go func() { errc <- bq2.Connect(cq2.Endpoint()) }()
	if err := cq2.Connect(bq2.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	clear(b.buf)
	ones := func(s *side, off int) {
		for i := range words {
			binary.LittleEndian.PutUint64(s.buf[off+8*i:], 1)
		}
	}
	ones(a, 0)
	ones(b, 2048)
	var wg sync.WaitGroup
	fails := make(chan error, 3)
	accs := func(qp verbs.QP, cq verbs.CQ, s *side, off int) {
		defer wg.Done()
		for range k {
			wr := verbs.SendWR{ID: 1, Op: verbs.OpAccumulate, Flags: verbs.Signaled, SGL: s.sge(off, 8*words), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
				Acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Uint64}}
			if _, err := qp.PostSend(&wr); err != nil {
				fails <- err
				return
			}
			if wc := waitOne(t, cq); wc.Status != verbs.StatusSuccess {
				fails <- fmt.Errorf("%+v", wc)
				return
			}
		}
	}
	wg.Add(3)
	go accs(a.qp, a.sendCQ, a, 0)
	go accs(lb, b.sendCQ, b, 2048)
	go func() { // fetch-add on even words, compare-and-swap increments on odd ones
		defer wg.Done()
		for range k {
			for i := range words {
				wr := verbs.SendWR{ID: 2, Op: verbs.OpFetchAdd, Flags: verbs.Signaled, SGL: c.sge(8*i, 8), RemoteAddr: b.mr.Addr() + uint64(8*i), RKey: b.mr.RKey(), CompareAdd: 1}
				if i%2 == 1 {
					wr.Op, wr.CompareAdd, wr.Swap = verbs.OpCompareSwap, 0, 1
				}
				for {
					if _, err := cq2.PostSend(&wr); err != nil {
						fails <- err
						return
					}
					if wc := waitOne(t, c.sendCQ); wc.Status != verbs.StatusSuccess {
						fails <- fmt.Errorf("%+v", wc)
						return
					}
					old := binary.LittleEndian.Uint64(c.buf[8*i:])
					if wr.Op == verbs.OpFetchAdd || old == wr.CompareAdd {
						break
					}
					wr.CompareAdd, wr.Swap = old, old+1
				}
			}
		}
	}()
	wg.Wait()
	close(fails)
	for err := range fails {
		t.Fatal(err)
	}
	b.ctx.(verbs.MemorySyncer).SyncMemory()
	for i := range words {
		if got := binary.LittleEndian.Uint64(b.buf[8*i:]); got != 3*k {
			t.Fatalf("word %d = %d, want %d", i, got, 3*k)
		}
	}
}

// TestAccumulateRefused: a bad key, words outside the region or a region
// without remote atomic access complete with a remote access error and
// leave memory untouched; misaligned or oversized requests are refused at
// post.
func TestAccumulateRefused(t *testing.T) {
	sum := verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int32}
	cases := []struct {
		name string
		wr   func(a, b *side, edge verbs.MR) verbs.SendWR
	}{
		{"wrong rkey", func(a, b *side, edge verbs.MR) verbs.SendWR {
			return verbs.SendWR{SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x10000}
		}},
		{"out of bounds", func(a, b *side, edge verbs.MR) verbs.SendWR {
			return verbs.SendWR{SGL: a.sge(0, 16), RemoteAddr: b.mr.Addr() + 120, RKey: b.mr.RKey()}
		}},
		{"word outside region", func(a, b *side, edge verbs.MR) verbs.SendWR {
			// edge is b.buf[8:60]: its last int32 is inside, its word is not.
			return verbs.SendWR{SGL: a.sge(0, 4), RemoteAddr: edge.Addr() + 48, RKey: edge.RKey()}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := connected(t, 128)
			edge, err := b.pd.RegMR(b.buf[8:60], verbs.AccessAll)
			if err != nil {
				t.Fatal(err)
			}
			for i := range a.buf {
				a.buf[i] = 0xAA
			}
			wr := c.wr(a, b, edge)
			wr.ID, wr.Op, wr.Acc = 1, verbs.OpAccumulate, sum
			if _, err := a.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			wc := waitOne(t, a.sendCQ)
			if wc.ID != 1 || !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
				t.Fatalf("got %+v, want remote access error on wr 1", wc)
			}
			if !bytes.Equal(b.buf, make([]byte, 128)) {
				t.Fatalf("target memory touched: %v", b.buf)
			}
		})
	}
	t.Run("no atomic access", func(t *testing.T) {
		a, b := connected(t, 64)
		pg, err := b.pd.RegMR(b.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		wc := accPost(t, a.qp, a.sendCQ, a.sge(0, 8), pg.Addr(), pg.RKey(), sum)
		if !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
			t.Fatalf("got %+v", wc)
		}
	})
	t.Run("at post", func(t *testing.T) {
		a, b := connected(t, 1<<17)
		for _, wr := range []verbs.SendWR{
			{SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr() + 2, Acc: sum},                                                  // misaligned
			{SGL: a.sge(0, 6), RemoteAddr: b.mr.Addr(), Acc: sum},                                                      // not whole elements
			{SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), Acc: verbs.Accumulate{Op: verbs.AccBXor, Type: verbs.Float64}}, // no such op
			{SGL: a.sge(0, maxFetchAcc+8), RemoteAddr: b.mr.Addr(), Acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64, Fetch: true}},
		} {
			wr.Op, wr.RKey = verbs.OpAccumulate, b.mr.RKey()
			if _, err := a.qp.PostSend(&wr); !errors.Is(err, verbs.ErrInvalid) {
				t.Fatalf("%+v: %v, want ErrInvalid", wr.Acc, err)
			}
		}
	})
}
