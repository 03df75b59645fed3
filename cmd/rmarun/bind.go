//go:build unix

package main

import "fmt"

// Binding policies (-bind-to): a rank runs on the CPUs of one unit of its
// host, the units dealt in order to the host's ranks.
const (
	bindNone     = "none"     // the ranks run where the scheduler puts them
	bindCore     = "core"     // one core each, with all its hardware threads
	bindHWThread = "hwthread" // one hardware thread (logical CPU) each
)

// bindPolicies lists the -bind-to values.
var bindPolicies = []string{bindNone, bindCore, bindHWThread}

// dealUnits gives each of n ranks a unit of units (index into it), in
// order, wrapping round if oversubscribe allows it. It also returns, for
// each rank, how many of the n ranks share its unit, itself included.
func dealUnits(units, n int, policy string, oversubscribe bool) (unit, sharing []int, err error) {
	if units == 0 {
		return nil, nil, fmt.Errorf("-bind-to %s: this host has no CPU to bind to", policy)
	}
	if n > units && !oversubscribe {
		return nil, nil, fmt.Errorf("-bind-to %s: %d ranks on this host, which has %d %ss for them; give --oversubscribe to share them or -bind-to none", policy, n, units, policy)
	}
	unit, sharing = make([]int, n), make([]int, n)
	for i := range n {
		unit[i] = i % units
		sharing[i] = n / units
		if i%units < n%units {
			sharing[i]++
		}
	}
	return unit, sharing, nil
}
