package transport

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/internal/pmi"
)

// Bootstrap is the out-of-band channel a job uses once, at start-up, to
// learn its rank and size and to exchange the endpoint information that
// connects the fabric. rmarun's environment (Rendezvous) and a PMI process
// manager (BootstrapPMI: Hydra's mpiexec, srun --mpi=pmi2) are the sources;
// BootstrapFromEnv picks one.
type Bootstrap interface {
	Rank() int
	Size() int
	// Secret is the job's shared key, used to authenticate the fabric.
	Secret() []byte
	// Addr is the IP address this rank's fabric should listen on.
	Addr() string
	// Allgather sends mine to every rank and returns every rank's
	// contribution, indexed by rank. It is collective.
	Allgather(mine []byte) ([][]byte, error)
	// Close releases the channel.
	Close() error
}

// ErrBootstrap means the job's start-up exchange failed: missing or bad
// environment, an unsupported launcher (also launch.ErrLauncher),
// unreachable rendezvous or process manager, or a peer that failed
// authentication.
var ErrBootstrap = errors.New("transport: bootstrap failed")

// BootstrapTimeout bounds the start-up exchange.
var BootstrapTimeout = 60 * time.Second

// BootstrapFromEnv joins the job the environment describes, in this order:
// rmarun's contract (RMAGO_RANK, RMAGO_SIZE, RMAGO_RENDEZVOUS, RMAGO_SECRET,
// RMAGO_ADDR); a PMI process manager (PMI_FD, or PMI_PORT and PMI_ID; the
// wire is RMAGO_PMI, 1 or 2); else the process is a job of one rank. The
// environment of a multi-rank job rmago cannot join (Open MPI's mpirun, a
// PMIx-only launcher, srun without --mpi=pmi2) is an error wrapping
// ErrBootstrap and launch.ErrLauncher. See docs/launch.md. First of all it
// checks the RMAGO_* settings (internal/config, docs/config.md): a bad one
// is an error wrapping ErrConfig, before any peer is contacted.
func BootstrapFromEnv() (Bootstrap, error) {
	if _, err := config.FromEnv(); err != nil {
		return nil, err
	}
	kind, err := launch.Detect(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBootstrap, err)
	}
	switch kind {
	case launch.PMI:
		return BootstrapPMI(PMIConfig{})
	case launch.PMIx:
		if !pmi.PMIxBuilt {
			return nil, fmt.Errorf("%w: %w", ErrBootstrap, launch.PMIxUnsupported(os.Getenv))
		}
		return BootstrapPMI(PMIConfig{Wire: pmi.WirePMIx})
	case launch.Rmarun:
		return rmarunFromEnv()
	}
	// A job of one rank still listens (its own fabric), so its key must be
	// as unguessable as a launched job's.
	secret := make([]byte, launch.SecretBytes)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	addr := os.Getenv(launch.EnvAddr)
	if addr == "" {
		addr = launch.DefaultAddr
	}
	return Rendezvous(RendezvousConfig{Rank: 0, Size: 1, Secret: secret, Addr: addr})
}

// rmarunFromEnv reads rmarun's contract.
func rmarunFromEnv() (Bootstrap, error) {
	launch.NotifyStart() // rmarun's start-up watch (internal/launch/notify.go)
	rank, err1 := strconv.Atoi(os.Getenv(launch.EnvRank))
	size, err2 := strconv.Atoi(os.Getenv(launch.EnvSize))
	secret, err3 := hex.DecodeString(os.Getenv(launch.EnvSecret))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("%w: bad environment (%s, %s, %s): %v", ErrBootstrap, launch.EnvRank, launch.EnvSize, launch.EnvSecret, err)
	}
	addr := os.Getenv(launch.EnvAddr)
	if addr == "" {
		addr = launch.DefaultAddr
	}
	ln, err := launch.InheritedListener() // rank 0: the launcher's listener, if it passed one
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBootstrap, err)
	}
	cfg := RendezvousConfig{Rank: rank, Size: size, Rendezvous: os.Getenv(launch.EnvRendezvous), Secret: secret, Addr: addr}
	if rank == 0 {
		cfg.Listener = ln
	}
	b, err := Rendezvous(cfg)
	if ln != nil {
		ln.Close() // the rendezvous is over
	}
	if err == nil {
		launch.NotifyJoined()
	}
	return b, err
}
