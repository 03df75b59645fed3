package auth

import (
	"errors"
	"net"
	"testing"
)

func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

func TestHandshake(t *testing.T) {
	secret := []byte("job secret")
	cases := []struct {
		name             string
		dialKey, accKey  []byte
		dialRole, accRle string
		ok               bool
	}{
		{"same secret", secret, secret, "qp", "qp", true},
		{"wrong secret", []byte("other"), secret, "qp", "qp", false},
		{"other role", secret, secret, "bootstrap", "qp", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, a := pair(t)
			var want [PayloadLen]byte
			copy(want[:], "payload bound to the proof")
			res := make(chan error, 1)
			go func() { res <- Dial(d, c.dialKey, c.dialRole, want) }()
			got, aerr := Accept(a, c.accKey, c.accRle)
			if aerr != nil {
				a.Close() // the acceptor drops the connection, as servers do
			}
			derr := <-res
			if c.ok {
				if aerr != nil || derr != nil {
					t.Fatalf("accept %v, dial %v", aerr, derr)
				}
				if got != want {
					t.Fatalf("payload %q, want %q", got, want)
				}
				return
			}
			if !errors.Is(aerr, ErrAuth) || !errors.Is(derr, ErrAuth) {
				t.Fatalf("want ErrAuth on both sides, got accept %v, dial %v", aerr, derr)
			}
		})
	}
}

func TestAcceptRejectsGarbage(t *testing.T) {
	d, a := pair(t)
	go func() {
		buf := make([]byte, 40)
		d.Read(buf)
		d.Write(make([]byte, 96)) // zeros: no valid MAC
	}()
	if _, err := Accept(a, []byte("k"), "qp"); !errors.Is(err, ErrAuth) {
		t.Fatalf("got %v, want ErrAuth", err)
	}
}
