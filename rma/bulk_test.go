package rma_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

var allOps = []rma.Op{rma.Sum, rma.Prod, rma.Min, rma.Max, rma.BAnd, rma.BOr, rma.BXor, rma.Replace, rma.NoOp}

func isFloatT[T rma.Number]() bool {
	var one T = 1
	return one/2*2 != 0
}

// reduce is the reference meaning of op (MPI's, with NaN winning Min and
// Max on either side).
func reduce[T rma.Number](op rma.Op, t, v T) T {
	bits := func(x T) uint64 {
		var w uint64
		*(*T)(unsafe.Pointer(&w)) = x
		return w
	}
	from := func(w uint64) T { return *(*T)(unsafe.Pointer(&w)) }
	switch op {
	case rma.Sum:
		return t + v
	case rma.Prod:
		return t * v
	case rma.Min:
		if v != v || t != t {
			return T(math.NaN())
		}
		return min(t, v)
	case rma.Max:
		if v != v || t != t {
			return T(math.NaN())
		}
		return max(t, v)
	case rma.BAnd:
		return from(bits(t) & bits(v))
	case rma.BOr:
		return from(bits(t) | bits(v))
	case rma.BXor:
		return from(bits(t) ^ bits(v))
	case rma.Replace:
		return v
	}
	return t
}

func sameElems[T rma.Number](a, b []T) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool { return x == y || (x != x && y != y) })
}

// opsEveryType: rank 0 runs every op on rank 1's window of n elements with
// Accumulate and GetAccumulate, over the whole window and over a range
// that starts and ends mid-word, bulk and with per-word atomics; the
// window and the old values are exactly the reference's.
func opsEveryType[T rma.Number](t *testing.T, vals []T) {
	const n = 19
	for _, bulk := range []bool{true, false} {
		t.Run(fmt.Sprintf("bulk=%v", bulk), func(t *testing.T) {
			rmatest.Run(t, 2, func(w *rma.World) error {
				rma.SetBulkAccumulate(w, bulk)
				win, err := rma.Allocate[T](w, n)
				if err != nil {
					return err
				}
				if err := win.LockAll(0); err != nil {
					return err
				}
				var errs []error
				if w.Rank() == 0 {
					for _, op := range allOps {
						if isFloatT[T]() && (op == rma.BAnd || op == rma.BOr || op == rma.BXor) {
							continue
						}
						for _, r := range [][2]int{{0, n}, {3, 13}, {1, 2}} {
							if err := checkOp(win, vals, op, r[0], r[1]); err != nil {
								errs = append(errs, fmt.Errorf("%v on [%d,%d): %w", op, r[0], r[1], err))
							}
						}
					}
				}
				return errors.Join(errors.Join(errs...), win.UnlockAll(), w.Barrier(), win.Free())
			})
		})
	}
}

func checkOp[T rma.Number](win *rma.Window[T], vals []T, op rma.Op, from, to int) error {
	n := win.LenAt(1)
	init := make([]T, n)
	for i := range init {
		init[i] = vals[(i*5+int(op))%len(vals)]
	}
	if err := errors.Join(win.Put(init, 1, 0), win.Flush(1)); err != nil {
		return err
	}
	origin := make([]T, to-from)
	for i := range origin {
		origin[i] = vals[(i*3+int(op)+1)%len(vals)]
	}
	want := slices.Clone(init)
	for i := from; i < to; i++ {
		want[i] = reduce(op, init[i], origin[i-from])
	}
	if op != rma.NoOp {
		if err := errors.Join(win.Accumulate(origin, 1, from, op), win.Flush(1)); err != nil {
			return err
		}
		got := make([]T, n)
		if err := errors.Join(win.Get(got, 1, 0), win.Flush(1)); err != nil {
			return err
		}
		if !sameElems(got, want) {
			return fmt.Errorf("Accumulate: window %v, want %v (from %v with %v)", got, want, init, origin)
		}
		if err := errors.Join(win.Put(init, 1, 0), win.Flush(1)); err != nil {
			return err
		}
	}
	old := make([]T, to-from)
	if err := win.GetAccumulate(origin, old, 1, from, op); err != nil {
		return err
	}
	if !sameElems(old, init[from:to]) {
		return fmt.Errorf("GetAccumulate: old values %v, want %v", old, init[from:to])
	}
	got := make([]T, n)
	if err := errors.Join(win.Get(got, 1, 0), win.Flush(1)); err != nil {
		return err
	}
	if !sameElems(got, want) {
		return fmt.Errorf("GetAccumulate: window %v, want %v", got, want)
	}
	return nil
}

// TestBulkOpsEveryType covers every op and element type, NaN, infinities,
// overflow and signed/unsigned extremes included.
func TestBulkOpsEveryType(t *testing.T) {
	nan := math.NaN()
	t.Run("int8", func(t *testing.T) { opsEveryType(t, []int8{0, 1, -1, 127, -128, 5, -7, 3}) })
	t.Run("int16", func(t *testing.T) { opsEveryType(t, []int16{0, 1, -1, 32767, -32768, 300, -7}) })
	t.Run("int32", func(t *testing.T) { opsEveryType(t, []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 70000, -7}) })
	t.Run("int64", func(t *testing.T) { opsEveryType(t, []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1 << 40, -7}) })
	t.Run("uint8", func(t *testing.T) { opsEveryType(t, []uint8{0, 1, 255, 128, 5, 7}) })
	t.Run("uint16", func(t *testing.T) { opsEveryType(t, []uint16{0, 1, 65535, 300, 7}) })
	t.Run("uint32", func(t *testing.T) { opsEveryType(t, []uint32{0, 1, math.MaxUint32, 70000, 7}) })
	t.Run("uint64", func(t *testing.T) { opsEveryType(t, []uint64{0, 1, math.MaxUint64, 1 << 63, 7}) })
	t.Run("int", func(t *testing.T) { opsEveryType(t, []int{0, 1, -1, math.MaxInt, math.MinInt, 9}) })
	t.Run("float32", func(t *testing.T) {
		opsEveryType(t, []float32{0, 1.5, -2, float32(nan), float32(math.Inf(1)), float32(math.Inf(-1)), 3e30, -0.25})
	})
	t.Run("float64", func(t *testing.T) {
		opsEveryType(t, []float64{0, 1.5, -2, nan, math.Inf(1), math.Inf(-1), 1e300, -0.25})
	})
}

// concurrentBulk: every rank, from two goroutines each, adds 1 to every
// element of rank 0's window with bulk Accumulate and GetAccumulate, and
// to single elements with FetchAndOp and CompareAndSwap increments, all at
// once; every element ends exactly at the number of increments.
func concurrentBulk[T rma.Number](t *testing.T, ranks, n int) {
	const k, g = 20, 2
	rmatest.Run(t, ranks, func(w *rma.World) error {
		win, err := rma.Allocate[T](w, n)
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		errs := make([]error, g)
		var wg sync.WaitGroup
		for j := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ones := make([]T, n)
				for i := range ones {
					ones[i] = 1
				}
				old := make([]T, n)
				for i := range k {
					if err := win.Accumulate(ones, 0, 0, rma.Sum); err != nil {
						errs[j] = err
						return
					}
					if err := win.GetAccumulate(ones, old, 0, 0, rma.Sum); err != nil {
						errs[j] = err
						return
					}
					d := (i + j + w.Rank()) % n
					if _, err := win.FetchAndOp(1, 0, d, rma.Sum); err != nil {
						errs[j] = err
						return
					}
					cur, err := win.FetchAndOp(0, 0, d, rma.NoOp)
					for err == nil {
						var got T
						if got, err = win.CompareAndSwap(cur, cur+1, 0, d); got == cur {
							break
						}
						cur = got
					}
					if err != nil {
						errs[j] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errors.Join(errs...), win.UnlockAll(), w.Barrier()); err != nil {
			return err
		}
		if w.Rank() == 0 {
			// 2 bulk adds per iteration on every element; 2 single adds per
			// iteration spread over the elements.
			total, singles := T(0), 0
			for _, v := range win.Local() {
				total += v
			}
			singles = 2 * k * g * ranks
			if want := T(2*k*g*ranks*n + singles); total != want {
				return fmt.Errorf("sum of the window %v, want %v (window %v)", total, want, win.Local())
			}
			for i, v := range win.Local() {
				if v < T(2*k*g*ranks) {
					return fmt.Errorf("element %d = %v, below the %d bulk increments", i, v, 2*k*g*ranks)
				}
			}
		}
		return win.Free()
	})
}

func TestBulkConcurrentWithAtomics(t *testing.T) {
	t.Run("int64", func(t *testing.T) { concurrentBulk[int64](t, 3, 37) })
	t.Run("int32", func(t *testing.T) { concurrentBulk[int32](t, 3, 37) })
	t.Run("uint8", func(t *testing.T) { concurrentBulk[uint8](t, 2, 13) })
	t.Run("float64", func(t *testing.T) { concurrentBulk[float64](t, 2, 17) })
}

// TestBulkLarge: accumulates larger than a fetch piece and than half the
// bounce buffer, from registered and from Go memory, with old values; the
// results are exact element by element.
func TestBulkLarge(t *testing.T) {
	const n = 4<<20/8 + 8203 // over 4 MiB of int64: two stage halves and a bit
	rmatest.Run(t, 2, func(w *rma.World) error {
		if !rma.BulkAccumulate(w) {
			// Half a million NIC atomics per call (ibv): the bulk path is
			// what this tests; TestBulkOpsEveryType covers the other.
			t.Log("the provider has no bulk accumulate: nothing to test")
			return nil
		}
		win, err := rma.Allocate[int64](w, n)
		if err != nil {
			return err
		}
		reg, err := rma.Allocate[int64](w, n) // a registered origin
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		var cerr error
		if w.Rank() == 0 {
			heap := make([]int64, n)
			for i := range heap {
				heap[i] = int64(i)
				reg.Local()[i] = 1 << 32
			}
			old := make([]int64, 9000) // over the 64 KiB fetch limit
			cerr = errors.Join(
				win.Accumulate(heap, 1, 0, rma.Sum),
				win.Accumulate(reg.Local(), 1, 0, rma.Sum),
				win.GetAccumulate(heap[:9000], old, 1, 5, rma.Max),
				win.Flush(1))
			for i, v := range old {
				if want := int64(i+5) + 1<<32; v != want && cerr == nil {
					cerr = fmt.Errorf("old value %d = %d, want %d", i, v, want)
				}
			}
		}
		cerr = errors.Join(cerr, win.UnlockAll(), w.Barrier())
		if cerr == nil && w.Rank() == 1 {
			for i, v := range win.Local() {
				if want := int64(i) + 1<<32; v != want {
					cerr = fmt.Errorf("element %d = %d, want %d", i, v, want)
					break
				}
			}
		}
		return errors.Join(cerr, win.Free(), reg.Free())
	})
}

// TestBulkRefused: an accumulate past the target's window is refused
// before anything is sent, whatever path it would take.
func TestBulkRefused(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int32](w, 10)
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		var cerr error
		if w.Rank() == 0 {
			if err := win.Accumulate(make([]int32, 4), 1, 7, rma.Sum); !errors.Is(err, rma.ErrRange) {
				cerr = fmt.Errorf("Accumulate past the end: %v, want ErrRange", err)
			}
			if err := win.GetAccumulate(make([]int32, 4), make([]int32, 4), 1, -1, rma.Sum); !errors.Is(err, rma.ErrRange) {
				cerr = errors.Join(cerr, fmt.Errorf("GetAccumulate before the start: %v, want ErrRange", err))
			}
			if err := win.Accumulate(make([]int32, 4), 2, 0, rma.Sum); !errors.Is(err, rma.ErrRank) {
				cerr = errors.Join(cerr, fmt.Errorf("Accumulate to rank 2 of 2: %v, want ErrRank", err))
			}
		}
		return errors.Join(cerr, win.UnlockAll(), w.Barrier(), win.Free())
	})
}
