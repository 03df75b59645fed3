package rma_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestProviderOf: World.ProviderOf names the provider that carries each
// peer: the one RMAGO_PROVIDER forces, or, in a mixed job (auto, ranks on
// pretend nodes with RMAGO_TEST_NODES=2), shm for the ranks of this rank's
// node and the network provider for the others. Out of range is ErrRank.
func TestProviderOf(t *testing.T) {
	rmatest.Run(t, 4, func(w *rma.World) error {
		local := w.LocalPeers()
		forced := rmatest.Provider()
		if rmatest.InProcesses() { // rma.Init: RMAGO_PROVIDER, default auto
			if forced = os.Getenv("RMAGO_PROVIDER"); forced == "" {
				forced = "auto"
			}
		}
		for r := range w.Size() {
			want := forced
			if want == "auto" {
				want = w.Provider().Provider // the network provider
				if slices.Contains(local, r) {
					want = "shm"
				}
			}
			got, err := w.ProviderOf(r)
			if err != nil || got != want {
				return fmt.Errorf("ProviderOf(%d) = %q, %v; want %q", r, got, err, want)
			}
		}
		for _, r := range []int{-1, w.Size()} {
			if _, err := w.ProviderOf(r); !errors.Is(err, rma.ErrRank) {
				return fmt.Errorf("ProviderOf(%d): %v, want ErrRank", r, err)
			}
		}
		return nil
	})
}
