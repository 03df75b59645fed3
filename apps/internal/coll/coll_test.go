package coll

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

func TestReducer(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rmatest.Run(t, n, func(w *rma.World) error {
				r, err := NewReducer[float64](w, 3)
				if err != nil {
					return err
				}
				me := w.Rank()
				for k := range 20 {
					in := []float64{float64(me + k), float64(-me), 0.5}
					out, err := r.Allreduce(in, Sum[float64])
					if err != nil {
						return err
					}
					want := []float64{float64(n*k + n*(n-1)/2), float64(-n * (n - 1) / 2), 0.5 * float64(n)}
					for i := range want {
						if out[i] != want[i] {
							return fmt.Errorf("call %d: sum[%d] = %v, want %v", k, i, out[i], want[i])
						}
					}
					m, err := r.Max(float64((me + k) % n))
					if err != nil {
						return err
					}
					if m != float64(n-1) {
						return fmt.Errorf("call %d: max %v, want %d", k, m, n-1)
					}
					b, err := r.Bcast(float64(100+k), k%n)
					if err != nil {
						return err
					}
					if b != float64(100+k) {
						return fmt.Errorf("call %d: bcast %v", k, b)
					}
				}
				return r.Free()
			})
		})
	}
}
