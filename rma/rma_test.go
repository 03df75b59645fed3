package rma_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// value is the element rank r writes at index i in round k: distinct for
// every (r, i, k) and exact in every numeric type used below.
func value[T rma.Number](r, i, k int) T {
	return T((r*31 + i*7 + k*3) % 100)
}

func fill[T rma.Number](b []T, r, k int) {
	for i := range b {
		b[i] = value[T](r, i, k)
	}
}

func verify[T rma.Number](b []T, r, k int, what string) error {
	for i := range b {
		if want := value[T](r, i, k); b[i] != want {
			return fmt.Errorf("%s: element %d = %v, want %v", what, i, b[i], want)
		}
	}
	return nil
}

func newWindow[T rma.Number](w *rma.World, kind rma.Kind, n int) (*rma.Window[T], error) {
	if kind == rma.Created {
		return rma.Create(w, make([]T, n))
	}
	return rma.Allocate[T](w, n)
}

// ringPutGet: every rank puts a slice into its right neighbour's window
// (from a window and from a plain slice), fences, checks what it received,
// then gets its left neighbour's window back and checks it.
func ringPutGet[T rma.Number](t *testing.T, ranks int, kind rma.Kind, sizes []int) {
	rmatest.Run(t, ranks, func(w *rma.World) error {
		me, n := w.Rank(), w.Size()
		right, left := (me+1)%n, (me+n-1)%n
		maxN := sizes[len(sizes)-1]
		win, err := newWindow[T](w, kind, maxN)
		if err != nil {
			return err
		}
		src, err := rma.Allocate[T](w, maxN) // a registered origin: zero-copy path
		if err != nil {
			return err
		}
		plain := make([]T, maxN) // an unregistered origin: bounce-buffer path
		if err := win.Fence(0); err != nil {
			return err
		}
		for k, size := range sizes {
			origin := src.Local()[:size]
			if k%2 == 1 {
				origin = plain[:size]
			}
			fill(origin, me, k)
			if err := win.PutSlice(origin, right); err != nil {
				return err
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			if err := verify(win.Local()[:size], left, k, fmt.Sprintf("put of %d from rank %d", size, left)); err != nil {
				return err
			}
			got := make([]T, size)
			if k%2 == 0 {
				got = src.Local()[:size]
				clear(got)
			}
			if err := win.Get(got, left, 0); err != nil {
				return err
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			// Rank left's window holds what rank left-1 put there.
			if err := verify(got, (left+n-1)%n, k, fmt.Sprintf("get of %d from rank %d", size, left)); err != nil {
				return err
			}
		}
		return errors.Join(win.Free(), src.Free())
	})
}

func TestPutGetSizes(t *testing.T) {
	sizes := []int{1, 2, 3, 64, 1000, 4096, 100_000, 1 << 20}
	for _, kind := range []rma.Kind{rma.Allocated, rma.Created} {
		t.Run(kind.String(), func(t *testing.T) {
			ringPutGet[float64](t, 2, kind, sizes) // up to 8 MiB per transfer
		})
	}
}

func TestPutGetTypes(t *testing.T) {
	sizes := []int{1, 5, 513, 70_000}
	t.Run("int8", func(t *testing.T) { ringPutGet[int8](t, 3, rma.Allocated, sizes) })
	t.Run("uint16", func(t *testing.T) { ringPutGet[uint16](t, 3, rma.Created, sizes) })
	t.Run("int32", func(t *testing.T) { ringPutGet[int32](t, 3, rma.Allocated, sizes) })
	t.Run("uint64", func(t *testing.T) { ringPutGet[uint64](t, 3, rma.Created, sizes) })
	t.Run("float32", func(t *testing.T) { ringPutGet[float32](t, 3, rma.Allocated, sizes) })
	t.Run("int", func(t *testing.T) { ringPutGet[int](t, 3, rma.Created, sizes) })
}

func TestPutGetRanks(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ringPutGet[float64](t, n, rma.Allocated, []int{1, 100, 10_000})
		})
	}
}

// TestAllToAllDisplacements: every rank writes one block into every rank's
// window (itself included) at a displacement of its own, then every rank
// reads every block back from every rank.
func TestAllToAllDisplacements(t *testing.T) {
	const block = 37
	rmatest.Run(t, 5, func(w *rma.World) error {
		me, n := w.Rank(), w.Size()
		win, err := rma.Allocate[int64](w, n*block)
		if err != nil {
			return err
		}
		win.Fence(0)
		mine := make([]int64, block)
		for i := range mine {
			mine[i] = int64(me*1000 + i)
		}
		for r := range n {
			if err := win.Put(mine, r, me*block); err != nil {
				return err
			}
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		for r := range n {
			for i := range block {
				if got, want := win.Local()[r*block+i], int64(r*1000+i); got != want {
					return fmt.Errorf("local[%d] = %d, want %d", r*block+i, got, want)
				}
			}
		}
		all := make([][]int64, n)
		for r := range n {
			all[r] = make([]int64, n*block)
			if err := win.Get(all[r], r, 0); err != nil {
				return err
			}
		}
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		for r := range n {
			for i, v := range all[r] {
				if want := int64((i/block)*1000 + i%block); v != want {
					return fmt.Errorf("rank %d element %d = %d, want %d", r, i, v, want)
				}
			}
		}
		return win.Free()
	})
}

func TestBadInput(t *testing.T) {
	rmatest.Run(t, 3, func(w *rma.World) error {
		win, err := rma.Allocate[float64](w, 10+w.Rank()) // windows of different lengths
		if err != nil {
			return err
		}
		buf := make([]float64, 4)
		if err := win.Put(buf, 1, 0); !errors.Is(err, rma.ErrNoEpoch) {
			return fmt.Errorf("put before any fence: %v", err)
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		checks := []struct {
			name string
			err  error
			want error
		}{
			{"rank -1", win.Put(buf, -1, 0), rma.ErrRank},
			{"rank size", win.Get(buf, w.Size(), 0), rma.ErrRank},
			{"negative disp", win.Put(buf, 0, -1), rma.ErrRange},
			{"past the end", win.Put(buf, 0, 7), rma.ErrRange},                          // rank 0 has 10
			{"past a shorter window", win.Get(make([]float64, 12), 1, 0), rma.ErrRange}, // rank 1 has 11
			{"disp at end, count 1", win.Put(buf[:1], 2, 12), rma.ErrRange},
			{"zero length at end", win.Put(nil, 2, 12), nil},
			{"nil slice", win.Get(nil, 1, 0), nil},
			{"exactly to the end", win.Put(buf[:1], 2, 11), nil},
		}
		for _, c := range checks {
			if !errors.Is(c.err, c.want) || (c.want == nil && c.err != nil) {
				return fmt.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
			}
		}
		// The last put is still outstanding: Free refuses and the window stays usable.
		if err := win.Free(); !errors.Is(err, rma.ErrEpochOpen) {
			return fmt.Errorf("free with an open epoch: %v", err)
		}
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		if w.Rank() == 2 && win.Local()[11] != 0 {
			return fmt.Errorf("put of zeros left %v", win.Local()[11])
		}
		if err := win.Get(buf, 0, 0); !errors.Is(err, rma.ErrNoEpoch) {
			return fmt.Errorf("get after a NoSucceed fence: %v", err)
		}
		if err := win.Free(); err != nil {
			return err
		}
		if err := win.Free(); !errors.Is(err, rma.ErrFreed) {
			return fmt.Errorf("second free: %v", err)
		}
		if err := win.Fence(0); !errors.Is(err, rma.ErrFreed) {
			return fmt.Errorf("fence after free: %v", err)
		}
		if err := win.Put(buf, 0, 0); !errors.Is(err, rma.ErrFreed) {
			return fmt.Errorf("put after free: %v", err)
		}
		if _, err := rma.Allocate[float64](w, -1); !errors.Is(err, rma.ErrSize) {
			return fmt.Errorf("negative size: %v", err)
		}
		return nil
	})
}

func TestZeroLengthWindows(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[float64](w, w.Rank()) // rank 0 exposes nothing
		if err != nil {
			return err
		}
		win.Fence(0)
		if err := win.Put([]float64{1}, 0, 0); !errors.Is(err, rma.ErrRange) {
			return fmt.Errorf("put into an empty window: %v", err)
		}
		if err := win.Put(nil, 0, 0); err != nil {
			return err
		}
		if w.Rank() == 0 {
			if err := win.Put([]float64{math.Pi}, 1, 0); err != nil {
				return err
			}
		}
		win.Fence(0)
		if w.Rank() == 1 && win.Local()[0] != math.Pi {
			return fmt.Errorf("got %v", win.Local()[0])
		}
		return win.Free()
	})
}

func TestTypeMismatch(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("a failed collective leaves the ranks' windows out of step")
	}
	errs := rmatest.Start(2, func(w *rma.World) error {
		var err error
		if w.Rank() == 0 {
			_, err = rma.Allocate[float64](w, 4)
		} else {
			_, err = rma.Allocate[float32](w, 4)
		}
		if !errors.Is(err, rma.ErrMismatch) {
			return fmt.Errorf("got %v, want ErrMismatch", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
