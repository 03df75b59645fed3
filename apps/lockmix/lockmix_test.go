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
	for _, c := range []struct {
		n   int
		hot bool
	}{{1, false}, {2, false}, {3, false}, {5, false}, {4, true}} {
		t.Run(fmt.Sprintf("%dranks/hot=%v", c.n, c.hot), func(t *testing.T) {
			rmatest.Run(t, c.n, func(w *rma.World) error {
				o, err := run(w, config{rounds: 30, hot: c.hot})
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
	const n = 7
	cfg := config{rounds: 50}
	var sum, excl int64
	for r := range n {
		sum += increments(cfg, r, n)
		for i := range cfg.rounds {
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
	apptest.Run(t, 3, "-rounds", "30", "-hot")
}
