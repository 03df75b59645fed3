package rma

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/transport"
	"github.com/rmago/rmago/verbs"
)

// lone runs fn in a job of one rank (this test process), with a created
// int32 window over all[1:5] of an 8-byte-aligned array of 8 int32 set to
// 100..107: the window's bytes [4, 20) start and end in the middle of
// 8-byte words.
func lone(t *testing.T, fn func(w *World, win *Window[int32], all []int32) error) {
	t.Helper()
	if os.Getenv(launch.EnvRank) != "" {
		t.Skip("in-process only")
	}
	b, err := transport.BootstrapFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	w, err := initWith(b, transport.Options{Provider: "soft"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	words := make([]uint64, 4)
	all := unsafe.Slice((*int32)(unsafe.Pointer(&words[0])), 8)
	for i := range all {
		all[i] = int32(100 + i)
	}
	win, err := Create(w, all[1:5])
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(w, win, all); err != nil {
		t.Error(err)
	}
	for i, v := range all {
		if (i < 1 || i >= 5) && v != int32(100+i) {
			t.Errorf("int32 %d, outside the window, changed to %d", i, v)
		}
	}
}

// TestCreatedWindowRegions: a created window whose edges are not 8-byte
// aligned is registered twice: exactly its bytes for puts and gets (no
// atomics), and the 8-byte words holding them for atomics only.
func TestCreatedWindowRegions(t *testing.T) {
	lone(t, func(w *World, win *Window[int32], all []int32) error {
		start := uint64(uintptr(unsafe.Pointer(&all[1])))
		if win.reg == nil || win.areg == nil {
			return fmt.Errorf("regions %v and %v, want two", win.reg, win.areg)
		}
		if got, want := win.reg.Access(), transport.PutGet; win.reg.Self(0).Addr != start || win.reg.Len() != 16 || got != want {
			return fmt.Errorf("puts' region [%#x, +%d) access %v, want [%#x, +16) access %v", win.reg.Self(0).Addr, win.reg.Len(), got, start, want)
		}
		if got, want := win.areg.Access(), transport.AtomicsOnly; win.areg.Self(0).Addr != start-4 || win.areg.Len() != 24 || got != want {
			return fmt.Errorf("atomics' region [%#x, +%d) access %v, want [%#x, +24) access %v", win.areg.Self(0).Addr, win.areg.Len(), got, start-4, want)
		}
		if rw := win.remotes[0]; rw.addr != start || rw.rkey != win.reg.Self(0).RKey || rw.akey != win.areg.Self(0).RKey || rw.count != 4 {
			return fmt.Errorf("remote view %+v", rw)
		}
		return win.Free()
	})
}

// TestCreatedWindowAlignedOneRegion: a created window whose edges are
// 8-byte aligned, and any window of 8-byte elements, has one region.
func TestCreatedWindowAlignedOneRegion(t *testing.T) {
	lone(t, func(w *World, win *Window[int32], all []int32) error {
		a, err := Create(w, all[2:6])
		if err != nil {
			return err
		}
		b, err := Create(w, make([]float64, 3))
		if err != nil {
			return err
		}
		for _, c := range []struct {
			mr, amr *transport.Region
			n       int
		}{{a.reg, a.areg, 16}, {b.reg, b.areg, 24}} {
			if c.amr != nil || c.mr.Len() != c.n || c.mr.Access() != transport.AllAccess {
				return fmt.Errorf("regions %v (%d bytes, access %v) and %v, want one of %d bytes with every access", c.mr, c.mr.Len(), c.mr.Access(), c.amr, c.n)
			}
		}
		return errors.Join(a.Free(), b.Free(), win.Free())
	})
}

// rawProbe posts one raw operation on the window's memory through the
// fabric, bypassing rma's checks, and returns its completion error. It
// breaks this rank's loopback connection when refused (as a remote access
// error does on a real device), so each probe runs in a job of its own.
func rawProbe(w *World, op verbs.Opcode, remote transport.Remote, n uint32) error {
	w.atomicMu.Lock()
	defer w.atomicMu.Unlock()
	var seq uint64
	var err error
	switch op {
	case verbs.OpWrite:
		seq, err = w.f.Write(0, w.atom.local(0), remote, n)
	case verbs.OpCompareSwap:
		seq, err = w.f.CompareSwap(0, w.atom.local(0), remote, 0, 0)
	}
	if err != nil {
		return err
	}
	return w.f.Await(0, seq)
}

// TestCreatedWindowRegionsRefuse: the provider refuses a write that runs
// past the window's last byte into the word it shares, a write through the
// atomics' key, and an atomic through the puts' key; the bytes outside the
// window stay as they were (lone checks them).
func TestCreatedWindowRegionsRefuse(t *testing.T) {
	for _, c := range []struct {
		name string
		op   verbs.Opcode
		off  int64 // from the window's first byte
		n    uint32
		akey bool
	}{
		{"write past the end", verbs.OpWrite, 12, 8, false},
		{"write before the start", verbs.OpWrite, -4, 8, false},
		{"write with the atomics' key", verbs.OpWrite, 4, 4, true},
		{"atomic with the puts' key", verbs.OpCompareSwap, 4, 8, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			lone(t, func(w *World, win *Window[int32], all []int32) error {
				rw := win.remotes[0]
				key := rw.rkey
				if c.akey {
					key = rw.akey
				}
				remote := transport.Remote{Addr: uint64(int64(rw.addr) + c.off), RKey: key}
				if err := rawProbe(w, c.op, remote, c.n); !errors.Is(err, verbs.ErrRemoteAccess) {
					return fmt.Errorf("%s: %v, want %v", c.name, err, verbs.ErrRemoteAccess)
				}
				return nil
			})
		})
	}
	// And the same key, bounds and sizes within the rules work.
	lone(t, func(w *World, win *Window[int32], all []int32) error {
		rw := win.remotes[0]
		if err := rawProbe(w, verbs.OpWrite, transport.Remote{Addr: rw.addr + 12, RKey: rw.rkey}, 4); err != nil {
			return fmt.Errorf("write of the last element: %w", err)
		}
		if err := rawProbe(w, verbs.OpCompareSwap, transport.Remote{Addr: rw.addr + 12, RKey: rw.akey}, 8); err != nil {
			return fmt.Errorf("atomic on the last element's word: %w", err)
		}
		return win.Free()
	})
}
