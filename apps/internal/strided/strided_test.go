package strided

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

func TestPackUnpack(t *testing.T) {
	m := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11} // 3 rows of 4
	col := make([]int, 3)
	Pack(col, m, 2, 4, 3)
	if !slices.Equal(col, []int{2, 6, 10}) {
		t.Fatalf("Pack: %v", col)
	}
	out := make([]int, 12)
	Unpack(out, 1, 4, col)
	if !slices.Equal(out, []int{0, 2, 0, 0, 0, 6, 0, 0, 0, 10, 0, 0}) {
		t.Fatalf("Unpack: %v", out)
	}
}

// TestPutVector sends column 1 of a 5×3 matrix into column 2 of the peer's.
func TestPutVector(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[float64](w, 15)
		if err != nil {
			return err
		}
		src := make([]float64, 15)
		for i := range src {
			src[i] = float64(100*w.Rank() + i)
		}
		peer := 1 - w.Rank()
		if err := win.Fence(0); err != nil {
			return err
		}
		if err := PutVector(win, src, 1, 3, 5, peer, 2, 3); err != nil {
			return err
		}
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		for i := range 5 {
			if got, want := win.Local()[2+3*i], float64(100*peer+1+3*i); got != want {
				return fmt.Errorf("row %d: %v, want %v", i, got, want)
			}
		}
		return win.Free()
	})
}
