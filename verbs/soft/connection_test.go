package soft

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestDialTCP: a listener is reached; a port nobody listens on is refused
// at once (not retried: the peer is gone), and only unreachable networks
// count as transient.
func TestDialTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	conn, err := (&device{}).dialTCP(addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	ln.Close()
	if _, err := (&device{}).dialTCP(addr, time.Minute); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial of a closed port: %v", err)
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{syscall.EHOSTUNREACH, true},
		{syscall.ENETUNREACH, true},
		{syscall.ECONNREFUSED, false},
		{&net.OpError{Op: "dial", Err: syscall.EHOSTUNREACH}, true},
	} {
		if got := transientDialErr(c.err); got != c.want {
			t.Errorf("transientDialErr(%v) = %v", c.err, got)
		}
	}
}
