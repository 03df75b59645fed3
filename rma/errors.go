package rma

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalidOp means an Op value that is none of the defined operations
// (Sum ... NoOp), such as the zero Op.
var ErrInvalidOp = errors.New("rma: invalid reduction operation")

// opError is the error of a communication call (Put, Accumulate, ...):
// which call, from which rank to which target rank and element, and why.
// It wraps the cause, so errors.Is finds the sentinel.
type opError struct {
	call   string
	op     Op
	hasOp  bool // the accumulate family
	rank   int
	target int
	disp   int
	err    error
}

func (e *opError) Error() string {
	var b strings.Builder
	b.WriteString("rma: ")
	b.WriteString(e.call)
	if e.hasOp {
		b.WriteString("(" + e.op.String() + ")")
	}
	b.WriteString(" from rank " + strconv.Itoa(e.rank) + " to rank " + strconv.Itoa(e.target) +
		", element " + strconv.Itoa(e.disp) + ": ")
	// The cause's own "rma: " would repeat the prefix.
	b.WriteString(strings.TrimPrefix(e.err.Error(), "rma: "))
	return b.String()
}

func (e *opError) Unwrap() error { return e.err }

// callErr gives err, if any, the context of the call that failed.
func (win *Window[T]) callErr(call string, target, disp int, err error) error {
	if err == nil {
		return nil
	}
	return &opError{call: call, rank: win.w.Rank(), target: target, disp: disp, err: err}
}

// accErr is callErr for the accumulate family, naming the operation too.
func (win *Window[T]) accErr(call string, op Op, target, disp int, err error) error {
	if err == nil {
		return nil
	}
	return &opError{call: call, op: op, hasOp: true, rank: win.w.Rank(), target: target, disp: disp, err: err}
}
