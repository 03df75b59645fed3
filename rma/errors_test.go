package rma_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestInvalidOp: an Op value that is no operation (the zero Op, or past
// NoOp) is ErrInvalidOp, not ErrOp, from every call that takes one; a
// valid operation the call or type does not allow is ErrOp.
func TestInvalidOp(t *testing.T) {
	rmatest.Run(t, 1, func(w *rma.World) error {
		win, err := rma.Allocate[int32](w, 4)
		if err != nil {
			return err
		}
		f, err := rma.Allocate[float32](w, 4)
		if err != nil {
			return err
		}
		if err := errors.Join(win.Fence(0), f.Fence(0)); err != nil {
			return err
		}
		one, res := []int32{1}, []int32{0}
		for _, op := range []rma.Op{0, rma.NoOp + 1, 255} {
			_, fetchErr := win.FetchAndOp(1, 0, 0, op)
			_, raccErr := win.RAccumulate(one, 0, 0, op)
			_, rgetErr := win.RGetAccumulate(one, res, 0, 0, op)
			for i, err := range []error{win.Accumulate(one, 0, 0, op), win.GetAccumulate(one, res, 0, 0, op), fetchErr, raccErr, rgetErr} {
				if !errors.Is(err, rma.ErrInvalidOp) || errors.Is(err, rma.ErrOp) {
					return fmt.Errorf("call %d with %v: %v, want ErrInvalidOp only", i, op, err)
				}
			}
		}
		if got := rma.Op(0).String(); got != "Op(0)" {
			return fmt.Errorf("Op(0).String() = %q", got)
		}
		want := "rma: Accumulate(Op(0)) from rank 0 to rank 0, element 2: invalid reduction operation: Op(0) is none of Sum, Prod, Min, Max, BAnd, BOr, BXor, Replace, NoOp"
		if err := win.Accumulate(one, 0, 2, 0); err == nil || err.Error() != want {
			return fmt.Errorf("error %q, want %q", err, want)
		}
		for i, err := range []error{f.Accumulate([]float32{1}, 0, 0, rma.BXor), win.Accumulate(one, 0, 0, rma.NoOp)} {
			if !errors.Is(err, rma.ErrOp) || errors.Is(err, rma.ErrInvalidOp) {
				return fmt.Errorf("case %d: %v, want ErrOp only", i, err)
			}
		}
		want = "rma: Accumulate(BXor) from rank 0 to rank 0, element 0: operation not defined here: BXor is for integer windows; this window's elements are float32"
		if err := f.Accumulate([]float32{1}, 0, 0, rma.BXor); err.Error() != want {
			return fmt.Errorf("error %q, want %q", err, want)
		}
		// Nothing was done: the windows free without another fence.
		return errors.Join(win.Free(), f.Free())
	})
}

// zeroLengthCalls runs every communication call with zero elements on
// (target, disp) and returns their errors, named.
func zeroLengthCalls(win *rma.Window[int64], target, disp int) map[string]error {
	var empty []int64
	_, rput := win.RPut(empty, target, disp)
	_, rget := win.RGet(empty, target, disp)
	_, racc := win.RAccumulate(empty, target, disp, rma.Sum)
	_, rgacc := win.RGetAccumulate(empty, empty, target, disp, rma.Sum)
	return map[string]error{
		"Put":            win.Put(empty, target, disp),
		"Get":            win.Get(empty, target, disp),
		"Accumulate":     win.Accumulate(empty, target, disp, rma.Sum),
		"GetAccumulate":  win.GetAccumulate(empty, empty, target, disp, rma.NoOp),
		"RPut":           rput,
		"RGet":           rget,
		"RAccumulate":    racc,
		"RGetAccumulate": rgacc,
	}
}

// TestZeroLength: zero-length operations are checked like any other (a live
// window, an existing target rank, an open epoch, 0 <= disp <= the target's
// length), then do nothing: no data moves and no synchronization is owed.
func TestZeroLength(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		n := 3 + 2*w.Rank() // rank 0: 3 elements, rank 1: 5
		win, err := rma.Allocate[int64](w, n)
		if err != nil {
			return err
		}
		for i := range win.Local() {
			win.Local()[i] = int64(10 + i)
		}
		expect := func(what string, errs map[string]error, want error) error {
			for call, err := range errs {
				if want == nil && err != nil || want != nil && !errors.Is(err, want) {
					return fmt.Errorf("zero-length %s %s: %v, want %v", call, what, err, want)
				}
			}
			return nil
		}
		other := 1 - w.Rank()
		if err := expect("without an epoch", zeroLengthCalls(win, other, 0), rma.ErrNoEpoch); err != nil {
			return err
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		for _, c := range []struct {
			what         string
			target, disp int
			want         error
		}{
			{"at element 0", other, 0, nil},
			{"at the target's end", other, win.LenAt(other), nil},
			{"inside the window", other, 2, nil},
			{"to itself", w.Rank(), n, nil},
			{"past the target's end", other, win.LenAt(other) + 1, rma.ErrRange},
			{"at a negative element", other, -1, rma.ErrRange},
			{"to rank -1", -1, 0, rma.ErrRank},
			{"to rank Size()", w.Size(), 0, rma.ErrRank},
		} {
			if err := expect(c.what, zeroLengthCalls(win, c.target, c.disp), c.want); err != nil {
				return err
			}
		}
		// Nothing moved, and nothing is owed: Free needs no closing fence.
		for i, v := range win.Local() {
			if v != int64(10+i) {
				return fmt.Errorf("element %d is %d after zero-length operations", i, v)
			}
		}
		if err := win.Free(); err != nil {
			return err
		}
		return expect("on a freed window", zeroLengthCalls(win, other, 0), rma.ErrFreed)
	})
}

// TestErrorMessages: an operation's error names the call, the calling and
// target ranks, the element, the check that failed and what to do.
func TestErrorMessages(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 4)
		if err != nil {
			return err
		}
		if w.Rank() == 1 {
			for _, c := range []struct {
				err  error
				want string
			}{
				{win.Put([]int64{1}, 0, 0), "rma: Put from rank 1 to rank 0, element 0: operation outside an access epoch: window 0 has none open to rank 0; open one with Fence, Lock, LockAll or Start"},
			} {
				if c.err == nil || c.err.Error() != c.want {
					return fmt.Errorf("error %q, want %q", c.err, c.want)
				}
			}
		}
		if err := win.Fence(0); err != nil {
			return err
		}
		if w.Rank() == 1 {
			_, casErr := win.CompareAndSwap(0, 1, 0, 4)
			_, fetchErr := win.FetchAndOp(1, 5, 0, rma.Sum)
			_, rgetErr := win.RGet(make([]int64, 2), 0, 3)
			for _, c := range []struct {
				err  error
				want string
			}{
				{win.Put([]int64{1}, 7, 0), "rma: Put from rank 1 to rank 7, element 0: target rank out of range: the job's ranks are 0 to 1"},
				{win.Get(make([]int64, 3), 0, 2), "rma: Get from rank 1 to rank 0, element 2: displacement and count outside the target window: elements [2, 5) are not all inside rank 0's window 0 of 4 elements (see LenAt)"},
				{rgetErr, "rma: RGet from rank 1 to rank 0, element 3: displacement and count outside the target window: elements [3, 5) are not all inside rank 0's window 0 of 4 elements (see LenAt)"},
				{casErr, "rma: CompareAndSwap from rank 1 to rank 0, element 4: displacement and count outside the target window: elements [4, 5) are not all inside rank 0's window 0 of 4 elements (see LenAt)"},
				{fetchErr, "rma: FetchAndOp(Sum) from rank 1 to rank 5, element 0: target rank out of range: the job's ranks are 0 to 1"},
				{win.GetAccumulate([]int64{1}, nil, 0, 0, rma.Sum), "rma: GetAccumulate(Sum) from rank 1 to rank 0, element 0: invalid size: 1 origin elements but 0 result elements; give result the origin's length"},
			} {
				if c.err == nil || c.err.Error() != c.want {
					return fmt.Errorf("error %q,\nwant  %q", c.err, c.want)
				}
			}
		}
		if err := win.Fence(rma.NoSucceed); err != nil {
			return err
		}
		if err := win.Free(); err != nil {
			return err
		}
		if err := win.Put([]int64{1}, 0, 0); !errors.Is(err, rma.ErrFreed) || !strings.Contains(err.Error(), "window 0 was freed; create a new one") {
			return fmt.Errorf("put on a freed window: %v", err)
		}
		return nil
	})
}

// misaligned is a []int32 of n elements starting 1 byte into an 8-byte
// aligned array (as only unsafe code can make): its data pointer is set
// as a number, so that the race detector's pointer checks do not stop the
// test before Create sees it. keep must stay alive while it is used.
func misaligned(n int) (s []int32, keep []uint64) {
	keep = make([]uint64, n)
	s = make([]int32, n)
	*(*uintptr)(unsafe.Pointer(&s)) = uintptr(unsafe.Pointer(&keep[0])) + 1
	return s, keep
}

// TestCreationFailsOnEveryRank: when one rank's part of a window creation
// fails (an invalid length, a misaligned slice), that rank returns its
// error and every other rank returns ErrMismatch naming it, at once, with
// no rank waiting for the others; the next creation works.
func TestCreationFailsOnEveryRank(t *testing.T) {
	rmatest.Run(t, 3, func(w *rma.World) error {
		n := 4
		if w.Rank() == 1 {
			n = -1
		}
		_, err := rma.Allocate[int32](w, n)
		if w.Rank() == 1 && !errors.Is(err, rma.ErrSize) ||
			w.Rank() != 1 && (!errors.Is(err, rma.ErrMismatch) || !strings.Contains(err.Error(), "rank 1 could not create its part of window 0")) {
			return fmt.Errorf("Allocate with rank 1's length -1: %v", err)
		}
		buf := make([]int32, 3)
		s, keep := misaligned(3)
		if w.Rank() == 2 {
			buf = s
		}
		_, err = rma.Create(w, buf)
		runtime.KeepAlive(keep)
		if w.Rank() == 2 && (!errors.Is(err, rma.ErrAlign) || !strings.Contains(err.Error(), "Create on rank 2: the slice starts at")) ||
			w.Rank() != 2 && !errors.Is(err, rma.ErrMismatch) {
			return fmt.Errorf("Create with rank 2's slice misaligned: %v", err)
		}
		win, err := rma.Create(w, make([]int32, 3))
		if err != nil {
			return fmt.Errorf("creation after the failed ones: %w", err)
		}
		return win.Free()
	})
}

// TestClosedWorld: after Close, creating a window and Barrier fail with
// ErrClosed naming the rank, and so does a second Close.
func TestClosedWorld(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("in-process only")
	}
	errs := rmatest.Start(2, func(w *rma.World) error {
		if err := w.Close(); err != nil {
			return err
		}
		_, allocErr := rma.Allocate[int32](w, 1)
		_, createErr := rma.Create(w, make([]int32, 1))
		want := fmt.Sprintf("rma: world closed: rank %d already called Close; windows and barriers need an open World", w.Rank())
		for i, err := range []error{allocErr, createErr, w.Barrier()} {
			if !errors.Is(err, rma.ErrClosed) || err.Error() != want {
				return fmt.Errorf("call %d after Close: %v, want %q", i, err, want)
			}
		}
		return nil // rmatest.Start closes again
	})
	for r, err := range errs {
		if want := fmt.Sprintf("rma: world closed: rank %d called Close twice", r); !errors.Is(err, rma.ErrClosed) || err.Error() != want {
			t.Errorf("rank %d: %v, want %q", r, err, want)
		}
	}
}
