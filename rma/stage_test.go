package rma_test

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestStageMixedRing: in one fence epoch each rank gets and puts through
// the bounce buffer (Go slices, not registered) in alternation, large
// enough that the ring wraps and gets are still in flight when puts whose
// payload the provider took at post join them. Every byte put and got is
// exact, and the put slices may be overwritten as soon as Put returns.
func TestStageMixedRing(t *testing.T) {
	rmatest.Run(t, 3, func(w *rma.World) error {
		me, n := w.Rank(), w.Size()
		const half = 1 << 19 // int64 elements in each half of the window
		win, err := rma.Allocate[int64](w, 2*half)
		if err != nil {
			return err
		}
		defer win.Free()
		for i := range half {
			win.Local()[i] = int64(me<<32 | i)
		}
		left, right := (me+n-1)%n, (me+1)%n
		sizes := []int{1, 300000, 7, half, 4096, 1}
		gots := make([][]int64, len(sizes))
		if err := win.Fence(0); err != nil {
			return err
		}
		off := 0
		for k, c := range sizes {
			gots[k] = make([]int64, c)
			if err := win.Get(gots[k], left, half-c); err != nil {
				return err
			}
			out := make([]int64, c)
			for i := range out {
				out[i] = int64(k<<40 | me<<32 | i)
			}
			if off+c > half {
				off = 0
			}
			if err := win.Put(out, right, half+off); err != nil {
				return err
			}
			clear(out) // the payload is the library's no longer
			if err := win.Fence(0); err != nil {
				return err
			}
			for i, v := range gots[k] {
				if want := int64(left<<32 | (half - c + i)); v != want {
					return fmt.Errorf("get %d from rank %d: element %d = %#x, want %#x", k, left, i, v, want)
				}
			}
			for i, v := range win.Local()[half+off : half+off+c] {
				if want := int64(k<<40 | left<<32 | i); v != want {
					return fmt.Errorf("put %d from rank %d: element %d = %#x, want %#x", k, left, i, v, want)
				}
			}
			off += c
			if err := win.Fence(0); err != nil {
				return err
			}
		}
		return nil
	})
}
