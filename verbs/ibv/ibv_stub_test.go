//go:build !ibv || !linux || !cgo

package ibv

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// Without the ibv build tag the provider is not registered, discovery does
// not try it, and asking for it by name says how to build it.
func TestStubProvider(t *testing.T) {
	_, err := verbs.Lookup("ibv")
	if !errors.Is(err, verbs.ErrUnknownProvider) || !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "-tags ibv") {
		t.Errorf("Lookup: %v; want ErrUnknownProvider and ErrNoDevice with build instructions", err)
	}
	if slices.Contains(verbs.Providers(), "ibv") {
		t.Errorf("ibv registered without the build tag: %v", verbs.Providers())
	}
	for _, c := range verbs.Discover("") {
		if c.Name == "ibv" {
			t.Errorf("discovery lists ibv without the build tag")
		}
	}
	_, err = verbs.Open("ibv", "", verbs.Config{GIDIndex: -1})
	if !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "libibverbs-dev") {
		t.Errorf("Open: %v; want ErrNoDevice with build instructions", err)
	}
	if Available("", "") {
		t.Errorf("Available() = true without the provider compiled in")
	}
}
