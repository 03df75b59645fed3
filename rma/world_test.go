package rma_test

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestWorldTimeout: World.Timeout is the bound the job was started with,
// the one every blocking call uses.
func TestWorldTimeout(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("the in-process harness sets the timeout")
	}
	rmatest.Run(t, 2, func(w *rma.World) error {
		if got := w.Timeout(); got != rmatest.Timeout {
			return fmt.Errorf("Timeout() = %v, want %v", got, rmatest.Timeout)
		}
		return nil
	})
}
