//go:build !ibv || !linux || !cgo

package ibv

import (
	"errors"
	"strings"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// Without the ibv build tag the provider is registered but refuses, saying
// how to build it.
func TestStubProvider(t *testing.T) {
	p, err := verbs.Lookup("ibv")
	if err != nil {
		t.Fatalf("ibv not registered: %v", err)
	}
	if _, err := p.Devices(); !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "-tags ibv") {
		t.Errorf("Devices: %v; want ErrNoDevice with build instructions", err)
	}
	_, err = verbs.Open("ibv", "", verbs.Config{GIDIndex: -1})
	if !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "libibverbs-dev") {
		t.Errorf("Open: %v; want ErrNoDevice with build instructions", err)
	}
	if Available("", "") {
		t.Errorf("Available() = true without the provider compiled in")
	}
}
