package launch

import (
	"os"
	"strconv"
	"sync"
)

// EnvNotifyFD names the file descriptor (a decimal number, 3 under rmarun)
// of a pipe on which a rank tells its launcher how far it got through
// start-up. The launcher reads it to notice at once a rank that ended
// without joining the job, and to bound the time ranks take to join. A
// program started some other way does not have it, and the functions below
// then do nothing.
const EnvNotifyFD = "RMAGO_NOTIFY_FD"

// The bytes written on the notify pipe.
const (
	NotifyStartByte  = 'i' // the rank has entered the bootstrap (rma.Init)
	NotifyJoinedByte = 'j' // the rank has met every other rank
)

var notify struct {
	once sync.Once
	mu   sync.Mutex
	f    *os.File // nil once closed, or if there is no pipe
}

// notifyFile opens the pipe named by EnvNotifyFD once, and removes the
// variable so that programs this rank starts do not write on a descriptor
// that is not theirs.
func notifyFile() *os.File {
	notify.once.Do(func() {
		v := os.Getenv(EnvNotifyFD)
		if v == "" {
			return
		}
		os.Unsetenv(EnvNotifyFD)
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 || !isPipe(fd) {
			return
		}
		closeOnExec(fd)
		notify.f = os.NewFile(uintptr(fd), "rmago-notify")
	})
	return notify.f
}

// NotifyStart tells the launcher that this rank has begun joining the job.
// The bootstrap calls it before it contacts any peer.
func NotifyStart() {
	notify.mu.Lock()
	defer notify.mu.Unlock()
	if f := notifyFile(); f != nil {
		f.Write([]byte{NotifyStartByte})
	}
}

// NotifyJoined tells the launcher that this rank has met every other rank,
// and closes the pipe: later calls, and later jobs joined by the same
// process, do nothing.
func NotifyJoined() {
	notify.mu.Lock()
	defer notify.mu.Unlock()
	if f := notifyFile(); f != nil {
		f.Write([]byte{NotifyJoinedByte})
		f.Close()
		notify.f = nil
	}
}
