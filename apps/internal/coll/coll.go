// Package coll builds the small collectives the apps need (allreduce,
// broadcast of a value) on rma windows alone: rmago has no two-sided
// collectives beyond Barrier.
//
// A Reducer owns a window of 2 × size × width elements on every rank. An
// allreduce is one fence epoch: each rank writes its contribution into its
// own slot, puts that slot into the same slot of every other rank's window
// (zero copy: the origin is registered window memory), and fences; after
// the fence every rank holds all contributions and combines them locally,
// in rank order, so every rank computes a bit-identical result even for
// floating-point sums.
//
// Consecutive calls alternate between the two halves of the window, so one
// fence per call suffices: a rank can only be writing call k+1's half while
// a slower rank still reads call k's, and it cannot reach call k+2 (which
// reuses call k's half) before every rank has entered call k+1's fence,
// i.e. finished reading call k's half.
package coll

import (
	"fmt"

	"github.com/rmago/rmago/rma"
)

// Reducer is an allreduce of up to width elements of type T per call.
// Every rank calls its methods in the same order (they are collective).
type Reducer[T rma.Number] struct {
	win   *rma.Window[T]
	me    int
	size  int
	width int
	calls int
}

// NewReducer allocates the reduction window. It is collective.
func NewReducer[T rma.Number](w *rma.World, width int) (*Reducer[T], error) {
	if width < 1 {
		return nil, fmt.Errorf("coll: width %d", width)
	}
	win, err := rma.Allocate[T](w, 2*w.Size()*width)
	if err != nil {
		return nil, err
	}
	if err := win.Fence(0); err != nil {
		win.Free()
		return nil, err
	}
	return &Reducer[T]{win: win, me: w.Rank(), size: w.Size(), width: width}, nil
}

// Allreduce combines in (len(in) <= width) element-wise over all ranks
// with op and returns the result, the same on every rank.
func (r *Reducer[T]) Allreduce(in []T, op func(a, b T) T) ([]T, error) {
	if len(in) > r.width {
		return nil, fmt.Errorf("coll: %d elements, width %d", len(in), r.width)
	}
	half := (r.calls % 2) * r.size * r.width
	r.calls++
	mine := half + r.me*r.width
	all := r.win.Local()
	slot := all[mine : mine+len(in)]
	copy(slot, in)
	for i := 1; i < r.size; i++ {
		if err := r.win.Put(slot, (r.me+i)%r.size, mine); err != nil {
			return nil, err
		}
	}
	if err := r.win.Fence(0); err != nil {
		return nil, err
	}
	out := make([]T, len(in))
	copy(out, all[half:half+len(in)])
	for q := 1; q < r.size; q++ {
		s := all[half+q*r.width:]
		for i := range out {
			out[i] = op(out[i], s[i])
		}
	}
	return out, nil
}

// Reduce1 is Allreduce of one value.
func (r *Reducer[T]) Reduce1(v T, op func(a, b T) T) (T, error) {
	out, err := r.Allreduce([]T{v}, op)
	if err != nil {
		return 0, err
	}
	return out[0], nil
}

// Max is the maximum of v over all ranks.
func (r *Reducer[T]) Max(v T) (T, error) { return r.Reduce1(v, Max[T]) }

// Sum is the sum of v over all ranks, added in rank order.
func (r *Reducer[T]) Sum(v T) (T, error) { return r.Reduce1(v, Sum[T]) }

// Bcast returns root's v on every rank.
func (r *Reducer[T]) Bcast(v T, root int) (T, error) {
	in := []T{0}
	if r.me == root {
		in[0] = v
	}
	return r.Reduce1(in[0], Sum[T]) // every other rank contributes 0
}

// Free closes the fence epoch and frees the window. It is collective.
func (r *Reducer[T]) Free() error {
	if err := r.win.Fence(rma.NoSucceed); err != nil {
		return err
	}
	return r.win.Free()
}

// Max returns the larger of a and b.
func Max[T rma.Number](a, b T) T { return max(a, b) }

// Min returns the smaller of a and b.
func Min[T rma.Number](a, b T) T { return min(a, b) }

// Sum returns a + b.
func Sum[T rma.Number](a, b T) T { return a + b }
