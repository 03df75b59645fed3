package rma_test

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestFenceTranspose transposes an N×N matrix distributed in row blocks
// (rank r owns rows [r*b, (r+1)*b)), once pulling with Get and once pushing
// with Put, under fences with each assertion where it applies.
func TestFenceTranspose(t *testing.T) {
	for _, how := range []string{"get", "put"} {
		t.Run(how, func(t *testing.T) {
			rmatest.Run(t, 4, func(w *rma.World) error {
				me, p := w.Rank(), w.Size()
				const b = 6 // rows per rank
				n := b * p
				a, err := rma.Allocate[float64](w, b*n) // my rows of A
				if err != nil {
					return err
				}
				at, err := rma.Allocate[float64](w, b*n) // my rows of Aᵀ
				if err != nil {
					return err
				}
				for i := range b {
					for j := range n {
						a.Local()[i*n+j] = float64((me*b+i)*1000 + j) // A[row][col] = row*1000+col
					}
				}
				// Nothing precedes the first fences: NoPrecede. No local stores
				// happen to at before the next fence: NoStore.
				if err := a.Fence(rma.NoPrecede | rma.NoStore); err != nil {
					return err
				}
				if err := at.Fence(rma.NoPrecede); err != nil {
					return err
				}
				row := make([]float64, n)
				if how == "get" {
					// Aᵀ[i][j] = A[j][i]: my row i of Aᵀ is column me*b+i of A;
					// take element (j, col) from the rank owning row j.
					col := make([]float64, n)
					for i := range b {
						c := me*b + i
						for j := range n {
							if err := a.Get(col[j:j+1], j/b, (j%b)*n+c); err != nil {
								return err
							}
						}
						if err := a.Fence(rma.NoPut); err != nil { // a is only read in this epoch
							return err
						}
						copy(at.Local()[i*n:], col)
					}
				} else {
					// Push: my row r of A goes into column r of Aᵀ, spread over its owners.
					for i := range b {
						r := me*b + i
						copy(row, a.Local()[i*n:(i+1)*n])
						for j := range n {
							if err := at.Put(row[j:j+1], j/b, (j%b)*n+r); err != nil {
								return err
							}
						}
						if err := at.Fence(0); err != nil {
							return err
						}
					}
				}
				if err := at.Fence(rma.NoSucceed); err != nil {
					return err
				}
				if err := a.Fence(rma.NoSucceed); err != nil {
					return err
				}
				for i := range b {
					for j := range n {
						if got, want := at.Local()[i*n+j], float64(j*1000+me*b+i); got != want {
							return fmt.Errorf("Aᵀ[%d][%d] = %v, want %v", me*b+i, j, got, want)
						}
					}
				}
				return nil
			})
		})
	}
}
