package rma_test

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// guarded is a slice of n elements of T at element offset off of an
// 8-byte-aligned backing array, with a word of guard elements before and
// after it: the window's first or last element shares an 8-byte word with
// guard elements unless its edge is aligned.
type guarded[T rma.Number] struct {
	all      []T // the backing array
	from, to int // the window is all[from:to]
}

func newGuarded[T rma.Number](off, n int) guarded[T] {
	var zero T
	g := 8 / int(unsafe.Sizeof(zero)) // elements per word
	words := make([]uint64, (g+off+n+g+g-1)/g)
	all := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*g)
	for i := range all {
		all[i] = guardValue[T](i)
	}
	return guarded[T]{all: all, from: g + off, to: g + off + n}
}

func guardValue[T rma.Number](i int) T { return T(100 + i%20) }

func (b guarded[T]) window() []T { return b.all[b.from:b.to] }

// check reports any guard element that changed.
func (b guarded[T]) check() error {
	for i, v := range b.all {
		if (i < b.from || i >= b.to) && v != guardValue[T](i) {
			return fmt.Errorf("element %d outside the window (window is [%d, %d)) changed: %v, want %v", i, b.from, b.to, v, guardValue[T](i))
		}
	}
	return nil
}

// layout gives rank r's window its length and its offset in elements from
// an 8-byte boundary: among the ranks, windows whose last element ends
// mid-word (odd lengths of int32), whose first starts mid-word, both, and
// neither.
func layout[T rma.Number](r int) (off, n int) {
	var zero T
	g := 8 / int(unsafe.Sizeof(zero))
	return (r / 2) % g, r + 1
}

// atomicsEveryElement: every rank runs FetchAndOp(Sum), a CompareAndSwap
// increment, Accumulate(Sum), GetAccumulate(Sum) on every element of every
// rank's created window, and one Accumulate over each whole window, all
// concurrently, so neighbouring elements in one word are hammered at once.
// Every element ends exactly 5*size*rounds above where it started, and no byte
// outside any window changes. plain makes the windows whole allocations of
// make([]T, n) instead of guarded sub-slices.
func atomicsEveryElement[T rma.Number](t *testing.T, ranks int, plain bool) {
	const rounds = 3
	rmatest.Run(t, ranks, func(w *rma.World) error {
		off, n := layout[T](w.Rank())
		b := newGuarded[T](off, n)
		buf := b.window()
		if plain {
			buf = make([]T, n)
		}
		for i := range buf {
			buf[i] = T(i)
		}
		win, err := rma.Create(w, buf)
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		size := w.Size()
		for range rounds {
			if err := hammer(win, w.Rank(), size); err != nil {
				return err
			}
		}
		if err := win.UnlockAll(); err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		want := make([]T, n)
		for i := range want {
			want[i] = T(i + 5*rounds*size)
		}
		if !slices.Equal(win.Local(), want) {
			return fmt.Errorf("window (offset %d, length %d) holds %v, want %v", off, n, win.Local(), want)
		}
		if err := b.check(); err != nil {
			return err
		}
		return win.Free()
	})
}

// hammer adds 5 to every element of every rank's window, one element and
// one way at a time, starting with rank me+1's.
func hammer[T rma.Number](win *rma.Window[T], me, size int) error {
	for k := range size {
		t := (me + k) % size // start on different targets
		for d := range win.LenAt(t) {
			if _, err := win.FetchAndOp(1, t, d, rma.Sum); err != nil {
				return fmt.Errorf("FetchAndOp on element %d of rank %d: %w", d, t, err)
			}
			old, err := win.FetchAndOp(0, t, d, rma.NoOp)
			if err != nil {
				return err
			}
			for tries := 0; ; tries++ {
				got, err := win.CompareAndSwap(old, old+1, t, d)
				if err != nil {
					return fmt.Errorf("CompareAndSwap on element %d of rank %d: %w", d, t, err)
				}
				if got == old {
					break
				}
				if tries > 10000 {
					return fmt.Errorf("CompareAndSwap on element %d of rank %d never succeeds", d, t)
				}
				old = got
			}
			if err := win.Accumulate([]T{1}, t, d, rma.Sum); err != nil {
				return fmt.Errorf("Accumulate on element %d of rank %d: %w", d, t, err)
			}
			var res [1]T
			if err := win.GetAccumulate([]T{1}, res[:], t, d, rma.Sum); err != nil {
				return fmt.Errorf("GetAccumulate on element %d of rank %d: %w", d, t, err)
			}
			if res[0] < T(d+3) { // at least this rank's three earlier increments
				return fmt.Errorf("GetAccumulate on element %d of rank %d saw %v after this rank's 3 increments", d, t, res[0])
			}
		}
	}
	for k := range size {
		t := (me + k) % size
		ones := make([]T, win.LenAt(t))
		for i := range ones {
			ones[i] = 1
		}
		if err := win.Accumulate(ones, t, 0, rma.Sum); err != nil {
			return fmt.Errorf("Accumulate over rank %d's window: %w", t, err)
		}
	}
	return nil
}

// TestAtomicsEveryElementCreated: atomics work on every element of created
// windows of small elements, including a last element whose 8-byte word
// ends past the slice and a first one whose word starts before it, at 1 to
// 7 ranks.
func TestAtomicsEveryElementCreated(t *testing.T) {
	for ranks := 1; ranks <= 7; ranks++ {
		t.Run(fmt.Sprintf("int32/%d", ranks), func(t *testing.T) { atomicsEveryElement[int32](t, ranks, false) })
		t.Run(fmt.Sprintf("float32/%d", ranks), func(t *testing.T) { atomicsEveryElement[float32](t, ranks, false) })
	}
	t.Run("int16/5", func(t *testing.T) { atomicsEveryElement[int16](t, 5, false) })
	t.Run("uint8/7", func(t *testing.T) { atomicsEveryElement[uint8](t, 7, false) })
	t.Run("int64/3", func(t *testing.T) { atomicsEveryElement[int64](t, 3, false) })
	// Whole small allocations: the Go allocator packs slices of a few
	// bytes into shared 16-byte blocks.
	t.Run("int32 make/4", func(t *testing.T) { atomicsEveryElement[int32](t, 4, true) })
	t.Run("uint8 make/3", func(t *testing.T) { atomicsEveryElement[uint8](t, 3, true) })
}

// TestAtomicsOnEdgeKeepOutsideStores: while two ranks fetch-and-add the last
// two elements of rank 0's int32 window of 3, whose last element shares its
// 8-byte word with the int32 after the slice, rank 0 itself keeps adding to
// that outside int32 with atomic stores. The compare-and-swaps on the word
// write the outside int32 back as they found it, so not one of rank 0's
// adds is lost, and the window's counts are exact. (Soft provider only: a
// device whose atomics are not atomic with respect to the CPU gives no such
// guarantee, see Create.)
func TestAtomicsOnEdgeKeepOutsideStores(t *testing.T) {
	const k = 300
	rmatest.Run(t, 3, func(w *rma.World) error {
		if !strings.HasPrefix(w.Provider().Name, "soft") {
			return nil
		}
		b := newGuarded[int32](0, 3) // window all[2:5]; all[5] shares element 4's word
		clear(b.window())
		win, err := rma.Create(w, b.window())
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		outside := &b.all[b.to]
		if w.Rank() == 0 {
			for range k {
				atomic.AddInt32(outside, 1)
				runtime.Gosched()
			}
		} else {
			for range k {
				for d := 1; d < 3; d++ {
					if _, err := win.FetchAndOp(1, 0, d, rma.Sum); err != nil {
						return err
					}
				}
			}
		}
		if err := win.UnlockAll(); err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if w.Rank() == 0 {
			if want := []int32{0, 2 * k, 2 * k}; !slices.Equal(win.Local(), want) {
				return fmt.Errorf("window %v, want %v", win.Local(), want)
			}
			if got, want := atomic.LoadInt32(outside), guardValue[int32](b.to)+k; got != want {
				return fmt.Errorf("the int32 after the window is %d, want %d: an atomic on the window lost a store next to it", got, want)
			}
		}
		return win.Free()
	})
}

// TestUnwaitedFetchAddsKeepResults: Accumulate(Sum) on int64 posts
// fetch-adds without waiting for them; their old values must not land on
// the results of the atomics that follow to other ranks (a compare-and-swap
// increment that read a stale result would add twice or not at all). Rank 0
// interleaves both, to ranks 1 and 2, and both counters end exact.
func TestUnwaitedFetchAddsKeepResults(t *testing.T) {
	const k = 300
	rmatest.Run(t, 3, func(w *rma.World) error {
		win, err := rma.Create(w, make([]int64, 2))
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		if w.Rank() == 0 {
			for i := range k {
				a, b := 1+i%2, 2-i%2 // alternate the targets' roles
				if err := win.Accumulate([]int64{1 << 20}, a, 0, rma.Sum); err != nil {
					return err
				}
				old, err := win.FetchAndOp(0, b, 1, rma.NoOp)
				if err != nil {
					return err
				}
				for {
					got, err := win.CompareAndSwap(old, old+1, b, 1)
					if err != nil {
						return err
					}
					if got == old {
						break
					}
					old = got
				}
			}
		}
		if err := win.UnlockAll(); err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if w.Rank() != 0 {
			if want := []int64{k / 2 << 20, k / 2}; !slices.Equal(win.Local(), want) {
				return fmt.Errorf("counters %v, want %v", win.Local(), want)
			}
		}
		return win.Free()
	})
}
