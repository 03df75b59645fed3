package rma_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// sharedCounter: every rank adds 1 to element 3 of rank 0's window K times
// with Accumulate(Sum), concurrently; the result is exactly size*K.
func sharedCounter[T rma.Number](t *testing.T, ranks, k int) {
	rmatest.Run(t, ranks, func(w *rma.World) error {
		win, err := rma.Allocate[T](w, 5)
		if err != nil {
			return err
		}
		win.Fence(0)
		one := []T{1}
		for i := 0; i < k; i++ {
			if err := win.Accumulate(one, 0, 3, rma.Sum); err != nil {
				return err
			}
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		if w.Rank() == 0 {
			want := []T{0, 0, 0, T(ranks * k), 0}
			if !slices.Equal(win.Local(), want) {
				return fmt.Errorf("window %v, want %v", win.Local(), want)
			}
		}
		return win.Free()
	})
}

func TestAccumulateSumCounter(t *testing.T) {
	t.Run("int64 fetch-add", func(t *testing.T) { sharedCounter[int64](t, 4, 200) })
	t.Run("uint64", func(t *testing.T) { sharedCounter[uint64](t, 3, 200) })
	t.Run("float64 cas", func(t *testing.T) { sharedCounter[float64](t, 4, 100) })
	t.Run("int32 cas in word", func(t *testing.T) { sharedCounter[int32](t, 4, 100) })
	t.Run("int8 cas in word", func(t *testing.T) { sharedCounter[int8](t, 3, 40) })
	t.Run("float32", func(t *testing.T) { sharedCounter[float32](t, 2, 100) })
}

// TestFetchAndOpOldValues: every rank fetch-adds 1 to one counter K times;
// the old values returned, over all ranks, are exactly 0..size*K-1.
func TestFetchAndOpOldValues(t *testing.T) {
	const k = 150
	for _, typ := range []string{"int64", "int16"} {
		t.Run(typ, func(t *testing.T) {
			rmatest.Run(t, 4, func(w *rma.World) error {
				n := w.Size()
				// Rank 0's window: the counter, then n*k slots where every rank records the values it saw.
				win, err := rma.Allocate[int64](w, 1+n*k)
				if err != nil {
					return err
				}
				small, err := rma.Allocate[int16](w, 4)
				if err != nil {
					return err
				}
				win.Fence(0)
				small.Fence(0)
				seen := make([]int64, k)
				for i := range seen {
					if typ == "int64" {
						seen[i], err = win.FetchAndOp(1, 0, 0, rma.Sum)
					} else {
						var v int16
						v, err = small.FetchAndOp(1, 0, 1, rma.Sum)
						seen[i] = int64(v)
					}
					if err != nil {
						return err
					}
					if i > 0 && seen[i] <= seen[i-1] {
						return fmt.Errorf("old values not increasing: %d then %d", seen[i-1], seen[i])
					}
				}
				if err := win.Put(seen, 0, 1+w.Rank()*k); err != nil {
					return err
				}
				win.Fence(0)
				small.Fence(0)
				if w.Rank() == 0 {
					all := slices.Clone(win.Local()[1:])
					slices.Sort(all)
					for i, v := range all {
						if v != int64(i) {
							return fmt.Errorf("sorted old values: position %d holds %d", i, v)
						}
					}
					if typ == "int64" && win.Local()[0] != int64(n*k) {
						return fmt.Errorf("counter %d", win.Local()[0])
					}
					if typ == "int16" && !slices.Equal(small.Local(), []int16{0, int16(n * k), 0, 0}) {
						return fmt.Errorf("int16 window %v", small.Local())
					}
				}
				return errors.Join(win.Free(), small.Free())
			})
		})
	}
}

func TestAccumulateOps(t *testing.T) {
	rmatest.Run(t, 3, func(w *rma.World) error {
		me := w.Rank()
		f, err := rma.Allocate[float64](w, 4)
		if err != nil {
			return err
		}
		i, err := rma.Allocate[int32](w, 7)
		if err != nil {
			return err
		}
		if me == 0 {
			copy(f.Local(), []float64{1, 100, -100, 5})
			copy(i.Local(), []int32{1, 100, -100, 0, -1, 0, 9})
		}
		f.Fence(0)
		i.Fence(0)
		// Each rank r contributes v = r+2 with every op, in separate elements.
		v := float64(me + 2)
		for _, c := range []struct {
			disp int
			op   rma.Op
		}{{0, rma.Prod}, {1, rma.Min}, {2, rma.Max}} {
			if err := f.Accumulate([]float64{v}, 0, c.disp, c.op); err != nil {
				return err
			}
		}
		iv := int32(me + 2)
		ops := []rma.Op{rma.Prod, rma.Min, rma.Max, rma.BOr, rma.BAnd, rma.BXor}
		for d, op := range ops {
			if err := i.Accumulate([]int32{iv}, 0, d, op); err != nil {
				return err
			}
		}
		if err := f.Accumulate([]float64{1}, 0, 0, rma.BXor); !errors.Is(err, rma.ErrOp) {
			return fmt.Errorf("bitwise op on floats: %v", err)
		}
		if err := f.Accumulate([]float64{1}, 0, 0, rma.NoOp); !errors.Is(err, rma.ErrOp) {
			return fmt.Errorf("Accumulate with NoOp: %v", err)
		}
		f.Fence(0)
		i.Fence(0)
		if me == 0 {
			// ranks contribute 2, 3, 4
			if want := []float64{24, 2, 4, 5}; !slices.Equal(f.Local(), want) {
				return fmt.Errorf("float ops: %v, want %v", f.Local(), want)
			}
			if want := []int32{24, 2, 4, 2 | 3 | 4, -1 & 2 & 3 & 4, 2 ^ 3 ^ 4, 9}; !slices.Equal(i.Local(), want) {
				return fmt.Errorf("int ops: %v, want %v", i.Local(), want)
			}
		}
		f.Fence(0)
		i.Fence(0)
		// Replace and GetAccumulate: rank 1 replaces element 3 and gets the old value.
		if me == 1 {
			old := make([]float64, 1)
			if err := f.GetAccumulate([]float64{math.Pi}, old, 0, 3, rma.Replace); err != nil {
				return err
			}
			if old[0] != 5 {
				return fmt.Errorf("Replace returned old %v", old[0])
			}
			got := make([]float64, 4)
			if err := f.GetAccumulate(make([]float64, 4), got, 0, 0, rma.NoOp); err != nil {
				return err
			}
			if want := []float64{24, 2, 4, math.Pi}; !slices.Equal(got, want) {
				return fmt.Errorf("NoOp read %v, want %v", got, want)
			}
			if err := f.GetAccumulate([]float64{1}, make([]float64, 2), 0, 0, rma.Sum); !errors.Is(err, rma.ErrSize) {
				return fmt.Errorf("result of the wrong length: %v", err)
			}
		}
		f.Fence(0)
		i.Fence(0)
		return errors.Join(f.Free(), i.Free())
	})
}

// TestCompareAndSwapMutex: a mutex word at rank 0 guards a critical section
// (get, add, put, flush) on a plain counter; every rank enters K times.
func TestCompareAndSwapMutex(t *testing.T) {
	const k = 30
	for _, typ := range []string{"uint64", "int32"} {
		t.Run(typ, func(t *testing.T) {
			rmatest.Run(t, 4, func(w *rma.World) error {
				me := w.Rank()
				mutex64, err := rma.Allocate[uint64](w, 1)
				if err != nil {
					return err
				}
				mutex32, err := rma.Allocate[int32](w, 3)
				if err != nil {
					return err
				}
				data, err := rma.Allocate[int64](w, 1)
				if err != nil {
					return err
				}
				for _, x := range []interface{ Fence(rma.Assert) error }{mutex64, mutex32, data} {
					x.Fence(0)
				}
				cas := func(cmp, val int) (int, error) {
					if typ == "uint64" {
						old, err := mutex64.CompareAndSwap(uint64(cmp), uint64(val), 0, 0)
						return int(old), err
					}
					old, err := mutex32.CompareAndSwap(int32(cmp), int32(val), 0, 1)
					return int(old), err
				}
				buf := make([]int64, 1)
				for i := 0; i < k; i++ {
					for {
						old, err := cas(0, me+1)
						if err != nil {
							return err
						}
						if old == 0 {
							break
						}
					}
					if err := data.Get(buf, 0, 0); err != nil {
						return err
					}
					if err := data.Flush(0); err != nil {
						return err
					}
					buf[0]++
					if err := data.Put(buf, 0, 0); err != nil {
						return err
					}
					if err := data.Flush(0); err != nil {
						return err
					}
					if old, err := cas(me+1, 0); err != nil || old != me+1 {
						return fmt.Errorf("release: old %d, %v", old, err)
					}
				}
				for _, x := range []interface{ Fence(rma.Assert) error }{mutex64, mutex32, data} {
					x.Fence(0)
				}
				if me == 0 {
					if got := data.Local()[0]; got != int64(k*w.Size()) {
						return fmt.Errorf("counter %d, want %d", got, k*w.Size())
					}
					if mutex32.Local()[0] != 0 || mutex32.Local()[2] != 0 {
						return fmt.Errorf("neighbours of the int32 mutex changed: %v", mutex32.Local())
					}
				}
				return errors.Join(mutex64.Free(), mutex32.Free(), data.Free())
			})
		})
	}
}

// TestAccumulateStaleGuess: compare-and-swap rounds start from the value
// this rank last left in a word; when another rank (or another window at
// the same address) has changed it since, the result must still be exact.
func TestAccumulateStaleGuess(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		for round := range 3 { // a fresh window each round, maybe at the same address
			win, err := rma.Allocate[float64](w, 4)
			if err != nil {
				return err
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			// Rank 0 sets element 1 of rank 1's window (its guess is
			// now 5+round); then rank 1 changes it behind rank 0's back.
			if w.Rank() == 0 {
				if err := win.Accumulate([]float64{5 + float64(round)}, 1, 1, rma.Replace); err != nil {
					return err
				}
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			if w.Rank() == 1 {
				if err := win.Accumulate([]float64{100}, 1, 1, rma.Sum); err != nil {
					return err
				}
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			if w.Rank() == 0 {
				old := make([]float64, 1)
				if err := win.GetAccumulate([]float64{2}, old, 1, 1, rma.Prod); err != nil {
					return err
				}
				if want := 105 + float64(round); old[0] != want {
					return fmt.Errorf("round %d: old value %v, want %v", round, old[0], want)
				}
				// Only rank 0 changes it now: its guess holds.
				got, err := win.FetchAndOp(1, 1, 1, rma.Sum)
				if err != nil {
					return err
				}
				if want := 2 * (105 + float64(round)); got != want {
					return fmt.Errorf("round %d: fetched %v, want %v", round, got, want)
				}
				prev, err := win.CompareAndSwap(got+1, -1, 1, 1)
				if err != nil || prev != got+1 {
					return fmt.Errorf("round %d: compare-and-swap %v, %v", round, prev, err)
				}
			}
			if err := win.Fence(0); err != nil {
				return err
			}
			if w.Rank() == 1 && win.Local()[1] != -1 {
				return fmt.Errorf("round %d: element %v, want -1", round, win.Local()[1])
			}
			if err := win.Free(); err != nil {
				return err
			}
		}
		return nil
	})
}
