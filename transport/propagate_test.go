package transport

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// Failure propagation (issue 10): a survivor learns which rank failed even
// when the failure reaches it only through another rank, and a group wait
// never blames a healthy rank stuck on the failed one.

// crash breaks every connection of f at once, without the goodbye of an
// orderly close: its peers see the connections drop, as after kill -9.
func crash(t *testing.T, f *Fabric) {
	t.Helper()
	for i := range f.peers {
		p := f.peers[i].Load()
		if p == nil || p.selfRx != nil {
			continue
		}
		s, ok := p.qp.(verbs.ErrorSetter)
		if !ok {
			t.Fatal("the provider cannot fail a queue pair")
		}
		s.SetError(fmt.Errorf("%w: rank %d crashes (test)", verbs.ErrTransport, f.rank))
	}
}

// TestFailedRankFailsGroupWait (case 1 of the fault suite): rank 0
// notifies and then dies; rank 2 stops there and never notifies rank 1.
// Rank 1's wait fails at once naming rank 0, although rank 0's
// notification arrived, instead of waiting out the timeout and blaming
// rank 2.
func TestFailedRankFailsGroupWait(t *testing.T) {
	fs := openFabrics(t, 3, hangBound) // every error must come from the failure
	const tag = 0x8000_0040
	for _, r := range []int{1, 2} {
		if err := fs[0].Notify(r, tag); err != nil {
			t.Fatal(err)
		}
		if err := fs[0].Flush(r); err != nil {
			t.Fatal(err)
		}
	}
	// Rank 1 has the notification before rank 0 dies.
	if err := waitNotes(fs[1], tag, 1); err != nil {
		t.Fatal(err)
	}
	crash(t, fs[0])
	err := fs[1].AwaitNotes(tag, 2, fs[1].othersFn)
	if !errors.Is(err, ErrPeer) || errors.Is(err, ErrPeerGone) || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("rank 1's wait after rank 0 died: %v", err)
	}
	t.Log(err)
}

// TestOrderlyLeaveKeepsGroupWait: a rank that notified and then left in
// order still counts, and its departure sends no failure notice: the
// others' wait completes, and neither blames anyone.
func TestOrderlyLeaveKeepsGroupWait(t *testing.T) {
	fs := openFabrics(t, 3, hangBound)
	const tag = 0x8000_0050
	for _, r := range []int{0, 1} {
		if err := fs[2].Notify(r, tag); err != nil {
			t.Fatal(err)
		}
		if err := fs[2].Flush(r); err != nil {
			t.Fatal(err)
		}
	}
	fs[2].Close()
	onRanks(t, fs[:2], func(f *Fabric) error {
		if err := awaitGone(f, 2); err != nil {
			return err
		}
		if err := f.Notify(1-f.Rank(), tag); err != nil {
			return err
		}
		if err := f.AwaitNotes(tag, 2, f.othersFn); err != nil {
			return fmt.Errorf("wait with a rank that notified and left: %w", err)
		}
		if err := f.Err(1 - f.Rank()); err != nil {
			return fmt.Errorf("the live peer is marked failed: %w", err)
		}
		return nil
	})
}

// waitNotes drives f until count notifications with tag have arrived,
// without consuming them.
func waitNotes(f *Fabric, tag uint32, count int) error {
	w := f.NewPoller()
	defer w.Done()
	for {
		f.mu.Lock()
		n := f.noteCount(tag)
		f.mu.Unlock()
		if n >= count {
			return nil
		}
		if !w.Pause() {
			return fmt.Errorf("%d of %d notifications %#x arrived", n, count, tag)
		}
	}
}

// Environment of TestReportedRankChild, set by TestReportedRank.
const (
	envReportChild = "RMAGO_TEST_REPORTED_CHILD" // rendezvous address
	envReportKey   = "RMAGO_TEST_REPORTED_KEY"   // the job's secret, hex
)

// reportTag is the notification the stopped rank sends before it stops.
const reportTag = 0x8000_0060

// TestReportedRankChild is rank 1 of TestReportedRank, in a process of its
// own: it joins the job, shares a region, notifies both ranks, and waits
// to be stopped and killed.
func TestReportedRankChild(t *testing.T) {
	rdv := os.Getenv(envReportChild)
	if rdv == "" {
		t.Skip("run by TestReportedRank")
	}
	secret, _ := hex.DecodeString(os.Getenv(envReportKey))
	b, err := Rendezvous(RendezvousConfig{Rank: 1, Size: 3, Rendezvous: rdv, Secret: secret, Addr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(b, Options{Provider: "soft", Timeout: hangBound})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := sharedRegion(f, 4096); err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 2} {
		if err := f.Notify(r, reportTag); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(hangBound) // stopped, then killed, meanwhile
}

// TestReportedRank (case 2 of the fault suite): rank 1 notifies and is
// then stopped (SIGSTOP); rank 0 reads from it, gets no answer and gives
// it up after its timeout; rank 2, which has nothing outstanding to rank 1
// and a timeout far longer than the test, waits for notifications from
// both and learns from rank 0's failure notice that rank 1 failed: its
// wait fails naming rank 1, not rank 0 (stuck on rank 1, it never
// notifies).
func TestReportedRank(t *testing.T) {
	if os.Getenv(envReportChild) != "" {
		t.Skip("a rank of TestReportedRank")
	}
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	rdv := fmt.Sprintf("127.0.0.1:%d", port)
	secretHex, _ := launch.NewSecret()
	secret, _ := hex.DecodeString(secretHex)
	child := exec.Command(os.Args[0], "-test.run", "^TestReportedRankChild$")
	child.Env = append(os.Environ(), envReportChild+"="+rdv, envReportKey+"="+secretHex)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		child.Process.Signal(syscall.SIGCONT)
		child.Process.Kill()
		child.Wait()
	})
	// Rank 0 gives rank 1 up after 2 s; rank 2 would wait far longer.
	timeouts := []time.Duration{2 * time.Second, 0, hangBound}
	fs := make([]*Fabric, 3)
	errs := make([]error, 3)
	var rd regions // rank 0's
	var wg sync.WaitGroup
	for _, r := range []int{0, 2} {
		wg.Go(func() {
			b, err := Rendezvous(RendezvousConfig{Rank: r, Size: 3, Rendezvous: rdv, Secret: secret, Addr: "127.0.0.1"})
			if err != nil {
				errs[r] = err
				return
			}
			if fs[r], errs[r] = Open(b, Options{Provider: "soft", Timeout: timeouts[r]}); errs[r] != nil {
				return
			}
			t.Cleanup(func() { fs[r].Close() })
			_, mr, all, err := sharedRegion(fs[r], 4096)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = waitNotes(fs[r], reportTag, 1) // rank 1's
			if r == 0 {
				rd = regions{mr: mr, all: all}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := awaitStopped(child.Process.Pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fs[2].AwaitNotes(reportTag, 2, fs[2].othersFn) }()
	local := Local{Addr: rd.mr.Addr(), LKey: rd.mr.LKey()}
	remote := Remote{Addr: getU64(rd.all[1]), RKey: getU32(rd.all[1][8:])}
	seq, err := fs[0].Read(1, local, remote, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs[0].Await(1, seq); !errors.Is(err, ErrPeer) || !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("rank 0's read from the stopped rank: %v", err)
	}
	select {
	case err = <-done:
	case <-time.After(hangBound):
		t.Fatal("rank 2's wait hangs")
	}
	if !errors.Is(err, ErrPeer) || !errors.Is(err, ErrTimeout) || errors.Is(err, ErrPeerGone) ||
		!strings.Contains(err.Error(), "rank 1 failed (reported by rank 0") {
		t.Fatalf("rank 2's wait: %v", err)
	}
	t.Log(err)
	// The report is rank 1's sticky error on rank 2: what needs it fails
	// at once, and rank 0 is still a healthy peer.
	if err := fs[2].Notify(1, reportTag); !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("notify the reported rank: %v", err)
	}
	if err := fs[2].Err(0); err != nil {
		t.Fatalf("rank 0 is marked failed on rank 2: %v", err)
	}
}

// regions is rank 0's shared region in TestReportedRank.
type regions struct {
	mr  verbs.MR
	all [][]byte
}

// awaitStopped waits until every thread of process pid is stopped: a
// signal is delivered asynchronously, and the process may answer a request
// meanwhile.
func awaitStopped(pid int) error {
	for range 10000 {
		if stopped(pid) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("process %d did not stop", pid)
}

// stopped reports whether every thread of process pid is stopped.
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name in parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
