package launch

import (
	"errors"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want Launcher
		err  string // a part of the error message; "" for no error
	}{
		{nil, Singleton, ""},
		{map[string]string{EnvRank: "1", EnvSize: "2"}, Rmarun, ""},
		{map[string]string{EnvRank: "0", "PMI_FD": "11"}, Rmarun, ""}, // rmarun's contract wins
		{map[string]string{"PMI_FD": "11", "PMI_RANK": "0", "PMI_SIZE": "2"}, PMI, ""},
		{map[string]string{"PMI_PORT": "vm:4242", "PMI_ID": "0"}, PMI, ""},
		{map[string]string{"PMI_FD": "11", "SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, PMI, ""},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "1"}, Singleton, ""},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "4"}, Singleton, "Open MPI's mpirun started 4 ranks"},
		{map[string]string{"PMIX_RANK": "0", "PMIX_NAMESPACE": "slurm.pmix.7.0"}, PMIx, ""},
		{map[string]string{"PMIX_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}, PMIx, ""},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4"}, Singleton, "srun started 4 tasks without PMI (no PMI_FD: --mpi=none); use `srun --mpi=pmi2 -n 4`"},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, Singleton, "use `srun --mpi=pmi2 -n 2`"},
		{map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, Singleton, ""},
		{map[string]string{"SLURM_NTASKS": "4"}, Singleton, ""}, // a batch script, not a task of a step
	} {
		got, err := Detect(func(k string) string { return c.env[k] })
		if got != c.want {
			t.Errorf("%v: %v, want %v", c.env, got, c.want)
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.err != "" && (!errors.Is(err, ErrLauncher) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: error %v, want ErrLauncher with %q", c.env, err, c.err)
		}
	}
}

func TestPMIxUnsupported(t *testing.T) {
	err := PMIxUnsupported(func(k string) string {
		return map[string]string{"PMIX_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}[k]
	})
	if !errors.Is(err, ErrLauncher) || !strings.Contains(err.Error(), "Open MPI's mpirun (4 ranks) started this rank (PMIX_RANK=1)") ||
		!strings.Contains(err.Error(), "srun --mpi=pmi2") {
		t.Fatal(err)
	}
}
