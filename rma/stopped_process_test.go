package rma_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
	"github.com/rmago/rmago/transport"
)

// TestStoppedPeerBlamedRank is one rank's side of TestStoppedPeerBlamed:
// rank 0 waits (PSCW Wait) for completions from ranks 1 and 2; rank 2 is
// stopped (SIGSTOP), and rank 1 runs but never completes, since it waits
// for rank 2's post. Rank 0's wait times out missing both; the kernel shows
// rank 1 running and rank 2 stopped, so the error must name rank 2 only.
func TestStoppedPeerBlamedRank(t *testing.T) {
	if os.Getenv("RMAGO_TEST_STOPPED") == "" {
		t.Skip("run by TestStoppedPeerBlamed")
	}
	w, err := rma.Init()
	if err != nil {
		t.Fatal(err)
	}
	win, err := rma.Allocate[int64](w, 4)
	if err != nil {
		t.Fatal(err)
	}
	if w.Rank() == 2 {
		// Leave the pid where rank 0 finds it (to end this rank), then stop.
		err := errors.Join(win.Lock(0, rma.Exclusive, 0), win.Put([]int64{int64(os.Getpid())}, 0, 0), win.Unlock(0))
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Barrier(); err != nil {
		t.Fatal(err)
	}
	switch w.Rank() {
	case 2:
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		select {} // rank 0 kills it
	case 1:
		err := win.Start([]int{2}, 0)
		fmt.Println("rank 1 start:", err)
		time.Sleep(3 * time.Second) // alive while rank 0 judges
		os.Exit(0)
	}
	if err := win.Post([]int{1, 2}, 0); err != nil {
		t.Fatal(err)
	}
	err = win.Wait()
	msg := fmt.Sprint(err)
	ok := errors.Is(err, transport.ErrTimeout) && strings.Contains(msg, "none from rank 2") && !strings.Contains(msg, "rank 1")
	if ok {
		// Before the kill: once rank 2 dies, rmarun stops the job, and a
		// line printed after the kill could lose that race.
		fmt.Println("STOPPED-OK:", err)
	}
	syscall.Kill(int(win.Local()[0]), syscall.SIGKILL)
	if !ok {
		t.Fatalf("Wait with rank 2 stopped and rank 1 waiting for it: %v; want a timeout naming rank 2 only", err)
	}
}

func TestStoppedPeerBlamed(t *testing.T) {
	if testing.Short() || rmatest.InProcesses() {
		t.Skip("in -short mode, or already a rank")
	}
	rmarun, suite := buildRanks(t)
	cmd := exec.Command(rmarun, "-n", "3", "-provider", "shm", "-timeout", "2m",
		suite, "-test.run", "^TestStoppedPeerBlamedRank$", "-test.v")
	cmd.Env = append(os.Environ(), "RMAGO_TEST_STOPPED=1", "RMAGO_TIMEOUT=2s")
	out, _ := cmd.CombinedOutput() // rank 2 dies by SIGKILL: the job fails
	if !strings.Contains(string(out), "STOPPED-OK") {
		t.Fatalf("rmarun -n 3 -provider shm:\n%s", out)
	}
}
