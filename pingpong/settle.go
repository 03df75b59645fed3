package main

import "time"

// defaultSettle is how long a rank keeps its core busy before it measures
// anything (-settle).
//
// A fresh Go process is slower for its first milliseconds: the runtime's
// monitor thread (sysmon) wakes every 20 µs after start-up and backs off
// to 10 ms only after about 11 ms in which it found no processor to take
// back. A rank bound to one core shares that core with it, so until then
// every round trip pays for its wakes: an 8-byte round trip on shm
// measured 1.2-1.5 µs in one repetition in five instead of 0.41, a soft
// PSCW round trip 12-16 µs instead of 9 for its first 500 (the
// measurements are in docs/benchmarks.md). Sleeping instead of spinning
// does not help: a runtime whose processors are all idle puts its monitor
// to sleep and starts it again at 20 µs. Busy time does. The C side of
// `make compare` (ci/compare/pp.c, putbw.c) settles for as long, so that
// both sides are measured in their steady state.
const defaultSettle = 25 * time.Millisecond

// settleOnce, called once the ranks have met right before their first
// measurement, keeps this rank busy for -settle the first time. Whatever
// comes between the settling and the measurement must not sleep: window
// creation and a barrier whose ranks arrive milliseconds apart (more
// ranks than cores) did, and the monitor was back at its 20 µs tick when
// the first size was measured (one-to-many, 4 ranks on shm: the 8-byte
// round trip 28-30 µs in every round of a make compare run, the sizes
// after it 17-25).
func (j *job) settleOnce() {
	if !j.settled {
		j.settled = true
		settle(j.opt.settle)
	}
}

// settle keeps the calling goroutine busy for d without system calls.
func settle(d time.Duration) {
	if d <= 0 {
		return
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// ms is d in milliseconds, as the JSON reports give durations.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
