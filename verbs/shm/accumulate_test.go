package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/accop"
)

// target is one of a side's regions: memfd memory (mapped by the origin)
// or created Go memory (reached through the owner's socket).
type target struct {
	name string
	mr   verbs.MR
	buf  []byte
}

func targets(s *side) []target {
	return []target{{"memfd", s.mr, s.buf}, {"created", s.goMR, s.goBuf}}
}

// reference applies an accumulate to a private copy of before, at off:
// what the target must hold afterwards, and the old values a fetch returns.
func reference(before []byte, off int, operand []byte, a verbs.Accumulate) (after, old []byte) {
	words := make([]uint64, (len(before)+7)/8)
	after = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(before))
	copy(after, before)
	old = make([]byte, len(operand))
	accop.Apply(unsafe.Pointer(&after[off]), len(operand), operand, old, a.Op, a.Type)
	return after, old
}

// Exact results on both kinds of memory, through process_vm (where
// created memory's accumulates still go to the owner) and the socket.
func TestAccumulateResults(t *testing.T) {
	testAccumulateResults(t)
}

func TestAccumulateResultsNoVM(t *testing.T) {
	t.Setenv(config.EnvShmCMA, "off")
	testAccumulateResults(t)
}

func testAccumulateResults(t *testing.T) {
	a, b := connected(t, 1<<16)
	if at := a.ctx.Attr(); !at.Accumulate || at.MaxFetchAccumulate != maxFetchAcc {
		t.Fatalf("device attributes %+v: want Accumulate and MaxFetchAccumulate %d", at, maxFetchAcc)
	}
	for _, tg := range targets(b) {
		// Hand-checked: int64 sums with their old values.
		for i := range 16 {
			binary.LittleEndian.PutUint64(tg.buf[8*i:], uint64(i))
			binary.LittleEndian.PutUint64(a.buf[8*i:], uint64(1000+i))
		}
		wc := post(t, a, &verbs.SendWR{Op: verbs.OpAccumulate, SGL: sge(a.mr, 0, 128), RemoteAddr: tg.mr.Addr(), RKey: tg.mr.RKey(),
			Acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64, Fetch: true}})
		if wc.Status != verbs.StatusSuccess || wc.Op != verbs.OpAccumulate || wc.ByteLen != 128 {
			t.Fatalf("%s: %+v", tg.name, wc)
		}
		for i := range 16 {
			if got, old := binary.LittleEndian.Uint64(tg.buf[8*i:]), binary.LittleEndian.Uint64(a.buf[8*i:]); got != uint64(1000+2*i) || old != uint64(i) {
				t.Fatalf("%s: word %d = %d old %d, want %d old %d", tg.name, i, got, old, 1000+2*i, i)
			}
		}

		// Ops x types, at element-aligned but not word-aligned places, an
		// odd number of elements, in two SGEs, with and without fetch.
		rng := rand.New(rand.NewPCG(1, 2))
		types := []verbs.ElemType{verbs.Int8, verbs.Uint16, verbs.Int32, verbs.Uint32, verbs.Int64, verbs.Float32, verbs.Float64}
		ops := []verbs.AccOp{verbs.AccSum, verbs.AccProd, verbs.AccMin, verbs.AccMax, verbs.AccBAnd, verbs.AccBOr, verbs.AccBXor, verbs.AccReplace, verbs.AccNoOp}
		for _, ty := range types {
			for _, op := range ops {
				if !op.Valid(ty) {
					continue
				}
				for _, fetch := range []bool{false, true} {
					acc := verbs.Accumulate{Op: op, Type: ty, Fetch: fetch}
					es := ty.Size()
					off := 4096 + es%8    // not word-aligned unless 8-byte elements
					n1, n2 := 7*es, 26*es // odd element count in the first SGE
					region := tg.buf[4096 : 4096+512]
					for i := range region {
						region[i] = byte(rng.Uint32())
					}
					operand := a.buf[8192 : 8192+n1+n2]
					for i := range operand {
						operand[i] = byte(rng.Uint32())
					}
					before := bytes.Clone(region)
					after, old := reference(before, off-4096, bytes.Clone(operand), acc)
					sgl := []verbs.SGE{sge(a.mr, 8192, n1)[0], sge(a.mr, 8192+n1, n2)[0]}
					wc := post(t, a, &verbs.SendWR{Op: verbs.OpAccumulate, SGL: sgl, RemoteAddr: tg.mr.Addr() + uint64(off), RKey: tg.mr.RKey(), Acc: acc})
					if wc.Status != verbs.StatusSuccess {
						t.Fatalf("%s %+v: %v", tg.name, acc, wc.Err())
					}
					if !bytes.Equal(region, after) {
						t.Fatalf("%s %+v: target\n%x\nwant\n%x", tg.name, acc, region, after)
					}
					if fetch && !bytes.Equal(operand, old) {
						t.Fatalf("%s %+v: old values\n%x\nwant\n%x", tg.name, acc, operand, old)
					}
				}
			}
		}
	}
}

// Operands of several MiB, odd sizes and places, one or two SGEs: the
// socket responder takes them in pieces.
func TestAccumulateLarge(t *testing.T) {
	t.Run("process_vm", testAccumulateLarge)
	t.Run("socket", func(t *testing.T) {
		t.Setenv(config.EnvShmCMA, "off")
		testAccumulateLarge(t)
	})
}

func testAccumulateLarge(t *testing.T) {
	const size = 7 << 20
	a, b := connected(t, size)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tg := range targets(b) {
		for _, c := range []struct {
			acc      verbs.Accumulate
			off, n   int
			split    int // second SGE from here, 0: one SGE
			fetchMax bool
		}{
			{acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64}, off: 8, n: 6<<20 + 40},
			{acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Uint8}, off: 3, n: 5<<20 + 7, split: 3<<20 + 1},
			{acc: verbs.Accumulate{Op: verbs.AccMax, Type: verbs.Float32}, off: 4, n: 4<<20 + 4},
			{acc: verbs.Accumulate{Op: verbs.AccBXor, Type: verbs.Int16, Fetch: true}, off: 6, n: maxFetchAcc, split: 1002},
		} {
			region := tg.buf[:size]
			for i := range region {
				region[i] = byte(rng.Uint32())
			}
			operand := a.buf[:c.n]
			for i := range operand {
				operand[i] = byte(rng.Uint32())
			}
			after, old := reference(bytes.Clone(region), c.off, bytes.Clone(operand), c.acc)
			sgl := sge(a.mr, 0, c.n)
			if c.split > 0 {
				sgl = []verbs.SGE{sge(a.mr, 0, c.split)[0], sge(a.mr, c.split, c.n-c.split)[0]}
			}
			wc := post(t, a, &verbs.SendWR{Op: verbs.OpAccumulate, SGL: sgl, RemoteAddr: tg.mr.Addr() + uint64(c.off), RKey: tg.mr.RKey(), Acc: c.acc})
			if wc.Status != verbs.StatusSuccess || wc.ByteLen != uint32(c.n) {
				t.Fatalf("%s %+v: %+v %v", tg.name, c.acc, wc, wc.Err())
			}
			if !bytes.Equal(region, after) {
				t.Fatalf("%s %+v of %d bytes at %d: target differs", tg.name, c.acc, c.n, c.off)
			}
			if c.acc.Fetch && !bytes.Equal(operand, old) {
				t.Fatalf("%s %+v: old values differ", tg.name, c.acc)
			}
		}
	}
}

// Refusals: the NIC's checks complete with a remote access error and leave
// the target untouched; what the poster can check fails at post.
func TestAccumulateRefused(t *testing.T) {
	t.Run("process_vm", testAccumulateRefused)
	t.Run("socket", func(t *testing.T) {
		t.Setenv(config.EnvShmCMA, "off")
		testAccumulateRefused(t)
	})
}

func testAccumulateRefused(t *testing.T) {
	sum := verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int32}
	for _, kind := range []string{"memfd", "created"} {
		for _, c := range []struct {
			name string
			wr   func(a *side, tg target, edge, noAtomic verbs.MR) verbs.SendWR
		}{
			{"wrong rkey", func(a *side, tg target, edge, noAtomic verbs.MR) verbs.SendWR {
				return verbs.SendWR{SGL: sge(a.mr, 0, 8), RemoteAddr: tg.mr.Addr(), RKey: tg.mr.RKey() ^ 0x10000}
			}},
			{"out of bounds", func(a *side, tg target, edge, noAtomic verbs.MR) verbs.SendWR {
				return verbs.SendWR{SGL: sge(a.mr, 0, 16), RemoteAddr: tg.mr.Addr() + 120, RKey: tg.mr.RKey()}
			}},
			{"word outside region", func(a *side, tg target, edge, noAtomic verbs.MR) verbs.SendWR {
				// edge is buf[8:60]: its last int32 is inside, its word is not.
				return verbs.SendWR{SGL: sge(a.mr, 0, 4), RemoteAddr: edge.Addr() + 48, RKey: edge.RKey()}
			}},
			{"no atomic access", func(a *side, tg target, edge, noAtomic verbs.MR) verbs.SendWR {
				return verbs.SendWR{SGL: sge(a.mr, 0, 8), RemoteAddr: noAtomic.Addr(), RKey: noAtomic.RKey()}
			}},
			{"deregistered", func(a *side, tg target, edge, noAtomic verbs.MR) verbs.SendWR {
				if err := edge.Dereg(); err != nil {
					panic(err)
				}
				return verbs.SendWR{SGL: sge(a.mr, 0, 8), RemoteAddr: edge.Addr() + 8, RKey: edge.RKey()}
			}},
		} {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				a, b := connected(t, 128)
				tg := targets(b)[0]
				if kind == "created" {
					tg = targets(b)[1]
				}
				edge, err := b.pd.RegMR(tg.buf[8:60], verbs.AccessAll)
				if err != nil {
					t.Fatal(err)
				}
				noAtomic, err := b.pd.RegMR(tg.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 64 {
					a.buf[i] = 0xAA
				}
				wr := c.wr(a, tg, edge, noAtomic)
				wr.ID, wr.Op, wr.Acc = 1, verbs.OpAccumulate, sum
				wc := post(t, a, &wr)
				if wc.ID != 1 || !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
					t.Fatalf("got %+v (%v), want a remote access error on wr 1", wc, wc.Err())
				}
				if !bytes.Equal(tg.buf, make([]byte, 128)) {
					t.Fatalf("target memory touched: %v", tg.buf)
				}
				if _, err := a.qp.PostSend(&verbs.SendWR{Op: verbs.OpWrite}); !errors.Is(err, verbs.ErrQPState) {
					t.Fatalf("post after a refusal: %v", err)
				}
			})
		}
	}
	t.Run("at post", func(t *testing.T) {
		a, b := connected(t, 1<<17)
		for _, wr := range []verbs.SendWR{
			{SGL: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr() + 2, Acc: sum},                                                  // misaligned
			{SGL: sge(a.mr, 0, 6), RemoteAddr: b.mr.Addr(), Acc: sum},                                                      // not whole elements
			{SGL: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), Acc: verbs.Accumulate{Op: verbs.AccBXor, Type: verbs.Float64}}, // no such op
			{SGL: sge(a.mr, 0, 8), RemoteAddr: b.mr.Addr(), Acc: verbs.Accumulate{Op: verbs.AccSum}},                       // no type
			{SGL: sge(a.mr, 0, maxFetchAcc+8), RemoteAddr: b.mr.Addr(), Acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64, Fetch: true}},
		} {
			wr.Op, wr.RKey = verbs.OpAccumulate, b.mr.RKey()
			if _, err := a.qp.PostSend(&wr); !errors.Is(err, verbs.ErrInvalid) {
				t.Fatalf("%+v: %v, want ErrInvalid", wr.Acc, err)
			}
		}
		// A fetch into memory without local write access.
		ro, err := a.pd.RegMR(a.buf[:64], verbs.Access(0))
		if err != nil {
			t.Fatal(err)
		}
		wr := verbs.SendWR{Op: verbs.OpAccumulate, SGL: sge(ro, 0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64, Fetch: true}}
		if _, err := a.qp.PostSend(&wr); err == nil {
			t.Fatal("a fetch into read-only local memory was taken")
		}
	})
}

// The responder's own checks, for a peer that skips the poster's:
// misaligned elements and unknown reductions are a remote operation error.
func TestAccumulateResponderRefuses(t *testing.T) {
	t.Setenv(config.EnvShmCMA, "off")
	a, b := connected(t, 4096)
	q := a.qp.(*qp)
	for _, h := range []msg{
		{kind: mAcc, addr: b.goMR.Addr() + 2, rkey: b.goMR.RKey(), arg0: accArgs(verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int32}), arg2: 8},
		{kind: mAcc, addr: b.goMR.Addr(), rkey: b.goMR.RKey(), arg0: accArgs(verbs.Accumulate{Op: verbs.AccBOr, Type: verbs.Float32}), arg2: 8},
		{kind: mAcc, addr: b.goMR.Addr(), rkey: b.goMR.RKey(), arg0: accArgs(verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64}), arg1: 1, arg2: maxFetchAcc + 8},
	} {
		payload := make([]byte, h.arg2)
		for i := range payload {
			payload[i] = 1
		}
		q.sendMu.Lock()
		_, st := q.request(&h, [][]byte{payload}, [][]byte{make([]byte, h.arg2)})
		q.sendMu.Unlock()
		if st != verbs.StatusRemoteOp {
			t.Fatalf("%+v: status %v, want %v", h, st, verbs.StatusRemoteOp)
		}
		if !bytes.Equal(b.goBuf, make([]byte, 4096)) {
			t.Fatalf("%+v: target memory touched", h)
		}
	}
	// The connection still works: the operand was consumed.
	binary.LittleEndian.PutUint64(a.buf, 5)
	if wc := post(t, a, &verbs.SendWR{Op: verbs.OpAccumulate, SGL: sge(a.mr, 0, 8), RemoteAddr: b.goMR.Addr(), RKey: b.goMR.RKey(), Acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64}}); wc.Status != verbs.StatusSuccess {
		t.Fatal(wc.Err())
	}
	if got := binary.LittleEndian.Uint64(b.goBuf); got != 5 {
		t.Fatalf("word %d, want 5", got)
	}
}

// accWordsN is the words the processes' accumulates cover.
const accWordsN = 64

// childAcc connects to the target in its environment and, n times, adds 1
// to each of accWordsN int64 words with one bulk accumulate (every other
// one fetching) and 1 to one of them with a fetch-and-add.
func childAcc(t *testing.T) {
	env := strings.Fields(os.Getenv("RMAGO_TEST_SHM_TARGET"))
	rkey, _ := strconv.ParseUint(env[1], 10, 32)
	addr, _ := strconv.ParseUint(env[2], 10, 64)
	n, _ := strconv.Atoi(env[3])
	s := newSide(t, 4096)
	if err := s.ctx.(verbs.ConnManager).Dial(s.qp, verbs.Endpoint{Addr: env[0]}, 1); err != nil {
		t.Fatal(err)
	}
	if err := accHammer(s, uint32(rkey), addr, n); err != nil {
		t.Fatal(err)
	}
}

func accHammer(s *side, rkey uint32, addr uint64, n int) error {
	var wc [1]verbs.WC
	run := func(wr *verbs.SendWR) error {
		wr.Flags = verbs.Signaled
		if _, err := s.qp.PostSend(wr); err != nil {
			return err
		}
		if k, err := s.sendCQ.Wait(wc[:], time.Now().Add(testTimeout)); err != nil || k != 1 || wc[0].Status != verbs.StatusSuccess {
			return fmt.Errorf("%v: completion %d %v %v", wr.Op, k, err, wc[0].Err())
		}
		return nil
	}
	for i := range n {
		for w := range accWordsN {
			binary.LittleEndian.PutUint64(s.buf[8*w:], 1)
		}
		acc := verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64, Fetch: i%2 == 1}
		if err := run(&verbs.SendWR{Op: verbs.OpAccumulate, SGL: sge(s.mr, 0, 8*accWordsN), RemoteAddr: addr, RKey: rkey, Acc: acc}); err != nil {
			return err
		}
		if err := run(&verbs.SendWR{Op: verbs.OpFetchAdd, SGL: sge(s.mr, 1024, 8), RemoteAddr: addr + uint64(8*(i%accWordsN)), RKey: rkey, CompareAdd: 1}); err != nil {
			return err
		}
	}
	return nil
}

// Two processes and this one (through a loopback pair) run bulk
// accumulates and fetch-and-adds on the same words at once, on memfd
// memory and on created memory: the sums are exact.
func TestProcessesConcurrentAccumulates(t *testing.T) {
	t.Run("process_vm", testProcessesConcurrentAccumulates)
	t.Run("socket", func(t *testing.T) {
		t.Setenv(config.EnvShmCMA, "off")
		testProcessesConcurrentAccumulates(t)
	})
}

func testProcessesConcurrentAccumulates(t *testing.T) {
	const n = 256 // a multiple of accWordsN: every word gets n/accWordsN fetch-adds from each
	for _, kind := range []string{"memfd", "created"} {
		t.Run(kind, func(t *testing.T) {
			owner := newSide(t, 4096)
			var mu sync.Mutex
			var extra []verbs.QP
			cm := owner.ctx.(verbs.ConnManager)
			cm.Accept(func(req verbs.ConnRequest) {
				q, err := owner.pd.CreateQP(verbs.QPAttr{SendCQ: owner.sendCQ, RecvCQ: owner.recvCQ, MaxSendWR: 64, MaxRecvWR: 4})
				if err != nil {
					req.Refuse(err)
					return
				}
				mu.Lock()
				extra = append(extra, q)
				mu.Unlock()
				req.Accept(q)
			})
			tg := targets(owner)[0]
			if kind == "created" {
				tg = targets(owner)[1]
			}
			addr := tg.mr.Addr() + 512
			env := fmt.Sprintf("%s %d %d %d", cm.ListenEndpoint().Addr, tg.mr.RKey(), addr, n)
			var cmds []*exec.Cmd
			for range 2 {
				cmd := exec.Command(os.Args[0], "-test.run", "^TestShmChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), childEnv+"=acc", "RMAGO_TEST_SHM_TARGET="+env)
				cmd.Stderr, cmd.Stdout = os.Stderr, os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds = append(cmds, cmd)
			}
			// This process joins in through a loopback pair, its operand
			// and results in the memfd region's upper half.
			lq, err := owner.pd.CreateQP(verbs.QPAttr{SendCQ: owner.sendCQ, RecvCQ: owner.recvCQ, MaxSendWR: 64, MaxRecvWR: 4})
			if err != nil {
				t.Fatal(err)
			}
			if err := lq.Connect(owner.qp.Endpoint()); err != nil {
				t.Fatal(err)
			}
			loop := &side{ctx: owner.ctx, pd: owner.pd, buf: owner.buf[2048:], mr: subMR{owner.mr, 2048}, qp: lq, sendCQ: owner.sendCQ}
			if err := accHammer(loop, tg.mr.RKey(), addr, n); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("client: %v", err)
				}
			}
			owner.ctx.(verbs.MemorySyncer).SyncMemory()
			want := uint64(3 * (n + n/accWordsN))
			for w := range accWordsN {
				if got := binary.LittleEndian.Uint64(tg.buf[512+8*w:]); got != want {
					t.Fatalf("word %d = %d, want %d", w, got, want)
				}
			}
		})
	}
}

// A loopback pair applies accumulates to this process's memory directly,
// up to the regions' last byte, on both kinds of memory.
func TestAccumulateLoopback(t *testing.T) {
	const size = 1 << 12
	s := newSide(t, size)
	lq, err := s.pd.CreateQP(verbs.QPAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, MaxSendWR: 64, MaxRecvWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := lq.Connect(s.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	// The operand and old values live in the memfd region's first half.
	loop := &side{ctx: s.ctx, pd: s.pd, buf: s.buf, mr: s.mr, qp: lq, sendCQ: s.sendCQ}
	for _, tg := range targets(s) {
		off, n := size-1000, 1000 // the last 500 int16s, in two SGEs
		region := tg.buf[off:]
		for i := range region {
			region[i] = byte(i * 3)
		}
		operand := loop.buf[:n]
		for i := range operand {
			operand[i] = byte(i*5 + 1)
		}
		acc := verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int16, Fetch: true}
		after, old := reference(bytes.Clone(tg.buf), off, bytes.Clone(operand), acc)
		sgl := []verbs.SGE{sge(s.mr, 0, 600)[0], sge(s.mr, 600, 400)[0]}
		if wc := post(t, loop, &verbs.SendWR{Op: verbs.OpAccumulate, SGL: sgl, RemoteAddr: tg.mr.Addr() + uint64(off), RKey: tg.mr.RKey(), Acc: acc}); wc.Status != verbs.StatusSuccess {
			t.Fatalf("%s: %v", tg.name, wc.Err())
		}
		if !bytes.Equal(region, after[off:]) || !bytes.Equal(operand, old) {
			t.Fatalf("%s: target or old values differ", tg.name)
		}
	}
}
