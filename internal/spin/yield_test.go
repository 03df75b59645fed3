package spin

import (
	"testing"
	"time"
)

// TestYielderPaces: with processors to spare a wait yields once per
// GoschedGap, counted from its first call; with one processor, at every
// call.
func TestYielderPaces(t *testing.T) {
	t0 := time.Unix(1000, 0)
	y := Yielder{Procs: 2}
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, false}, // starts the count
		{GoschedGap / 2, false},
		{GoschedGap, true},
		{GoschedGap + time.Microsecond, false},
		{2*GoschedGap - time.Nanosecond, false},
		{2 * GoschedGap, true},
		{5 * GoschedGap, true},
	}
	for i, s := range steps {
		if got := y.Yield(t0.Add(s.at)); got != s.want {
			t.Errorf("step %d (at %v): yielded %v, want %v", i, s.at, got, s.want)
		}
	}
	alone := Yielder{Procs: 1}
	for i := range 3 {
		if !alone.Yield(t0) {
			t.Errorf("GOMAXPROCS 1, call %d: did not yield", i)
		}
	}
	if !alone.Alone() || y.Alone() {
		t.Errorf("Alone: %v with 1 processor, %v with 2", alone.Alone(), y.Alone())
	}
}
