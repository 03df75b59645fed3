package launch

import (
	"os"
	"strconv"
	"sync"
)

// EnvNotifyFD names the file descriptor (a decimal number) of a pipe on
// which a rank tells its launcher how far it got through start-up. The
// launcher reads it to notice at once a rank that ended without joining
// the job, and to bound the time ranks take to join. The rank keeps the
// pipe open until it exits: the launcher also takes the pipe's end as the
// moment the rank died. A program started some other way does not have
// the variable, and the functions below then do nothing.
const EnvNotifyFD = "RMAGO_NOTIFY_FD"

// The bytes written on the notify pipe.
const (
	NotifyStartByte  = 'i' // the rank has entered the bootstrap (rma.Init)
	NotifyJoinedByte = 'j' // the rank has met every other rank
	NotifyLostByte   = 'p' // followed by a decimal rank and '\n': that peer failed
)

var notify struct {
	once   sync.Once
	mu     sync.Mutex
	f      *os.File // nil if there is no pipe
	joined bool
	lost   map[int]bool // peers reported lost
}

// notifyFile finds the pipe named by EnvNotifyFD, once. It removes the
// variable, and has the pipe closed in programs this rank starts, so that
// they do not write on a descriptor that is not theirs nor hold the pipe
// open after the rank has died.
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
	if f := notifyFile(); f != nil && !notify.joined {
		f.Write([]byte{NotifyStartByte})
	}
}

// NotifyJoined tells the launcher that this rank has met every other rank.
// Later calls, and later jobs joined by the same process, do nothing. The
// pipe stays open until the process exits.
func NotifyJoined() {
	notify.mu.Lock()
	defer notify.mu.Unlock()
	if f := notifyFile(); f != nil && !notify.joined {
		f.Write([]byte{NotifyJoinedByte})
		notify.joined = true
	}
}

// NotifyPeerLost tells the launcher that this rank has lost peer rank
// (its connection failed). If this rank then fails too, the launcher
// knows it was not the first: the transport calls it when it records a
// peer's failure, before any error reaches the program.
func NotifyPeerLost(rank int) {
	notify.mu.Lock()
	defer notify.mu.Unlock()
	if f := notifyFile(); f != nil && !notify.lost[rank] {
		if notify.lost == nil {
			notify.lost = make(map[int]bool)
		}
		notify.lost[rank] = true
		f.Write(append(strconv.AppendInt([]byte{NotifyLostByte}, int64(rank), 10), '\n'))
	}
}
