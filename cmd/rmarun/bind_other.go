//go:build unix && !linux

package main

import "fmt"

// A binding is where a host's ranks run; binding is Linux only.
type binding struct {
	sets    []cpuSet
	sharing []int
}

type cpuSet struct{}

// bindRanks refuses any policy but none: this system cannot bind.
func bindRanks(policy string, n int, oversubscribe bool) (*binding, error) {
	if policy == "" || policy == bindNone {
		return nil, nil
	}
	return nil, fmt.Errorf("-bind-to %s: binding ranks to CPUs is supported on Linux only", policy)
}

// startOn calls start.
func startOn(set *cpuSet, start func() error) error { return start() }
