package main

import (
	"crypto/rand"
	"fmt"
	"net"
	"time"

	"github.com/rmago/rmago/ci/faults"
)

// attackConns is the number of hostile connections a bootstrap fault opens.
const attackConns = 3

// attack opens hostile connections to the rendezvous address (rank 0 must
// be starting: it dials until rank 0 listens, for at most wait) before the
// other ranks are started, so that they are first in rank 0's accept queue:
//
//   - faults.BootSilent: connections that never send a byte, held open;
//   - faults.BootGarbage: one sends a handshake-sized message of random
//     bytes and closes, one sends 4 KiB of random bytes and stays open, one
//     sends a few random bytes (a handshake cut short) and stays open.
//
// It returns the connections to close when the trial ends. Only loopback
// (or whatever address the rendezvous has) is dialled.
func attack(addr string, f faults.Fault, wait time.Duration) ([]net.Conn, error) {
	var conns []net.Conn
	deadline := time.Now().Add(wait)
	for len(conns) < attackConns {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			if len(conns) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // rank 0 not listening yet
				continue
			}
			closeAll(conns)
			return nil, fmt.Errorf("dialling the rendezvous %s: %v", addr, err)
		}
		if f == faults.BootGarbage {
			size := []int{96, 4096, 7}[len(conns)%3]
			junk := make([]byte, size)
			rand.Read(junk)
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(junk)
			if len(conns)%3 == 0 {
				c.Close()
				conns = append(conns, nil)
				continue
			}
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}
