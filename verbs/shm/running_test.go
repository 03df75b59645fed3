package shm

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestStateRunning reads the state letter after the command name, which
// may hold spaces and parentheses.
func TestStateRunning(t *testing.T) {
	for _, c := range []struct {
		stat           string
		running, known bool
	}{
		{"123 (sleep) S 1 123 123 0 -1", true, true},
		{"123 (a) b) R 1 2", true, true},
		{"123 (x y) D 1", true, true},
		{"123 (rank) T 1 2", false, true},
		{"123 (rank) t 1 2", false, true},
		{"123 (rank) Z 1 2", false, true},
		{"123 (rank)", false, false},
		{"garbage", false, false},
	} {
		if r, k := stateRunning([]byte(c.stat)); r != c.running || k != c.known {
			t.Errorf("%q: running %v known %v, want %v %v", c.stat, r, k, c.running, c.known)
		}
	}
}

// TestPeerRunning follows a real process through its states: running
// (asleep in the kernel), stopped by SIGSTOP, running again after
// SIGCONT, gone once killed and reaped.
func TestPeerRunning(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	defer cmd.Process.Kill()
	q := &qp{peerPid: cmd.Process.Pid}
	// until polls the process's state (the kernel changes it a moment
	// after the signal), at most 10 s.
	until := func(want bool, what string) {
		t.Helper()
		for i := 0; i < 10000; i++ {
			r, known := q.PeerRunning()
			if !known {
				t.Fatalf("%s: state unknown", what)
			}
			if r == want {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("%s: running is not %v", what, want)
	}
	until(true, "started")
	cmd.Process.Signal(syscall.SIGSTOP)
	until(false, "stopped")
	cmd.Process.Signal(syscall.SIGCONT)
	until(true, "continued")
	cmd.Process.Kill()
	cmd.Wait()
	if r, known := q.PeerRunning(); r || !known {
		t.Fatalf("gone: running %v known %v, want false true", r, known)
	}
	if r, known := (&qp{}).PeerRunning(); r || known {
		t.Fatalf("no pid: running %v known %v, want false false", r, known)
	}
}
