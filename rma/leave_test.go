package rma_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestCloseEndsWaitsForIt: a rank that calls Close while the others still
// expect it in a fence, at a PSCW Start or at a barrier ends their waits
// at once, not at the timeout: the error names it and says it left
// (ErrPeerGone, or ErrPeer for a fence, which the survivors tell each
// other of), never ErrTimeout. On soft (notes through queue pairs) and
// shm (direct notes in shared memory). Every rank's Close returns
// without waiting for the timeout either.
func TestCloseEndsWaitsForIt(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("needs its ranks in one process")
	}
	const leaver = 2
	for _, provider := range []string{"soft", "shm"} {
		for _, op := range []string{"fence", "start", "barrier"} {
			t.Run(provider+"/"+op, func(t *testing.T) {
				errs := rmatest.StartOn(provider, 3, func(w *rma.World) error {
					win, err := rma.Allocate[int64](w, 4)
					if err != nil {
						return err
					}
					if w.Rank() == leaver {
						// Its Close may report the others' leaving after
						// their fence failed on it, but not a timeout.
						if err := w.Close(); errors.Is(err, rma.ErrTimeout) {
							return err
						}
						return nil
					}
					switch op {
					case "fence":
						err = win.Fence(0)
					case "start":
						err = win.Start([]int{leaver}, 0)
					case "barrier":
						err = w.Barrier()
					}
					// The survivors leave too, whatever their Close says of
					// rank 2, but without waiting for the timeout.
					if cerr := w.Close(); errors.Is(cerr, rma.ErrTimeout) {
						return fmt.Errorf("Close after %s waited for the timeout: %w", op, cerr)
					}
					switch {
					case err == nil:
						return fmt.Errorf("%s succeeded with rank %d gone", op, leaver)
					case errors.Is(err, rma.ErrTimeout):
						return fmt.Errorf("%s waited for the timeout: %w", op, err)
					case !errors.Is(err, rma.ErrPeerGone) && !errors.Is(err, rma.ErrPeer):
						return fmt.Errorf("%s: not a peer error: %w", op, err)
					case !strings.Contains(err.Error(), fmt.Sprintf("rank %d", leaver)):
						return fmt.Errorf("%s: the error does not name rank %d: %w", op, leaver, err)
					}
					return nil
				})
				for r, err := range errs {
					if errors.Is(err, rma.ErrClosed) {
						continue // rmatest closes the World once more
					}
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}
