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

// TestHistogram runs both modes in-process; bins not divisible by the
// ranks, fewer bins than ranks, and one hot bin for everyone.
func TestHistogram(t *testing.T) {
	for _, batch := range []bool{false, true} {
		for _, c := range []struct{ ranks, bins, updates int }{{1, 10, 500}, {2, 1, 300}, {3, 2, 400}, {4, 101, 2000}} {
			t.Run(fmt.Sprintf("batch=%v/%dranks/%dbins", batch, c.ranks, c.bins), func(t *testing.T) {
				rmatest.Run(t, c.ranks, func(w *rma.World) error {
					o, err := run(w, config{bins: c.bins, updates: c.updates, batch: batch, seed: 7})
					if err == nil && !o.verified {
						err = fmt.Errorf("not verified: %s", o.why)
					}
					return err
				})
			})
		}
	}
}

func TestProcesses(t *testing.T) {
	apptest.Run(t, 3, "-bins", "257", "-updates", "3000")
	apptest.Run(t, 2, "-bins", "100", "-updates", "3000", "-batch")
}
