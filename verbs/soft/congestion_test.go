package soft

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rmago/rmago/verbs"
)

// congestionOfQP is the congestion control of q's socket.
func congestionOfQP(t *testing.T, q verbs.QP) string {
	t.Helper()
	sq := q.(*qp)
	sq.fdMu.Lock()
	defer sq.fdMu.Unlock()
	name, err := unix.GetsockoptString(sq.rx.fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// TestCongestionControl: by default both ends of a connection, the
// dialing one and the accepted one, run DefaultCongestion; "system" keeps
// the host's default; a name the kernel does not offer fails Open with
// ErrInvalid, and a malformed one too.
func TestCongestionControl(t *testing.T) {
	if os.Getenv("RMAGO_TCP_CONGESTION") != "" {
		t.Skip("RMAGO_TCP_CONGESTION is set")
	}
	a, b := connected(t, 64)
	for _, s := range []*side{a, b} {
		if got := congestionOfQP(t, s.qp); got != DefaultCongestion {
			t.Errorf("congestion control %q, want %q", got, DefaultCongestion)
		}
	}

	host, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skip(err)
	}
	want := strings.TrimSpace(string(host))
	sysCfg := verbs.Config{Secret: secret, Spin: -1, TCPCongestion: SystemCongestion}
	ctxA, err := verbs.Open(Name, "", sysCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ctxA.Close()
	if got := ctxA.(*device).congestion; got != "" {
		t.Errorf("system: device sets %q, want none", got)
	}
	conn, err := ctxA.(*device).dialTCP(a.ctx.(*device).ln.Addr().String(), ConnectTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc, _ := conn.(interface {
		SyscallConn() (syscall.RawConn, error)
	}).SyscallConn()
	var got string
	rc.Control(func(fd uintptr) { got, err = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION) })
	if err != nil || got != want {
		t.Errorf("system: dialed socket runs %q (%v), want the host's %q", got, err, want)
	}

	for _, name := range []string{"no-such-cc", "Reno!"} {
		cfg := verbs.Config{Secret: secret, Spin: -1, TCPCongestion: name}
		ctx, err := verbs.Open(Name, "", cfg)
		if err == nil {
			ctx.Close()
		}
		if !errors.Is(err, verbs.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("Open with congestion control %q: %v, want ErrInvalid naming it", name, err)
		}
	}
}
