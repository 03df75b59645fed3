package soft

import (
	"fmt"
	"syscall"

	"github.com/rmago/rmago/verbs"
)

// DefaultCongestion is the TCP congestion control the provider's
// connections use unless verbs.Config.TCPCongestion names another: Reno,
// which every Linux kernel builds in and lets unprivileged programs pick.
//
// Why not the host's default: a window's traffic is bursts of up to
// megabytes separated by idle round trips, on a low-latency network. With
// BBR (the default of this project's test machines) a loopback 2-8 MiB
// put, get or lock round trip took 1.4-1.6x as long as with Reno (fence2
// 8 MiB 3349-3481 µs against 2196-2341; docs/benchmarks.md), and 8-byte
// traffic is the same under both.
const DefaultCongestion = "reno"

// SystemCongestion, as verbs.Config.TCPCongestion, keeps the host's
// default (net.ipv4.tcp_congestion_control).
const SystemCongestion = "system"

// congestionOf is the congestion control algorithm cfg asks for ("": the
// host's default), checked on a socket of its own so that a name the
// kernel does not offer, or does not let this program pick, fails Open
// rather than a connection later. The default falls back to the host's
// without an error.
func congestionOf(cfg verbs.Config) (string, error) {
	name := cfg.TCPCongestion
	switch name {
	case SystemCongestion:
		return "", nil
	case "":
		if probeCongestion(DefaultCongestion) != nil {
			return "", nil
		}
		return DefaultCongestion, nil
	}
	if err := probeCongestion(name); err != nil {
		return "", fmt.Errorf("%w: TCP congestion control %q: %w (the host offers those in /proc/sys/net/ipv4/tcp_available_congestion_control; without privileges, those in tcp_allowed_congestion_control)", verbs.ErrInvalid, name, err)
	}
	return name, nil
}

// probeCongestion sets name on a new TCP socket.
func probeCongestion(name string) error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return setCongestion(fd, name)
}

func setCongestion(fd int, name string) error {
	return syscall.SetsockoptString(fd, syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, name)
}

// congestionControl is a net.Dialer or net.ListenConfig Control function
// that sets the congestion control name ("": none) on the socket before
// it connects or listens; the connections a listener accepts inherit it.
func congestionControl(name string) func(network, address string, rc syscall.RawConn) error {
	if name == "" {
		return nil
	}
	return func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = setCongestion(int(fd), name) }); cerr != nil {
			return cerr
		}
		if err != nil {
			return fmt.Errorf("TCP congestion control %q: %w", name, err)
		}
		return nil
	}
}
