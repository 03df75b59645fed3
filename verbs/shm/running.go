package shm

import (
	"bytes"
	"fmt"
	"os"
)

// PeerRunning reports whether the peer process runs (verbs.PeerRunner):
// its state in /proc/PID/stat is running, sleeping, in uninterruptible
// sleep or idle, not stopped (SIGSTOP or a tracer), a zombie or gone.
// known is false when the kernel does not say (no procfs, or the peer's
// pid is not visible here).
func (q *qp) PeerRunning() (running, known bool) {
	if q.peerPid <= 0 {
		return false, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", q.peerPid))
	if os.IsNotExist(err) {
		return false, true // the process is gone
	}
	if err != nil {
		return false, false
	}
	return stateRunning(b)
}

// stateRunning reads the state letter of a /proc/PID/stat line, the field
// after the command name in parentheses (which may itself hold spaces and
// parentheses, so the last ')' ends it).
func stateRunning(stat []byte) (running, known bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false, false
	}
	switch stat[i+2] {
	case 'R', 'S', 'D', 'I', 'W', 'P':
		return true, true
	case 'T', 't', 'Z', 'X', 'x':
		return false, true
	}
	return false, false
}
