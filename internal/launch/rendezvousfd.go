package launch

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

// EnvRendezvousFD names the file descriptor (a decimal number) of rank 0's
// rendezvous listener, opened by the launcher on the port of
// EnvRendezvous and inherited by rank 0. A port found free and closed
// again (FreePort) can be taken by any process before rank 0 listens on
// it; a listener the launcher holds from the start cannot. Ranks other
// than 0, and programs started some other way, do not have the variable.
const EnvRendezvousFD = "RMAGO_RENDEZVOUS_FD"

// ListenFree opens a TCP listener on a free port of ip, for a rendezvous
// that a rank will inherit (EnvRendezvousFD), and returns it with its port.
func ListenFree(ip string) (*net.TCPListener, int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, 0, err
	}
	tl := ln.(*net.TCPListener)
	return tl, tl.Addr().(*net.TCPAddr).Port, nil
}

// InheritedListener returns the rendezvous listener named by
// EnvRendezvousFD, or nil if the variable is unset. It removes the
// variable, so that programs this rank starts do not take the descriptor
// for theirs. The caller closes the listener once the rendezvous is over.
func InheritedListener() (*net.TCPListener, error) {
	v, ok := os.LookupEnv(EnvRendezvousFD)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(EnvRendezvousFD)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not a file descriptor >= 3", EnvRendezvousFD, v)
	}
	f := os.NewFile(uintptr(fd), "rmago-rendezvous")
	defer f.Close() // net.FileListener keeps a duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s=%d: %w", EnvRendezvousFD, fd, err)
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("%s=%d: not a TCP listener", EnvRendezvousFD, fd)
	}
	return tl, nil
}
