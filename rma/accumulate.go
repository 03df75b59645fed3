package rma

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// Op is a reduction operation of Accumulate and friends, as MPI_Op.
type Op uint8

// Operations. Bitwise operations are defined for integer windows only.
const (
	Sum     Op = iota + 1 // target = target + origin
	Prod                  // target = target * origin
	Min                   // target = min(target, origin)
	Max                   // target = max(target, origin)
	BAnd                  // target = target & origin (integers)
	BOr                   // target = target | origin (integers)
	BXor                  // target = target ^ origin (integers)
	Replace               // target = origin
	NoOp                  // target unchanged (GetAccumulate: an atomic read)
)

var opNames = [...]string{"", "Sum", "Prod", "Min", "Max", "BAnd", "BOr", "BXor", "Replace", "NoOp"}

func (o Op) String() string {
	if o >= Sum && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ErrOp means a valid operation that this call or the window's element type
// does not allow (bitwise operations on floats, NoOp where a change is
// required). An Op value that is no operation at all is ErrInvalidOp.
var ErrOp = errors.New("rma: operation not defined here")

func isFloat[T Number]() bool {
	var one T = 1
	return one/2*2 != 0 // 0.5*2 = 1 for floats, 0*2 = 0 for integers
}

func checkOp[T Number](op Op, noOpOK bool) error {
	switch {
	case op < Sum || op > NoOp:
		return fmt.Errorf("%w: %v is none of Sum, Prod, Min, Max, BAnd, BOr, BXor, Replace, NoOp", ErrInvalidOp, op)
	case op == NoOp && !noOpOK:
		return fmt.Errorf("%w: NoOp changes nothing; use GetAccumulate or FetchAndOp for an atomic read", ErrOp)
	case (op == BAnd || op == BOr || op == BXor) && isFloat[T]():
		var zero T
		return fmt.Errorf("%w: %v is for integer windows; this window's elements are %T", ErrOp, op, zero)
	}
	return nil
}

// apply combines the target's value t with the origin's value v.
func apply[T Number](op Op, t, v T) T {
	switch op {
	case Sum:
		return t + v
	case Prod:
		return t * v
	case Min:
		if v < t || isNaN(v) {
			return v
		}
		return t
	case Max:
		if v > t || isNaN(v) {
			return v
		}
		return t
	case BAnd, BOr, BXor:
		a, b := bitsOf(t), bitsOf(v)
		switch op {
		case BAnd:
			a &= b
		case BOr:
			a |= b
		default:
			a ^= b
		}
		return fromBits[T](a)
	case Replace:
		return v
	}
	return t // NoOp
}

func isNaN[T Number](v T) bool { return v != v }

// bitsOf is v's memory, zero-extended to 64 bits (little-endian machines).
func bitsOf[T Number](v T) uint64 {
	var w uint64
	*(*T)(unsafe.Pointer(&w)) = v
	return w
}

func fromBits[T Number](w uint64) T { return *(*T)(unsafe.Pointer(&w)) }

// elemAt extracts the element at byte shift sh of word w.
func elemAt[T Number](w uint64, sh uint) T { return fromBits[T](w >> (8 * sh)) }

// withElem replaces the element at byte shift sh of word w by v.
func withElem[T Number](w uint64, sh uint, v T) uint64 {
	size := uint(unsafe.Sizeof(v))
	mask := uint64(math.MaxUint64)
	if size < 8 {
		mask = (uint64(1)<<(8*size) - 1)
	}
	return w&^(mask<<(8*sh)) | (bitsOf(v)&mask)<<(8*sh)
}

// On a provider that executes bulk accumulates (the soft provider, see
// bulk.go), an accumulate of more than one word is one request carrying
// the operand, applied at the target element by element with the same
// atomics the target's provider runs for fetch-and-add and
// compare-and-swap. Otherwise, and for a single word, accumulates go
// through the NIC's 8-byte atomics, for every element type and operation,
// so that all accumulates to a location, including a rank's own, are done
// by one agent and are element-wise atomic against each other:
//   - Sum on 8-byte integers is a fetch-and-add per element, posted without
//     waiting;
//   - everything else is a compare-and-swap loop on each 8-byte word that
//     holds target elements: all words of the call are tried in one
//     pipelined round (guessing the old value: the last one this rank
//     wrote or saw there, else 0; a failed compare-and-swap returns the
//     real one) and the failures retried, so a call costs one round trip
//     when the guess holds (a word only this rank changes, such as a flag
//     it sets with Replace) and about two otherwise, whatever its length.
// The old values land in the World's registered atomic scratch area.

// Accumulate combines origin into rank target's window at displacement disp
// with op, element by element, atomically per element with respect to other
// accumulates using the same op or NoOp (MPI's default "same_op_no_op").
// Like Put it needs an open access epoch, and like Put it may complete only
// at the next synchronization (origin must not be modified before then).
func (win *Window[T]) Accumulate(origin []T, target, disp int, op Op) error {
	err := checkOp[T](op, false)
	if err == nil {
		err = win.accumulate(origin, nil, target, disp, op)
	}
	return win.accErr("Accumulate", op, target, disp, err)
}

// GetAccumulate is Accumulate that also returns, in result, the target's
// elements as they were just before (len(result) must equal len(origin)).
// With NoOp it is an atomic read of the target (origin's values are
// ignored, but it must still have result's length). It returns complete.
func (win *Window[T]) GetAccumulate(origin, result []T, target, disp int, op Op) error {
	err := checkOp[T](op, true)
	if err == nil && len(result) != len(origin) {
		err = errSizes(len(origin), len(result))
	}
	if err == nil {
		err = win.accumulate(origin, result, target, disp, op)
	}
	return win.accErr("GetAccumulate", op, target, disp, err)
}

// FetchAndOp applies op with value to one element of rank target's window
// and returns the element's previous value. NoOp reads it atomically.
func (win *Window[T]) FetchAndOp(value T, target, disp int, op Op) (T, error) {
	var in, out [1]T
	in[0] = value
	err := checkOp[T](op, true)
	if err == nil {
		// One element: the NIC-style atomics take one round trip as a bulk
		// request does, and keep in and out on the stack.
		_, err = win.wordAccumulate(in[:], out[:], target, disp, op)
	}
	return out[0], win.accErr("FetchAndOp", op, target, disp, err)
}

// CompareAndSwap sets element disp of rank target's window to value if it
// equals compare, atomically, and returns the element's previous value
// (equal to compare when the swap happened).
func (win *Window[T]) CompareAndSwap(compare, value T, target, disp int) (T, error) {
	old, err := win.compareAndSwap(compare, value, target, disp)
	return old, win.callErr("CompareAndSwap", target, disp, err)
}

func (win *Window[T]) compareAndSwap(compare, value T, target, disp int) (T, error) {
	if old, ran, err := win.shortDirectCAS(compare, value, target, disp); ran {
		return old, err
	}
	w := win.w
	w.atomicMu.Lock()
	defer w.atomicMu.Unlock()
	direct, err := win.beginAtomics(target, disp, 1)
	if err != nil {
		return 0, err
	}
	defer win.endAtomics(target)
	if direct != nil {
		if err := w.f.DirectReady(target); err != nil {
			return 0, err
		}
		return directCompareAndSwap(direct, compare, value, disp), nil
	}
	word, sh := win.wordOf(target, disp)
	a := w.atom
	guess := a.guessFor(target, word.Addr)
	for {
		want := withElem(guess, sh, value)
		if elemAt[T](guess, sh) != compare {
			// Read the word atomically first: a swap that cannot match.
			want = guess
		}
		// Signalled: its own completion ends the wait, with no flush request.
		seq, err := w.f.PostAtomic(target, transport.Atomic{Op: transport.CompareSwapOp, Local: a.local(0), Remote: word, CompareAdd: guess, Swap: want})
		if err != nil {
			return 0, err
		}
		if err := w.f.Await(target, seq); err != nil {
			return 0, err
		}
		old := a.word(0)
		if old == guess {
			a.remember(target, word.Addr, want)
			return elemAt[T](old, sh), nil
		}
		a.remember(target, word.Addr, old)
		if elemAt[T](old, sh) != compare {
			return elemAt[T](old, sh), nil
		}
		guess = old
	}
}

// ErrAlign means Create was given a slice whose elements are not aligned to
// their size (only possible through unsafe, or with 8-byte elements on a
// 32-bit machine): an element could straddle two of the 8-byte words the
// NIC's atomics work on. Atomics work on every element of every window
// Allocate or Create returns.
var ErrAlign = errors.New("rma: window memory not aligned to its element size")

// wordOf is the 8-byte word of rank target's window holding element disp,
// and the element's byte offset in it.
func (win *Window[T]) wordOf(target, disp int) (transport.Remote, uint) {
	rw := &win.remotes[target]
	addr := rw.addr + uint64(disp*win.esize)
	return transport.Remote{Addr: addr &^ 7, RKey: rw.akey}, uint(addr & 7)
}

func errSizes(origin, result int) error {
	return fmt.Errorf("%w: %d origin elements but %d result elements; give result the origin's length", ErrSize, origin, result)
}

func (win *Window[T]) accumulate(origin, result []T, target, disp int, op Op) error {
	if len(origin) <= shortDirect {
		if ran, err := win.shortDirectAccumulate(origin, result, target, disp, op); ran {
			return err
		}
	}
	req, err := win.accumulateNext(origin, result, target, disp, op)
	if err == nil && result != nil {
		err = req.Wait() // the old values are in result when it returns
	}
	return err
}

// accumulateReq runs an accumulate. Bulk accumulates (bulk.go) and Sum on
// 8-byte integers without results return a pending request; the
// compare-and-swap loop returns complete.
func (win *Window[T]) accumulateReq(origin, result []T, target, disp int, op Op) (Request, error) {
	if len(origin) <= shortDirect {
		if ran, err := win.shortDirectAccumulate(origin, result, target, disp, op); ran {
			return Request{}, err
		}
	}
	return win.accumulateNext(origin, result, target, disp, op)
}

// accumulateNext is accumulateReq past the short direct path.
func (win *Window[T]) accumulateNext(origin, result []T, target, disp int, op Op) (Request, error) {
	if win.w.bulkAcc && win.bulkWorthIt(len(origin), op) {
		return win.bulkAccumulate(origin, result, target, disp, op)
	}
	return win.wordAccumulate(origin, result, target, disp, op)
}

// wordAccumulate runs an accumulate with the NIC's 8-byte atomics (it
// keeps no reference to origin or result once it returns).
func (win *Window[T]) wordAccumulate(origin, result []T, target, disp int, op Op) (Request, error) {
	w := win.w
	w.atomicMu.Lock()
	defer w.atomicMu.Unlock()
	direct, err := win.beginAtomics(target, disp, len(origin))
	if err != nil || len(origin) == 0 {
		return Request{}, err
	}
	defer win.endAtomics(target)
	if direct != nil {
		if err := w.f.DirectReady(target); err != nil {
			return Request{}, err
		}
		directAccumulate(direct, origin, result, disp, op)
		return Request{}, nil
	}
	if win.esize == 8 && op == Sum && !isFloat[T]() {
		seq, err := win.fetchAdd(origin, result, target, disp)
		return Request{w: w, rank: target, seq: seq}, err
	}
	return Request{}, win.casLoop(origin, result, target, disp, op)
}

// fetchAdd: one NIC fetch-and-add per element. Without results it returns
// the last request's sequence number, to complete later.
func (win *Window[T]) fetchAdd(origin, result []T, target, disp int) (uint64, error) {
	w, a := win.w, win.w.atom
	var last uint64
	for start := 0; start < len(origin); start += atomWords {
		n := min(atomWords, len(origin)-start)
		ops := a.ops[:n]
		for i := range ops {
			word, _ := win.wordOf(target, disp+start+i)
			land := a.sink() // not waited for: must not land where later results do
			if result != nil {
				land = a.local(i)
			}
			ops[i] = transport.Atomic{Op: transport.FetchAddOp, Local: land, Remote: word, CompareAdd: bitsOf(origin[start+i])}
		}
		seq, err := w.f.PostAtomics(target, ops)
		if err != nil {
			return 0, err
		}
		last = seq
		if result == nil {
			continue // complete at the next synchronization; the old values are not needed
		}
		if err := w.f.Await(target, last); err != nil {
			return 0, err
		}
		for i := 0; i < n; i++ {
			result[start+i] = fromBits[T](a.word(i))
		}
		last = 0
	}
	return last, nil
}

// casLoop: compare-and-swap rounds over the words holding the elements.
func (win *Window[T]) casLoop(origin, result []T, target, disp int, op Op) error {
	w, a := win.w, win.w.atom
	esize := win.esize
	first, _ := win.wordOf(target, disp)
	end := win.remotes[target].addr + uint64((disp+len(origin))*esize)
	nwords := int((end - first.Addr + 7) / 8)
	for start := 0; start < nwords; start += atomWords {
		n := min(atomWords, nwords-start)
		guess, done := a.guess[:n], a.done[:n]
		for i := range guess {
			guess[i] = a.guessFor(target, first.Addr+uint64((start+i)*8))
		}
		clear(done)
		pending := n
		for pending > 0 {
			ops := a.ops[:0]
			for i := 0; i < n; i++ {
				if done[i] {
					continue
				}
				wordAddr := first.Addr + uint64((start+i)*8)
				want := win.combineWord(guess[i], wordAddr, origin, target, disp, op)
				a.remember(target, wordAddr, want) // if the swap succeeds
				ops = append(ops, transport.Atomic{Op: transport.CompareSwapOp, Local: a.local(i),
					Remote: transport.Remote{Addr: wordAddr, RKey: first.RKey}, CompareAdd: guess[i], Swap: want})
			}
			last, err := w.f.PostAtomics(target, ops)
			if err != nil {
				return err
			}
			if err := w.f.Await(target, last); err != nil {
				return err
			}
			pending = 0
			for i := 0; i < n; i++ {
				if done[i] {
					continue
				}
				old := a.word(i)
				if old != guess[i] {
					guess[i] = old // retry with the real value
					a.remember(target, first.Addr+uint64((start+i)*8), old)
					pending++
					continue
				}
				if result != nil {
					win.extractWord(old, first.Addr+uint64((start+i)*8), result, target, disp, len(origin))
				}
				done[i] = true
			}
		}
	}
	return nil
}

// combineWord applies op to the elements of the accumulate that lie in the
// word at wordAddr, starting from the word's (guessed) value g.
func (win *Window[T]) combineWord(g, wordAddr uint64, origin []T, target, disp int, op Op) uint64 {
	base := win.remotes[target].addr + uint64(disp*win.esize)
	for b := uint64(0); b < 8; b += uint64(win.esize) {
		a := wordAddr + b
		if a < base || a >= base+uint64(len(origin)*win.esize) {
			continue
		}
		i := int((a - base) / uint64(win.esize))
		sh := uint(b)
		g = withElem(g, sh, apply(op, elemAt[T](g, sh), origin[i]))
	}
	return g
}

// extractWord copies the old values of the elements in the word into result.
func (win *Window[T]) extractWord(old, wordAddr uint64, result []T, target, disp, count int) {
	base := win.remotes[target].addr + uint64(disp*win.esize)
	for b := uint64(0); b < 8; b += uint64(win.esize) {
		a := wordAddr + b
		if a < base || a >= base+uint64(count*win.esize) {
			continue
		}
		result[(a-base)/uint64(win.esize)] = elemAt[T](old, uint(b))
	}
}
