package main

import (
	"fmt"
	"time"

	"github.com/rmago/rmago/rma"
)

// roundTrip does one round trip of n elements; with full set it stamps
// and checks every element, otherwise a few (first, middle, last), so that
// timed round trips do not spend their time verifying.
type roundTrip func(n int, full bool) error

// runSweep measures rt for every size of the sweep and records a result
// per size. Warm-up round trips and one round trip after the timed ones
// check every element; timed ones check the stamped elements. With
// barrier, the ranks meet before each timed repetition (not in fence3,
// whose first fence does it, as in the reference method).
func (j *job) runSweep(s *sweep, bench, mode string, ranks int, barrier bool, rt roundTrip, step *int, steps int) error {
	if !j.settled && j.opt.settle > 0 {
		if err := j.w.Barrier(); err != nil {
			return err
		}
		j.settleOnce()
	}
	for e := s.minExp; e <= s.maxExp; e++ {
		n := 1 << e
		iters := s.itersFor(n)
		j.prog.step(fmt.Sprintf("%s %s, 2^%d elements", bench, mode, e), *step, steps)
		for range s.warmup * iters {
			if err := rt(n, true); err != nil {
				return err
			}
		}
		times := make([]float64, s.reps)
		for rep := range times {
			if barrier {
				if err := j.w.Barrier(); err != nil {
					return err
				}
			}
			start := time.Now()
			for range iters {
				if err := rt(n, false); err != nil {
					return err
				}
			}
			times[rep] = float64(time.Since(start).Nanoseconds()) / 1e3 / float64(iters)
		}
		if err := rt(n, true); err != nil {
			return err
		}
		r := Result{Bench: bench, Sync: mode, Window: s.window, Ranks: ranks, Elements: n, Bytes: 8 * n,
			Metric: MetricRTT, Iters: iters, Verified: true}
		r.summarize(times)
		j.add(r)
		*step++
	}
	return nil
}

// stamp is the value of element i in round r: exact in a float64, and
// different for every (round, element) pair that a run can produce.
func stamp(round, i int) float64 {
	return float64(uint64(round)<<24 | uint64(i)&(1<<24-1))
}

// stamped lists the elements a round trip of n elements stamps.
func stamped(n int, full bool, f func(i int)) {
	if full {
		for i := range n {
			f(i)
		}
		return
	}
	f(0)
	if n > 2 {
		f(n / 2)
	}
	if n > 1 {
		f(n - 1)
	}
}

// fill stamps buf for round.
func fill(buf []float64, round int, full bool) {
	stamped(len(buf), full, func(i int) { buf[i] = stamp(round, i) })
}

// verify checks buf's stamps for round; the error says who saw what.
func verify(buf []float64, round int, full bool, where string) error {
	var err error
	stamped(len(buf), full, func(i int) {
		if err == nil && buf[i] != stamp(round, i) {
			err = fmt.Errorf("DATA VERIFICATION FAILED: %s, round %d, %d elements: element %d is %v, want %v",
				where, round, len(buf), i, buf[i], stamp(round, i))
		}
	})
	return err
}

// pollFlag waits until element i of win's own memory equals want, with
// AwaitLocal: the documented way to poll a flag (atomic reads, the fabric
// driven between them, the peer's earlier writes ordered before this
// rank's plain reads once it returns).
func pollFlag(win *rma.Window[float64], i int, want float64) error {
	return win.AwaitLocal(i, func(v float64) bool { return v == want })
}

// windows frees a benchmark's windows when it ends: Free is collective, so
// after an error it is skipped (the peers may never reach it; the process
// exits and rmarun ends the job).
type windows []interface{ Free() error }

// free frees the windows in reverse order if *err is nil.
func (ws windows) free(err *error) {
	for i := len(ws) - 1; i >= 0 && *err == nil; i-- {
		*err = ws[i].Free()
	}
}
