//go:build unix

package launch

import (
	"io"
	"os"
	"strconv"
	"sync"
	"testing"
)

// The bytes a rank writes on its notify pipe: 'i' on each start until it
// has joined, one 'j', each lost peer once; the variable is gone once read, and the pipe stays
// open until the process ends.
func TestNotify(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	resetNotify()
	t.Cleanup(resetNotify) // w is closed below
	t.Setenv(EnvNotifyFD, strconv.Itoa(int(w.Fd())))
	NotifyStart()
	if _, ok := os.LookupEnv(EnvNotifyFD); ok {
		t.Errorf("%s is still set", EnvNotifyFD)
	}
	NotifyStart()
	NotifyJoined()
	NotifyJoined()
	NotifyStart()
	NotifyPeerLost(12)
	NotifyPeerLost(3)
	NotifyPeerLost(12)
	w.Close() // the process's last reference, as at exit
	got, err := io.ReadAll(r)
	if want := "iijp12\np3\n"; err != nil || string(got) != want {
		t.Errorf("read %q, %v; want %q", got, err, want)
	}
}

// resetNotify forgets the pipe found and what was written on it, as in a
// new process, so that TestNotify runs again with -count.
func resetNotify() {
	notify.mu.Lock()
	defer notify.mu.Unlock()
	notify.once = sync.Once{}
	notify.f, notify.joined, notify.lost = nil, false, nil
}
