package main

import (
	"fmt"
	"math"
	"time"

	"github.com/rmago/rmago/apps/internal/coll"
	"github.com/rmago/rmago/apps/internal/report"
	"github.com/rmago/rmago/rma"
)

// exchanger is one way of moving the halo rows: a variant of the app.
type exchanger interface {
	// exchange brings phase k's halos in: when it returns, s.top[k%2] and
	// s.bot[k%2] hold the neighbours' boundary rows as of the end of phase
	// k-1, and this rank's rows are free to change.
	exchange(k int) error
	// free releases the variant's windows (the stripe's memory with them).
	free() error
}

// variants are the ways of exchanging halos, by -variant name.
var variants = map[string]func(w *rma.World, s *stripe) (exchanger, error){
	"big":   newBig,
	"split": newSplit,
	"lock":  newLock,
	"pscw":  newPSCW,
	"get":   newGet,
}

// variantNames lists the variants in a fixed order.
func variantNames() []string { return []string{"big", "split", "lock", "pscw", "get"} }

// outcome is what a rank learns from a run.
type outcome struct {
	iters    int
	resid    float64
	elapsed  time.Duration // parallel run, the slowest rank's
	seq      time.Duration // sequential run on rank 0
	verified bool
	why      string // when not verified
}

// run solves p with the given variant on every rank of w (reps times, and
// reports the best time), then verifies
// the result against a sequential run on rank 0 (bit for bit, the
// iteration count and the residual included). It is collective.
func run(w *rma.World, p problem, variant string, reps int) (outcome, error) {
	var out outcome
	mk, ok := variants[variant]
	if !ok {
		return out, fmt.Errorf("unknown variant %q (have %v)", variant, variantNames())
	}
	if p.n < 3 || p.n < w.Size() {
		return out, fmt.Errorf("n = %d: need n >= 3 and at least one row per rank (%d ranks)", p.n, w.Size())
	}
	if p.check < 1 || p.iters < 1 || reps < 1 {
		return out, fmt.Errorf("need iters, check and reps >= 1")
	}
	red, err := coll.NewReducer[float64](w, 4)
	if err != nil {
		return out, err
	}
	defer red.Free()
	s := newStripe(p.n, w.Size(), w.Rank(), p.omega)
	ex, err := mk(w, s)
	if err != nil {
		return out, err
	}

	// Each repetition solves from the initial grid; the best time counts.
	// Phase numbers run on across repetitions (the lock variant's flags
	// count them); every repetition has an even number of phases, so a
	// phase's colour and halo parity stay k%2.
	base := 0
	for rep := range reps {
		if rep > 0 {
			s.reset()
		}
		if err := w.Barrier(); err != nil {
			return out, err
		}
		start := time.Now()
		phases := 0
		phase := func(k int) (float64, error) {
			phases++
			if err := ex.exchange(base + k); err != nil {
				return 0, err
			}
			return s.relax(k), nil
		}
		out.iters, out.resid, err = iterate(p, phase, red.Max)
		if err != nil {
			return out, err
		}
		base += phases
		slowest, err := red.Max(time.Since(start).Seconds())
		if err != nil {
			return out, err
		}
		if d := time.Duration(slowest * float64(time.Second)); rep == 0 || d < out.elapsed {
			out.elapsed = d
		}
	}

	if err := verify(w, p, s, red, reps, &out); err != nil {
		return out, err
	}
	return out, ex.free()
}

// verify runs the sequential solver on rank 0 (alone: the other ranks wait
// in a fence; reps times, the best time counts) in a window of the whole
// grid, from which every rank then gets its own rows and compares them bit
// for bit.
func verify(w *rma.World, p problem, s *stripe, red *coll.Reducer[float64], reps int, out *outcome) error {
	me := w.Rank()
	whole := 0
	if me == 0 {
		whole = p.n * p.n
	}
	ref, err := rma.Allocate[float64](w, whole)
	if err != nil {
		return err
	}
	var seqIters int
	var seqResid float64
	if me == 0 {
		g := ref.Local()
		for rep := range reps {
			initGrid(g, p.n)
			start := time.Now()
			seqIters, seqResid = sequential(p, g)
			if d := time.Since(start); rep == 0 || d < out.seq {
				out.seq = d
			}
		}
	}
	if err := ref.Fence(0); err != nil {
		return err
	}
	mine := make([]float64, s.h()*p.n)
	if err := ref.Get(mine, 0, s.lo*p.n); err != nil {
		return err
	}
	if err := ref.Fence(rma.NoSucceed); err != nil {
		return err
	}
	bad := 0
	first := -1
	for i, v := range mine {
		if math.Float64bits(v) != math.Float64bits(s.rows[i]) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		out.why = fmt.Sprintf("rank %d: %d points differ, first (%d, %d): %v, sequential %v",
			me, bad, s.lo+first/p.n, first%p.n, s.rows[first], mine[first])
	}
	// Rank 0 compares the iteration count and residual; everyone learns
	// the verdict and the sequential time.
	sums, err := red.Allreduce([]float64{float64(bad), float64(seqIters), seqResid, out.seq.Seconds()}, coll.Sum[float64])
	if err != nil {
		return err
	}
	out.seq = time.Duration(sums[3] * float64(time.Second))
	switch {
	case sums[0] > 0 && out.why == "":
		out.why = fmt.Sprintf("%v points differ on other ranks", sums[0])
	case sums[0] == 0 && (int(sums[1]) != out.iters || math.Float64bits(sums[2]) != math.Float64bits(out.resid)):
		out.why = fmt.Sprintf("sequential run: %v iterations, residual %v; parallel: %d, %v", sums[1], sums[2], out.iters, out.resid)
	}
	out.verified = out.why == ""
	return ref.Free()
}

// result is the report of a run.
func result(w *rma.World, p problem, variant string, o outcome) *report.Result {
	r := report.New(w, "sor", variant)
	r.N, r.Size = p.n, fmt.Sprintf("%d×%d grid", p.n, p.n)
	r.Iterations, r.IterUnit = o.iters, "sweeps"
	r.Verified = o.verified
	r.Extra = map[string]float64{"residual": o.resid}
	r.Finish(o.elapsed, o.seq)
	return r
}
