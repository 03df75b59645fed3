package transport

import (
	"errors"
	"strings"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// On a host without RDMA devices (this one, CI's) the auto provider falls
// back to soft with one notice, and asking for ibv explicitly fails cleanly.
func TestAutoFallsBackToSoft(t *testing.T) {
	for _, c := range verbs.Discover("") {
		if c.Kind == verbs.KindHardware && c.Err == nil {
			t.Skipf("an RDMA device is usable here (%s)", c.Name)
		}
	}
	var notices []string
	b, err := Rendezvous(RendezvousConfig{Rank: 0, Size: 1, Secret: []byte("0123456789abcdef"), Addr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(b, Options{Provider: "auto", Notice: func(s string) { notices = append(notices, s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Device().Provider != "soft" || len(notices) != 1 || !strings.Contains(notices[0], "soft") {
		t.Fatalf("provider %q, notices %q", f.Device().Provider, notices)
	}
	b, _ = Rendezvous(RendezvousConfig{Rank: 0, Size: 1, Secret: []byte("0123456789abcdef"), Addr: "127.0.0.1"})
	if _, err := Open(b, Options{Provider: "ibv"}); !errors.Is(err, ErrProvider) || !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("explicit ibv without a device: %v", err)
	}
	b, _ = Rendezvous(RendezvousConfig{Rank: 0, Size: 1, Secret: []byte("0123456789abcdef"), Addr: "127.0.0.1"})
	if _, err := Open(b, Options{Provider: "nonesuch"}); !errors.Is(err, verbs.ErrUnknownProvider) {
		t.Fatalf("unknown provider: %v", err)
	}
}
