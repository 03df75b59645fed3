package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// TestGuardedWrite: a chain of guard atomics and a guarded write. The
// write lands exactly when every guard held (a compare-and-swap that
// swapped, a fetch-and-add whose old value has none of the mask's bits),
// completes either way, and the atomics' old values come back. The
// unguarded write after each chain always lands.
func TestGuardedWrite(t *testing.T) {
	a, b := connected(t, 4096)
	const word, word2, data, after = 0, 8, 256, 512
	cases := []struct {
		name        string
		w, w2       uint64 // the words' values before the chain
		cas         bool   // a compare-and-swap guard (0 -> 7) on word
		faa         bool   // a fetch-and-add guard (+1, mask 0xf0) on word2
		lands       bool
		wAfter, w2A uint64
	}{
		{"cas swaps", 0, 0, true, false, true, 7, 0},
		{"cas fails", 3, 0, true, false, false, 3, 0},
		{"faa clear", 0, 0x100, false, true, true, 0, 0x101},
		{"faa set", 0, 0x10, false, true, false, 0, 0x11},
		{"both hold", 0, 1, true, true, true, 7, 2},
		{"cas fails, faa holds", 5, 1, true, true, false, 5, 2},
		{"cas swaps, faa fails", 0, 0x20, true, true, false, 7, 0x21},
	}
	for i, c := range cases {
		binary.LittleEndian.PutUint64(b.buf[word:], c.w)
		binary.LittleEndian.PutUint64(b.buf[word2:], c.w2)
		clear(b.buf[data : data+64])
		clear(b.buf[after : after+8])
		stamp := bytes.Repeat([]byte{byte(i + 1)}, 64)
		copy(a.buf[data:], stamp)
		copy(a.buf[after:], stamp[:8])
		var chain []verbs.SendWR
		flag := verbs.GuardSet
		if c.cas {
			chain = append(chain, verbs.SendWR{ID: 1, Op: verbs.OpCompareSwap, Flags: flag, SGL: a.sge(64, 8),
				RemoteAddr: b.mr.Addr() + word, RKey: b.mr.RKey(), CompareAdd: 0, Swap: 7})
			flag = verbs.GuardAnd
		}
		if c.faa {
			chain = append(chain, verbs.SendWR{ID: 2, Op: verbs.OpFetchAdd, Flags: flag, SGL: a.sge(72, 8),
				RemoteAddr: b.mr.Addr() + word2, RKey: b.mr.RKey(), CompareAdd: 1, GuardMask: 0xf0})
		}
		chain = append(chain,
			verbs.SendWR{ID: 3, Op: verbs.OpWrite, Flags: verbs.Guarded, SGL: a.sge(data, 64), RemoteAddr: b.mr.Addr() + data, RKey: b.mr.RKey()},
			verbs.SendWR{ID: 4, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(after, 8), RemoteAddr: b.mr.Addr() + after, RKey: b.mr.RKey()})
		for j := range chain[:len(chain)-1] {
			chain[j].Next = &chain[j+1]
		}
		if _, err := a.qp.PostSend(&chain[0]); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if wc := waitOne(t, a.sendCQ); wc.ID != 4 || wc.Status != verbs.StatusSuccess {
			t.Fatalf("%s: %+v (%v)", c.name, wc, a.qp.(verbs.ErrorReporter).Err())
		}
		landed := bytes.Equal(b.buf[data:data+64], stamp)
		if landed != c.lands || !landed && !bytes.Equal(b.buf[data:data+64], make([]byte, 64)) {
			t.Errorf("%s: guarded write landed %v, want %v (%x)", c.name, landed, c.lands, b.buf[data:data+8])
		}
		if !bytes.Equal(b.buf[after:after+8], stamp[:8]) {
			t.Errorf("%s: the unguarded write after the chain did not land", c.name)
		}
		if got := binary.LittleEndian.Uint64(b.buf[word:]); got != c.wAfter {
			t.Errorf("%s: word %#x, want %#x", c.name, got, c.wAfter)
		}
		if got := binary.LittleEndian.Uint64(b.buf[word2:]); got != c.w2A {
			t.Errorf("%s: word2 %#x, want %#x", c.name, got, c.w2A)
		}
		if c.cas {
			if old := binary.LittleEndian.Uint64(a.buf[64:]); old != c.w {
				t.Errorf("%s: compare-and-swap's old value %#x, want %#x", c.name, old, c.w)
			}
		}
		if c.faa {
			if old := binary.LittleEndian.Uint64(a.buf[72:]); old != c.w2 {
				t.Errorf("%s: fetch-and-add's old value %#x, want %#x", c.name, old, c.w2)
			}
		}
	}
}

// Guard flags where they do not belong are refused at post, and nothing
// is sent: on a read, on a write longer than MaxGuardedWrite, both guard
// flags at once, and on a queue pair to this process.
func TestGuardRefused(t *testing.T) {
	a, b := connected(t, 64<<10)
	bad := []verbs.SendWR{
		{Op: verbs.OpRead, Flags: verbs.Guarded, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{Op: verbs.OpWrite, Flags: verbs.Guarded, SGL: a.sge(0, verbs.MaxGuardedWrite+1), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{Op: verbs.OpWrite, Flags: verbs.GuardSet, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{Op: verbs.OpFetchAdd, Flags: verbs.GuardSet | verbs.GuardAnd, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	}
	for i := range bad {
		if _, err := a.qp.PostSend(&bad[i]); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("request %d: %v, want ErrInvalid", i, err)
		}
	}
	s, lq, _ := loopPair(t)
	wr := verbs.SendWR{Op: verbs.OpCompareSwap, Flags: verbs.GuardSet, SGL: s.sge(0, 8), RemoteAddr: s.mr.Addr() + 8, RKey: s.mr.RKey()}
	if _, err := lq.PostSend(&wr); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("guard on a loopback queue pair: %v, want ErrInvalid", err)
	}
	// The connection is still good.
	ok := verbs.SendWR{ID: 9, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&ok); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != 9 || wc.Status != verbs.StatusSuccess {
		t.Fatalf("%+v", wc)
	}
}

// A forged frame with guard flags where they do not belong is malformed.
func TestGuardFramesChecked(t *testing.T) {
	bad := []frame{
		{kind: kReqRead, flags: flagGuarded, len: 8},
		{kind: kReqWrite, flags: flagGuarded, len: verbs.MaxGuardedWrite + 1},
		{kind: kReqWrite, flags: flagGuardSet},
		{kind: kReqFAA, flags: flagGuardSet | flagGuardAnd, len: 8},
		{kind: kReqFAA, len: 8, arg1: 1},
		{kind: kReqWrite, flags: 1 << 4},
	}
	for i, f := range bad {
		var h [hdrLen]byte
		f.encode(&h)
		var g frame
		if err := g.decode(&h); !errors.Is(err, errFrame) {
			t.Errorf("%d %s: decoded, want errFrame", i, fmt.Sprint(f.kind))
		}
	}
}
