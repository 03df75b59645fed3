package rma_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// TestWorldNodes: every rank of a job on one machine shares its node,
// unless the launcher gave each rank its own RMAGO_NODE (TestUnderMpiexec
// does) and the ranks it shares it with in RMAGO_TEST_LOCAL.
func TestWorldNodes(t *testing.T) {
	rmatest.Run(t, 2, func(w *rma.World) error {
		want := []int{0, 1}
		if k, _ := strconv.Atoi(os.Getenv("RMAGO_TEST_NODES")); k > 1 && !rmatest.InProcesses() {
			want = []int{w.Rank()} // two pretend nodes of one rank each (rmatest)
		}
		if v, ok := os.LookupEnv("RMAGO_TEST_LOCAL"); ok {
			want = nil
			for _, f := range strings.Fields(v) {
				var r int
				fmt.Sscan(f, &r)
				want = append(want, r)
			}
		}
		got := w.LocalPeers()
		if !slices.Equal(got, want) || w.NodeSize() != len(want) || w.NodeRank() != slices.Index(want, w.Rank()) {
			return fmt.Errorf("local peers %v, node rank %d of %d; want %v", got, w.NodeRank(), w.NodeSize(), want)
		}
		return nil
	})
}

// TestInitRefusesOtherLaunchers: a rank of a job rmago cannot join fails
// in Init instead of running alone.
func TestInitRefusesOtherLaunchers(t *testing.T) {
	if rmatest.InProcesses() {
		t.Skip("already a rank")
	}
	t.Setenv("SLURM_PROCID", "0")
	t.Setenv("SLURM_NTASKS", "4")
	_, err := rma.Init()
	if !errors.Is(err, launch.ErrLauncher) || !strings.Contains(err.Error(), "srun --mpi=pmi2") {
		t.Fatalf("srun without PMI: %v", err)
	}
}

// TestUnderMpiexec runs some of this package's tests with one rank per
// process under MPICH's mpiexec (Hydra), on both PMI wires, with an
// inherited PMI_FD and with -pmi-port, and with two pretend nodes. It is
// skipped when mpiexec (Hydra) is not installed: apt-get install mpich.
func TestUnderMpiexec(t *testing.T) {
	if testing.Short() || rmatest.InProcesses() {
		t.Skip("in -short mode, or already a rank")
	}
	mpiexec, err := exec.LookPath("mpiexec")
	if err != nil {
		t.Skip("no mpiexec")
	}
	if out, _ := exec.Command("timeout", "20", mpiexec, "--version").CombinedOutput(); !strings.Contains(string(out), "HYDRA") {
		t.Skip("mpiexec is not MPICH's Hydra")
	}
	suite := filepath.Join(t.TempDir(), "rma.test")
	if out, err := exec.Command("go", "test", "-c", "-race", "-o", suite, ".").CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	tests := []string{suite, "-test.run", "TestPutGetSizes|TestEpochMisuse|TestPSCWRing|TestWorldNodes", "-test.v"}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"pmi1", append([]string{"-n", "2"}, tests...)},
		{"pmi2", append([]string{"-n", "2", "-env", launch.EnvPMI, "2"}, tests...)},
		{"pmi1-port", append([]string{"-pmi-port", "-n", "2"}, tests...)},
		{"pmi2-port", append([]string{"-pmi-port", "-n", "2", "-env", launch.EnvPMI, "2"}, tests...)},
		{"pretend-nodes", slices.Concat(
			[]string{"-n", "1", "-env", launch.EnvNode, "a", "-env", "RMAGO_TEST_LOCAL", "0"}, tests,
			[]string{":", "-n", "1", "-env", launch.EnvNode, "b", "-env", "RMAGO_TEST_LOCAL", "1"}, tests)},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("timeout", append([]string{"60", mpiexec}, c.args...)...)
			cmd.Env = append(os.Environ(), "RMAGO_TIMEOUT=30s")
			out, err := cmd.CombinedOutput()
			s := string(out)
			passed := 0
			for _, l := range strings.Split(s, "\n") {
				if strings.TrimSpace(l) == "PASS" {
					passed++
				}
			}
			if err != nil || passed != 2 || strings.Contains(s, "--- FAIL") ||
				strings.Count(s, "--- PASS: TestWorldNodes (") != 2 || strings.Count(s, "--- PASS: TestPSCWRing (") != 2 {
				t.Fatalf("mpiexec %s: %v\n%s", strings.Join(c.args, " "), err, out)
			}
		})
	}
}
