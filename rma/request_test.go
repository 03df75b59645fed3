package rma_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestRequestsOutOfOrder: each rank issues gets of different sizes from
// every rank (registered and plain destinations), puts and fetch-adds, then
// waits for them in reverse order (and tests some first); every result is
// exact.
func TestRequestsOutOfOrder(t *testing.T) {
	rmatest.Run(t, 4, func(w *rma.World) error {
		me, n := w.Rank(), w.Size()
		const size = 3000
		win, err := rma.Allocate[int64](w, size+1)
		if err != nil {
			return err
		}
		for i := range size {
			win.Local()[i] = int64(me*100000 + i)
		}
		reg, err := rma.Allocate[int64](w, n*size)
		if err != nil {
			return err
		}
		win.Fence(0)
		var reqs []rma.Request
		dsts := make([][]int64, n)
		for r := range n {
			count := 1 + r*997%size
			if r%2 == 0 {
				dsts[r] = reg.Local()[r*size : r*size+count] // zero copy
			} else {
				dsts[r] = make([]int64, count) // bounce buffer
			}
			req, err := win.RGet(dsts[r], r, 0)
			if err != nil {
				return err
			}
			reqs = append(reqs, req)
		}
		add, err := win.RAccumulate([]int64{1}, 0, size, rma.Sum)
		if err != nil {
			return err
		}
		reqs = append(reqs, add)
		if _, err := reqs[0].Test(); err != nil {
			return err
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			if err := reqs[i].Wait(); err != nil {
				return err
			}
			if done, err := reqs[i].Test(); !done || err != nil {
				return fmt.Errorf("request %d after Wait: done %v, %v", i, done, err)
			}
		}
		for r, d := range dsts {
			for i, v := range d {
				if want := int64(r*100000 + i); v != want {
					return fmt.Errorf("get from rank %d: element %d = %d, want %d", r, i, v, want)
				}
			}
		}
		// Puts in a new epoch: a put to an element others may still be
		// getting in this one would be a conflicting access.
		if err := win.Fence(0); err != nil {
			return err
		}
		put, err := win.RPut([]int64{int64(-me)}, (me+1)%n, 0)
		if err != nil {
			return err
		}
		for {
			done, err := put.Test()
			if err != nil {
				return err
			}
			if done {
				break
			}
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		if got, want := win.Local()[0], int64(-((me + n - 1) % n)); got != want {
			return fmt.Errorf("rput landed %d, want %d", got, want)
		}
		if me == 0 && win.Local()[size] != int64(n) {
			// (the accumulates completed at the first fence)
			return fmt.Errorf("raccumulate counter %d", win.Local()[size])
		}
		var zero rma.Request
		if err := zero.Wait(); err != nil {
			return err
		}
		return errors.Join(win.Free(), reg.Free())
	})
}
