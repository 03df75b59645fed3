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

func TestKeys(t *testing.T) {
	seen := map[int64]bool{}
	for i := range 10000 {
		k := key(i)
		if k == 0 || seen[k] {
			t.Fatalf("key(%d) = %d: zero or repeated", i, k)
		}
		seen[k] = true
	}
}

// TestTable runs the table in-process: a roomy table, a full one (every
// slot used: long probe chains that cross ranks), and one slot per rank.
func TestTable(t *testing.T) {
	for _, c := range []struct{ ranks, keys, slots int }{{1, 50, 100}, {2, 200, 300}, {3, 100, 67}, {4, 300, 375}, {4, 2, 2}} {
		t.Run(fmt.Sprintf("%dranks/%dkeys/%dslots", c.ranks, c.keys, c.slots), func(t *testing.T) {
			rmatest.Run(t, c.ranks, func(w *rma.World) error {
				o, err := run(w, config{keys: c.keys, slots: c.slots})
				if err == nil && !o.verified {
					err = fmt.Errorf("not verified: %s", o.why)
				}
				return err
			})
		})
	}
}

func TestProcesses(t *testing.T) {
	apptest.Run(t, 4, "-keys", "400")
}
