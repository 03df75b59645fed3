package transport

import (
	"bytes"
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

// Faults of a peer as the fabric reports them (issue 10): a rank that left
// the job fails at once what still needs it, a stopped rank fails a send
// after the timeout, and every error names the rank and is told apart with
// errors.Is.

// hangBound bounds what must not hang, so that a regression fails instead
// of blocking the suite; it is no measure of speed.
const hangBound = 2 * time.Minute

// openFabrics opens an n-rank job in this process over loopback sockets.
func openFabrics(t *testing.T, n int, timeout time.Duration) []*Fabric {
	t.Helper()
	fs, err := openFabricsWith(t, n, func(int) Options { return Options{Provider: "soft", Timeout: timeout} })
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// openFabricsWith opens an n-rank job with rank r's options opt(r); the
// fabrics that opened are closed at the end of the test.
func openFabricsWith(t *testing.T, n int, opt func(r int) Options) ([]*Fabric, error) {
	t.Helper()
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	secretHex, _ := launch.NewSecret()
	secret, _ := hex.DecodeString(secretHex)
	fs := make([]*Fabric, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			b, err := Rendezvous(RendezvousConfig{Rank: r, Size: n, Rendezvous: fmt.Sprintf("127.0.0.1:%d", port), Secret: secret, Addr: "127.0.0.1"})
			if err != nil {
				errs[r] = err
				return
			}
			fs[r], errs[r] = Open(b, opt(r))
		})
	}
	wg.Wait()
	for _, f := range fs {
		if f != nil {
			t.Cleanup(func() { f.Close() })
		}
	}
	return fs, errors.Join(errs...)
}

// onRanks runs fn on each fabric in its own goroutine and fails the test
// with the ranks' errors.
func onRanks(t *testing.T, fs []*Fabric, fn func(f *Fabric) error) {
	t.Helper()
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for r, f := range fs {
		wg.Go(func() { errs[r] = fn(f) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// awaitGone drives f until it has noticed that rank r left, the way a
// goroutine polling its own memory does (Poller, as PSCW's Start).
func awaitGone(f *Fabric, r int) error {
	w := f.NewPoller()
	defer w.Done()
	for f.Err(r) == nil {
		if !w.Pause() {
			return fmt.Errorf("rank %d's departure not noticed", r)
		}
	}
	if err := f.Err(r); !errors.Is(err, ErrPeerGone) || !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
		return fmt.Errorf("rank %d's error: %v", r, err)
	}
	return nil
}

// TestPeerLeftFailsWaits (issue 10 item 6): a rank that closes early ends,
// at once and not at the timeout, every wait that still needs it: a
// notification wait for a notification it never sent, a local-memory wait
// on it (PSCW's Start polls that way), and posts and flushes to it. A
// notification it sent before leaving still counts.
func TestPeerLeftFailsWaits(t *testing.T) {
	// The timeout is far longer than the test: every error must come from
	// the departure, not from the timer.
	fs := openFabrics(t, 3, hangBound)
	const early, never = 0x8000_0010, 0x8000_0020
	// Rank 2 notifies the others with tag early, then leaves.
	for _, r := range []int{0, 1} {
		if err := fs[2].Notify(r, early); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs[2].Flush(0); err != nil {
		t.Fatal(err)
	}
	if err := fs[2].Flush(1); err != nil {
		t.Fatal(err)
	}
	fs[2].Close()
	onRanks(t, fs[:2], func(f *Fabric) error {
		if err := awaitGone(f, 2); err != nil {
			return err
		}
		// Rank 2's early notification arrived before it left: with the
		// other live rank's, the wait completes.
		if err := f.Notify(1-f.Rank(), early); err != nil {
			return err
		}
		if err := f.AwaitNotes(early, 2, f.othersFn); err != nil {
			return fmt.Errorf("wait for a notification rank 2 sent before leaving: %w", err)
		}
		// A notification rank 2 never sent fails the wait at once.
		if err := f.Notify(1-f.Rank(), never); err != nil {
			return err
		}
		if err := f.AwaitNotes(never, 2, f.othersFn); !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "rank 2") {
			return fmt.Errorf("wait for a notification of a rank that left: %v", err)
		}
		if _, err := f.AwaitNotesEither(never, never|1, 2); !errors.Is(err, ErrPeerGone) {
			return fmt.Errorf("fence-style wait with a rank that left: %v", err)
		}
		if err := f.Notify(2, never); !errors.Is(err, ErrPeerGone) {
			return fmt.Errorf("notify a rank that left: %v", err)
		}
		if err := f.Flush(2); !errors.Is(err, ErrPeerGone) {
			return fmt.Errorf("flush to a rank that left: %v", err)
		}
		// The live ranks go on with each other.
		return f.Flush(1 - f.Rank())
	})
}

// Environment of TestStoppedPeerChild, set by TestStoppedPeer.
const (
	envStopChild = "RMAGO_TEST_STOPPED_CHILD" // rendezvous address
	envStopKey   = "RMAGO_TEST_STOPPED_KEY"   // the job's secret, hex
)

// stoppedSize is the window the stopped rank exposes: larger than what
// the sockets between two ranks buffer, so a write of it blocks.
const stoppedSize = 32 << 20

// TestStoppedPeerChild is rank 1 of TestStoppedPeer, in a process of its
// own: it joins the job, exposes a window, and waits to be stopped and
// killed.
func TestStoppedPeerChild(t *testing.T) {
	rdv := os.Getenv(envStopChild)
	if rdv == "" {
		t.Skip("run by TestStoppedPeer")
	}
	secret, _ := hex.DecodeString(os.Getenv(envStopKey))
	b, err := Rendezvous(RendezvousConfig{Rank: 1, Size: 2, Rendezvous: rdv, Secret: secret, Addr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(b, Options{Provider: "soft", Timeout: hangBound})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := sharedRegion(f, stoppedSize); err != nil {
		t.Fatal(err)
	}
	time.Sleep(hangBound) // stopped, then killed, meanwhile
}

// sharedRegion allocates and registers size bytes on every rank and
// gathers each rank's address and rkey (8 + 4 bytes) into all.
func sharedRegion(f *Fabric, size int) (*Memory, verbs.MR, [][]byte, error) {
	g, err := f.AllocRegionExchange(size, AllAccess)
	if err != nil {
		return nil, nil, nil, err
	}
	return g.mem, g.mrs[0], descs(g), nil
}

// TestStoppedPeer (item 3): a put to a rank whose process is stopped
// (SIGSTOP), so that it reads nothing, fails after the timeout with an
// error naming the rank, instead of blocking in a socket write for ever.
func TestStoppedPeer(t *testing.T) {
	f, mr, all := stoppedChild(t)
	done := make(chan error, 1)
	go func() {
		// The first writes fill the sockets; one of them blocks, until the
		// timeout fails the connection. Later ones fail at once.
		local := Local{Addr: mr.Addr(), LKey: mr.LKey()}
		remote := Remote{Addr: getU64(all[1]), RKey: getU32(all[1][8:])}
		for range 4 {
			if _, err := f.Write(1, local, remote, stoppedSize); err != nil {
				done <- err
				return
			}
		}
		done <- f.Flush(1)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(hangBound):
		t.Fatal("a put to a stopped rank hangs")
	}
	if !errors.Is(err, ErrPeer) || !errors.Is(err, ErrTimeout) || !errors.Is(err, verbs.ErrTimeout) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("put to a stopped rank: %v", err)
	}
	t.Log(err)
}

// TestStoppedPeerGivenUp: a request to a stopped rank that gets no answer
// within the timeout fails the wait, naming the rank, and the fabric gives
// the rank up, as a NIC does once its retries run out: later operations
// to it fail at once, and the memory the unanswered request holds (a read's
// destination) deregisters without waiting.
func TestStoppedPeerGivenUp(t *testing.T) {
	f, mr, all := stoppedChild(t)
	local := Local{Addr: mr.Addr(), LKey: mr.LKey()}
	remote := Remote{Addr: getU64(all[1]), RKey: getU32(all[1][8:])}
	seq, err := f.Read(1, local, remote, 64)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Await(1, seq)
	if !errors.Is(err, ErrPeer) || !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("read from a stopped rank: %v", err)
	}
	t.Log(err)
	if _, err := f.Read(1, local, remote, 64); !errors.Is(err, ErrPeer) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("read after the rank was given up: %v", err)
	}
	// The region the unanswered read held deregisters at once: waiting
	// for it would take another timeout, and fail.
	within := make(chan error, 1)
	go func() { within <- mr.Dereg() }()
	select {
	case err := <-within:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangBound):
		t.Fatal("Dereg of a read's destination hangs")
	}
}

// stoppedChild starts rank 1 of a 2-rank job in a child process
// (TestStoppedPeerChild), joins it as rank 0 with a 2 s timeout, shares a
// region, and stops the child (SIGSTOP). It returns rank 0's fabric, its
// region and every rank's region descriptor.
func stoppedChild(t *testing.T) (*Fabric, verbs.MR, [][]byte) {
	t.Helper()
	if os.Getenv(envStopChild) != "" {
		t.Skip("a rank of TestStoppedPeer")
	}
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	rdv := fmt.Sprintf("127.0.0.1:%d", port)
	secretHex, _ := launch.NewSecret()
	secret, _ := hex.DecodeString(secretHex)
	child := exec.Command(os.Args[0], "-test.run", "^TestStoppedPeerChild$")
	child.Env = append(os.Environ(), envStopChild+"="+rdv, envStopKey+"="+secretHex)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		child.Process.Signal(syscall.SIGCONT)
		child.Process.Kill()
		child.Wait()
	})
	b, err := Rendezvous(RendezvousConfig{Rank: 0, Size: 2, Rendezvous: rdv, Secret: secret, Addr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(b, Options{Provider: "soft", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	_, mr, all, err := sharedRegion(f, stoppedSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, child.Process.Pid)
	return f, mr, all
}

// waitStopped returns once process pid is stopped (state T in
// /proc/pid/stat): kill(2) returns before the signal has stopped every
// thread, and a thread already running could still answer a request.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for range 10000 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name's closing parenthesis.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("process %d did not stop", pid)
}

// TestLeaveBeforeDereg (item 8): a rank that ends disconnects before it
// deregisters its memory, so a peer still putting to that memory is told
// that the rank left (ErrPeerGone), not that its access was refused
// (verbs.ErrRemoteAccess).
func TestLeaveBeforeDereg(t *testing.T) {
	fs := openFabrics(t, 2, hangBound)
	type shared struct {
		mr  verbs.MR
		all [][]byte
	}
	sh := make([]shared, 2)
	onRanks(t, fs, func(f *Fabric) error {
		_, mr, all, err := sharedRegion(f, 4096)
		sh[f.Rank()] = shared{mr, all}
		return err
	})
	if t.Failed() {
		return
	}
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() { // rank 0 puts to rank 1 until that fails
		f, mr, all := fs[0], sh[0].mr, sh[0].all
		local := Local{Addr: mr.Addr(), LKey: mr.LKey()}
		remote := Remote{Addr: getU64(all[1]), RKey: getU32(all[1][8:])}
		for i := 0; ; i++ {
			if _, err := f.Write(1, local, remote, 64); err != nil {
				errc <- err
				return
			}
			if i%16 == 0 {
				if err := f.Flush(1); err != nil {
					errc <- err
					return
				}
			}
			if i == 64 {
				close(started)
			}
		}
	}()
	<-started
	fs[1].Disconnect()
	sh[1].mr.Dereg()
	err := <-errc
	if !errors.Is(err, ErrPeerGone) || errors.Is(err, verbs.ErrRemoteAccess) {
		t.Fatalf("put to a rank that left: %v", err)
	}
}

// TestTimeoutNamesWait (item 8): a wait that reaches the timeout says
// which operation waited for which ranks.
func TestTimeoutNamesWait(t *testing.T) {
	fs := openFabrics(t, 3, 300*time.Millisecond)
	const tag = 0x8000_0030
	// Rank 1 notifies rank 0; rank 2 does not.
	if err := fs[1].Notify(0, tag); err != nil {
		t.Fatal(err)
	}
	err := fs[0].AwaitNotes(tag, 2, fs[0].othersFn)
	if !errors.Is(err, ErrTimeout) || errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), "notification wait: 1 of 2") || !strings.Contains(err.Error(), "none from rank 2 ") {
		t.Fatalf("notification wait past the timeout: %v", err)
	}
	t.Log(err)
}
