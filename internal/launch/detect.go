package launch

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/rmago/rmago/internal/config"
)

// Settings read by every rank whatever started it; internal/config
// parses and checks them.
const (
	// EnvNode overrides the rank's node identity: ranks with equal values
	// share a node (see transport.LocalNode). Tests set it to split the
	// ranks of one machine into pretend nodes.
	EnvNode = config.EnvNode

	// EnvPMI selects the PMI wire protocol under a PMI launcher: "1"
	// (default) or "2".
	EnvPMI = config.EnvPMI
)

// Launcher is what started this process, as its environment shows.
type Launcher int

const (
	// Singleton: nothing; the process is a job of one rank.
	Singleton Launcher = iota
	// Rmarun: the RMAGO_* contract of this package.
	Rmarun
	// PMI: a PMI-1/PMI-2 process manager (Hydra's mpiexec, srun
	// --mpi=pmi2): PMI_FD, or PMI_PORT with PMI_ID.
	PMI
	// PMIx: a PMIx server (srun --mpi=pmix, Open MPI's mpirun): PMIX_RANK
	// or PMIX_NAMESPACE. Joining needs the PMIx client (build tag pmix);
	// without it, PMIxUnsupported is the error to report.
	PMIx
)

func (l Launcher) String() string {
	switch l {
	case Rmarun:
		return "rmarun"
	case PMI:
		return "PMI"
	case PMIx:
		return "PMIx"
	}
	return "singleton"
}

// ErrLauncher means the process was started as one rank of a multi-rank
// job by a launcher rmago cannot join; running on as a job of one rank
// would silently compute something else.
var ErrLauncher = errors.New("launch: started by a launcher rmago cannot join")

// Detect tells how the process was started: the RMAGO_* contract first,
// then PMI, then PMIx, else a true singleton. A multi-rank job of a
// launcher rmago cannot join (Open MPI's mpirun without PMIx variables,
// srun without --mpi=pmi2) is an error wrapping ErrLauncher that names the
// launcher and a command that works.
func Detect(getenv func(string) string) (Launcher, error) {
	if getenv(EnvRank) != "" || getenv(EnvSize) != "" {
		return Rmarun, nil
	}
	if getenv("PMI_FD") != "" || getenv("PMI_PORT") != "" {
		return PMI, nil
	}
	if getenv("PMIX_RANK") != "" || getenv("PMIX_NAMESPACE") != "" {
		return PMIx, nil
	}
	many := func(name string) (int, bool) {
		n, err := strconv.Atoi(getenv(name))
		return n, err == nil && n > 1
	}
	if n, ok := many("OMPI_COMM_WORLD_SIZE"); ok {
		return Singleton, fmt.Errorf("%w: Open MPI's mpirun started %d ranks (OMPI_COMM_WORLD_SIZE=%d) and speaks only PMIx; "+
			"start the job with `rmarun -n %d`, MPICH's `mpiexec -n %d` (Hydra) or `srun --mpi=pmi2 -n %d`", ErrLauncher, n, n, n, n, n)
	}
	if getenv("SLURM_PROCID") != "" {
		n, ok := many("SLURM_STEP_NUM_TASKS")
		if !ok {
			n, ok = many("SLURM_NTASKS")
		}
		if ok {
			return Singleton, fmt.Errorf("%w: srun started %d tasks without PMI (no PMI_FD: --mpi=%s); "+
				"use `srun --mpi=pmi2 -n %d`, or MpiDefault=pmi2 in slurm.conf", ErrLauncher, n, orNone(getenv("SLURM_MPI_TYPE")), n)
		}
	}
	return Singleton, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// PMIxUnsupported is the error for a PMIx launcher when the binary has no
// PMIx client: it names the launcher and the commands that work.
func PMIxUnsupported(getenv func(string) string) error {
	who := "a PMIx launcher (`srun --mpi=pmix`, prterun)"
	if n := getenv("OMPI_COMM_WORLD_SIZE"); n != "" {
		who = "Open MPI's mpirun (" + n + " ranks)"
	}
	return fmt.Errorf("%w: %s started this rank (PMIX_RANK=%s) and speaks only PMIx; build with `-tags pmix` (libpmix-dev), "+
		"or start the job with `srun --mpi=pmi2`, MPICH's `mpiexec` (Hydra) or `rmarun`", ErrLauncher, who, getenv("PMIX_RANK"))
}
