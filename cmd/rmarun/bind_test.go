//go:build unix

package main

import (
	"slices"
	"testing"
)

// dealUnits deals units in rank order and counts who shares each.
func TestDealUnits(t *testing.T) {
	for _, c := range []struct {
		units, n      int
		over          bool
		unit, sharing []int
		fails         bool
	}{
		{units: 4, n: 2, unit: []int{0, 1}, sharing: []int{1, 1}},
		{units: 2, n: 2, unit: []int{0, 1}, sharing: []int{1, 1}},
		{units: 2, n: 3, fails: true},
		{units: 2, n: 3, over: true, unit: []int{0, 1, 0}, sharing: []int{2, 1, 2}},
		{units: 2, n: 5, over: true, unit: []int{0, 1, 0, 1, 0}, sharing: []int{3, 2, 3, 2, 3}},
		{units: 0, n: 1, over: true, fails: true},
	} {
		unit, sharing, err := dealUnits(c.units, c.n, bindCore, c.over)
		if c.fails {
			if err == nil {
				t.Errorf("%d ranks on %d units (oversubscribe %t): no error", c.n, c.units, c.over)
			}
			continue
		}
		if err != nil || !slices.Equal(unit, c.unit) || !slices.Equal(sharing, c.sharing) {
			t.Errorf("%d ranks on %d units: %v %v %v, want %v %v", c.n, c.units, unit, sharing, err, c.unit, c.sharing)
		}
	}
}
