package rma_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
	"github.com/rmago/rmago/transport"
)

// TestAsProcesses runs this package's tests again with one rank per
// process, started by rmarun, as a user's job would be.
func TestAsProcesses(t *testing.T) {
	if testing.Short() || rmatest.InProcesses() {
		t.Skip("in -short mode, or already a rank")
	}
	dir := t.TempDir()
	build := func(args ...string) {
		cmd := exec.Command("go", args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rmarun, suite := filepath.Join(dir, "rmarun"), filepath.Join(dir, "rma.test")
	build("build", "-o", rmarun, "../cmd/rmarun")
	build("test", "-c", "-race", "-o", suite, ".")
	for _, c := range []struct {
		n     string
		run   string
		env   []string
		count string
	}{
		{n: "2", run: "TestPutGetSizes|TestZeroLengthWindows|TestEpochMisuse|TestPSCWRing|TestCompleteGetThenOverwrite"},
		{n: "3", run: "TestPutGetTypes|TestBadInput|TestAccumulateOps|TestFenceGetThenOverwrite"},
		{n: "4", run: "TestPutGetRanks|TestAccumulateSumCounter|TestFetchAndOp|TestCompareAndSwapMutex|TestSharedReaders|TestLockAllFlushLoop|TestRequestsOutOfOrder"},
		{n: "5", run: "TestAllToAllDisplacements|TestExclusiveLockCounter|TestPSCWStar"},
		// One processor per rank (as rmarun gives ranks on a full node),
		// where a rank spinning on requests to itself must still run its
		// peers' (loopback.go in verbs/soft): without that, some of the
		// three rounds of the mutex hung until the timeout.
		{n: "2", run: "TestSpinOnOwnWord", env: []string{"GOMAXPROCS=1"}},
		{n: "4", run: "TestCompareAndSwapMutex", env: []string{"GOMAXPROCS=1"}, count: "3"},
	} {
		count := c.count
		if count == "" {
			count = "1"
		}
		cmd := exec.Command(rmarun, "-n", c.n, "-provider", "soft", "-timeout", "5m", suite, "-test.run", c.run, "-test.count", count, "-test.v")
		cmd.Env = append(append(os.Environ(), "RMAGO_TIMEOUT=60s"), c.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rmarun -n %s (%s): %v\n%s", c.n, c.run, err, out)
		}
		// Every rank must have run (not skipped) and passed something.
		if !strings.Contains(string(out), "--- PASS") || strings.Contains(string(out), "--- FAIL") {
			t.Fatalf("rmarun -n %s (%s): no pass\n%s", c.n, c.run, out)
		}
		t.Logf("rmarun -n %s %s: ok", c.n, c.run)
	}
}

// TestDeadPeerRank is one rank's side of TestDeadPeer: rank 1 vanishes
// (exits without closing, as a crash would) while rank 0 waits in a
// fence, which must fail with a peer error instead of hanging. Rank 0 then
// puts to rank 1, accumulates, swaps and locks its window, through the
// mapping of its memory on shm (direct access, rma/direct.go and
// sync/control), which must fail with the peer's error as a request
// would.
func TestDeadPeerRank(t *testing.T) {
	if os.Getenv("RMAGO_TEST_DEADPEER") == "" {
		t.Skip("run by TestDeadPeer")
	}
	w, err := rma.Init()
	if err != nil {
		t.Fatal(err)
	}
	win, err := rma.Allocate[int64](w, 8)
	if err != nil {
		t.Fatal(err)
	}
	win2, err := rma.Allocate[int64](w, 8)
	if err != nil {
		t.Fatal(err)
	}
	win3, err := rma.Allocate[int64](w, 8)
	if err != nil {
		t.Fatal(err)
	}
	if w.Rank() == 0 {
		// Reach rank 1 once while it lives: its memory is mapped now.
		err := errors.Join(win2.LockAll(rma.NoCheck), win2.Put([]int64{7}, 1, 0), win2.Flush(1),
			win3.Lock(1, rma.Exclusive, 0), win3.Unlock(1))
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Barrier(); err != nil {
		t.Fatal(err)
	}
	if w.Rank() == 1 {
		os.Exit(0) // gone, sockets closed by the kernel, no goodbye
	}
	err = win.Fence(0)
	if !errors.Is(err, transport.ErrPeer) {
		t.Fatalf("fence with a dead peer: %v", err)
	}
	if err := win2.Put([]int64{8}, 1, 0); !errors.Is(err, transport.ErrPeer) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("put to a dead peer: %v, want an error naming rank 1 that wraps transport.ErrPeer", err)
	}
	if err := win2.Accumulate([]int64{1, 2}, 1, 0, rma.Sum); !errors.Is(err, transport.ErrPeer) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("accumulate to a dead peer: %v, want an error naming rank 1 that wraps transport.ErrPeer", err)
	}
	if _, err := win2.CompareAndSwap(7, 9, 1, 0); !errors.Is(err, transport.ErrPeer) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("compare-and-swap on a dead peer: %v, want an error naming rank 1 that wraps transport.ErrPeer", err)
	}
	if err := win3.Lock(1, rma.Exclusive, 0); !errors.Is(err, transport.ErrPeer) || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("lock on a dead peer: %v, want an error naming rank 1 that wraps transport.ErrPeer", err)
	}
	fmt.Println("DEADPEER-OK:", err)
}

// buildRanks builds rmarun and this package's test binary (without the
// race detector) into a temporary directory, for tests that run one of
// their own functions as the ranks of a job, and returns their paths.
func buildRanks(t *testing.T) (rmarun, suite string) {
	dir := t.TempDir()
	rmarun, suite = filepath.Join(dir, "rmarun"), filepath.Join(dir, "rma.test")
	for _, args := range [][]string{
		{"build", "-o", rmarun, "../cmd/rmarun"},
		{"test", "-c", "-o", suite, "."},
	} {
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	return rmarun, suite
}

func TestDeadPeer(t *testing.T) {
	if testing.Short() || rmatest.InProcesses() {
		t.Skip("in -short mode, or already a rank")
	}
	rmarun, suite := buildRanks(t)
	for _, prov := range []string{"soft", "shm"} {
		cmd := exec.Command(rmarun, "-n", "2", "-provider", prov, "-timeout", "2m",
			suite, "-test.run", "^TestDeadPeerRank$", "-test.v")
		// A long wait timeout: the error must come from the dead connection, not the timer.
		cmd.Env = append(os.Environ(), "RMAGO_TEST_DEADPEER=1", "RMAGO_TIMEOUT=10m")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "DEADPEER-OK") {
			t.Fatalf("rmarun -provider %s: %v\n%s", prov, err, out)
		}
	}
}
