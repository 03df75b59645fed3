package launch

import (
	"net"
	"os"
	"strconv"
	"testing"
)

// TestInheritedListener: the listener named by EnvRendezvousFD accepts
// connections to the port it was opened on, and the variable is gone
// afterwards; without the variable there is no listener and no error.
func TestInheritedListener(t *testing.T) {
	if ln, err := InheritedListener(); ln != nil || err != nil {
		t.Fatalf("without %s: %v, %v; want nil, nil", EnvRendezvousFD, ln, err)
	}
	orig, port, err := ListenFree("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := orig.File()
	orig.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvRendezvousFD, strconv.Itoa(int(f.Fd())))
	ln, err := InheritedListener()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, ok := os.LookupEnv(EnvRendezvousFD); ok {
		t.Errorf("%s is still set", EnvRendezvousFD)
	}
	if got := ln.Addr().(*net.TCPAddr).Port; got != port {
		t.Errorf("listener on port %d, want %d", got, port)
	}
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
}

// TestInheritedListenerBad: a value that is no descriptor, or a
// descriptor that is no listener, is an error.
func TestInheritedListenerBad(t *testing.T) {
	for _, v := range []string{"x", "1", "999999"} {
		t.Setenv(EnvRendezvousFD, v)
		if ln, err := InheritedListener(); err == nil {
			ln.Close()
			t.Errorf("%s=%s: no error", EnvRendezvousFD, v)
		}
	}
}
