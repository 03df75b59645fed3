package soft

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// dialTCP connects to addr within bound. A network that cannot reach the
// host for a moment (no route, network unreachable: an ARP entry not yet
// resolved, a link coming back) is tried again, with growing pauses, until
// the bound; any other error, such as a refused connection (nothing
// listens there: the peer is gone), is returned at once.
func dialTCP(addr string, bound time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(bound)
	pause := 10 * time.Millisecond
	for {
		left := time.Until(deadline)
		if left <= 0 {
			left = time.Millisecond
		}
		conn, err := net.DialTimeout("tcp", addr, left)
		if err == nil || !transientDialErr(err) || time.Now().Add(pause).After(deadline) {
			return conn, err
		}
		time.Sleep(pause)
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// transientDialErr reports whether a failed dial may succeed if tried again.
func transientDialErr(err error) bool {
	return errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
