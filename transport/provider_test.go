package transport

import (
	"errors"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// On a host without RDMA devices (this one, CI's) a job on one node opens
// shm alone (no notice: nothing fell back), a job on two nodes falls back
// to soft for the remote peers with one notice (TestMixedProviderOfEachPeer
// checks it), and asking for ibv explicitly fails cleanly.
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
	if f.Device().Provider != "shm" || len(notices) != 0 {
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
