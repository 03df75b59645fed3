//go:build unix

package launch

import (
	"io"
	"os"
	"strconv"
	"testing"
)

// The bytes a rank writes on its notify pipe: one 'i', one 'j', whatever
// the number of calls; the variable is gone once read, and the pipe stays
// open until the process ends.
func TestNotify(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Setenv(EnvNotifyFD, strconv.Itoa(int(w.Fd())))
	NotifyStart()
	if _, ok := os.LookupEnv(EnvNotifyFD); ok {
		t.Errorf("%s is still set", EnvNotifyFD)
	}
	NotifyStart()
	NotifyJoined()
	NotifyJoined()
	NotifyStart()
	w.Close() // the process's last reference, as at exit
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "iij" {
		t.Errorf("read %q, %v; want \"iij\"", got, err)
	}
}
