package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/rmago/rmago/apps/internal/apptest"
	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	apptest.Cleanup()
	os.Exit(code)
}

// TestLockMix runs the mix in-process at a few job sizes: every pair must
// end at its exact count with no torn read.
func TestLockMix(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("%dranks", n), func(t *testing.T) {
			rmatest.Run(t, n, func(w *rma.World) error {
				o, err := run(w, 30, false)
				if err == nil && !o.verified {
					err = fmt.Errorf("not verified: %s", o.why)
				}
				return err
			})
		})
	}
}

// TestIncrements: the expected counts add up to the exclusive rounds.
func TestIncrements(t *testing.T) {
	const n, rounds = 7, 50
	var sum, excl int64
	for r := range n {
		sum += increments(r, n, rounds)
		for i := range rounds {
			if kind(r, i) == 1 {
				excl++
			}
		}
	}
	if sum != excl {
		t.Fatalf("increments sum to %d, want %d exclusive rounds", sum, excl)
	}
}

func TestProcesses(t *testing.T) {
	apptest.Run(t, 4, "-rounds", "30")
}
