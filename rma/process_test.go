package rma_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rmago/rmago/rma/rmatest"
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
		n   string
		run string
	}{
		{"2", "TestPutGetSizes|TestZeroLengthWindows|TestEpochMisuse|TestPSCWRing"},
		{"3", "TestPutGetTypes|TestBadInput|TestAccumulateOps"},
		{"4", "TestPutGetRanks|TestAccumulateSumCounter|TestFetchAndOp|TestCompareAndSwapMutex|TestSharedReaders|TestLockAllFlushLoop|TestRequestsOutOfOrder"},
		{"5", "TestAllToAllDisplacements|TestExclusiveLockCounter|TestPSCWStar"},
	} {
		cmd := exec.Command(rmarun, "-n", c.n, "-provider", "soft", "-timeout", "5m", suite, "-test.run", c.run, "-test.v")
		cmd.Env = append(os.Environ(), "RMAGO_TIMEOUT=60s")
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
