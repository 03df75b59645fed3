// Package launch defines the contract between the rmarun job launcher and
// the processes it starts, and provides helpers to start ranks the same way
// (for example from tests).
//
// Every rank of a job inherits its launcher's environment plus the variables
// named by the Env* constants. A rank reads them at start-up: rank 0 listens
// for the bootstrap rendezvous on the address in EnvRendezvous, the other
// ranks connect to it, and all of them authenticate with the per-job key in
// EnvSecret. The user's settings among the RMAGO_* variables (EnvProvider,
// EnvNode, EnvPMI and SpinEnv name some of them here) are internal/config's
// to define, parse and check; docs/config.md lists every variable.
package launch

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"runtime"
	"strconv"

	"github.com/rmago/rmago/internal/config"
)

// Names of the environment variables that describe a job to each rank.
const (
	// EnvRank holds the rank of the process, a decimal integer in 0..size-1.
	EnvRank = "RMAGO_RANK"

	// EnvSize holds the number of processes in the job, a decimal integer.
	EnvSize = "RMAGO_SIZE"

	// EnvRendezvous holds the host:port on which rank 0 listens for the
	// bootstrap rendezvous; every other rank connects there.
	EnvRendezvous = "RMAGO_RENDEZVOUS"

	// EnvSecret holds the per-job authentication key: SecretBytes random
	// bytes encoded as lower-case hex (64 characters). It must not be logged.
	EnvSecret = "RMAGO_SECRET"

	// EnvAddr holds the IP address on which each rank's fabric listens.
	EnvAddr = "RMAGO_ADDR"

	// EnvProvider optionally selects the fabric provider: "soft", "ibv" or
	// "auto". The launcher sets it only when asked to; otherwise a value in
	// the caller's environment is inherited. It is a user setting, checked
	// by internal/config.
	EnvProvider = config.EnvProvider

	// EnvJobID holds a short random hex identifier of the job, for logs.
	EnvJobID = "RMAGO_JOBID"

	// EnvBound is set for a rank the launcher bound to some of its host's
	// CPUs: how many of the host's ranks it bound to the same CPUs, this
	// one included (1: the rank has them to itself). See CoresShared.
	EnvBound = "RMAGO_BOUND"
)

// SecretBytes is the size in bytes of the per-job secret before hex encoding.
const SecretBytes = 32

// DefaultAddr is the listen address used when none is given: loopback only.
const DefaultAddr = "127.0.0.1"

// Env returns the NAME=value entries describing rank rank of a job of size
// processes. Append them to os.Environ() (later entries win in os/exec) to
// build a rank's environment. EnvJobID and EnvProvider are not included.
func Env(rank, size int, rendezvous, secretHex, addr string) []string {
	return []string{
		EnvRank + "=" + strconv.Itoa(rank),
		EnvSize + "=" + strconv.Itoa(size),
		EnvRendezvous + "=" + rendezvous,
		EnvSecret + "=" + secretHex,
		EnvAddr + "=" + addr,
	}
}

// CoreShare is the GOMAXPROCS a rank takes when n ranks share its node:
// its share of the node's cores plus one, min(NumCPU, NumCPU/n + 1), or 0
// to leave GOMAXPROCS as it is: the user set the GOMAXPROCS variable, or
// the program or the Go runtime (a container's CPU limit) set something
// other than NumCPU, or the share is what it is already. rma.Init applies
// it, whatever launched the job. Ranks that each run as many Go threads as
// there are cores fight over them (the scheduler's spinning threads steal
// the time a peer needs to answer; one-to-many fence3 of 4 ranks on 2
// cores took 1.3 ms with 2 each, 0.76-0.88 ms with 1), as MPI launchers
// avoid by binding a core per rank; but one core per rank would leave the
// soft provider's responder, the rank's "NIC", waiting up to the
// scheduler's 10 ms preemption tick while the rank computes, and
// one-sided progress must not wait for the target.
func CoreShare(n int) int {
	if os.Getenv("GOMAXPROCS") != "" || n <= 0 {
		return 0
	}
	cpu, cur := runtime.NumCPU(), runtime.GOMAXPROCS(0)
	if cur != cpu {
		return 0
	}
	if p := min(cpu, cpu/n+1); p != cur {
		return p
	}
	return 0
}

// CoresShared reports whether this rank shares the CPUs it may run on with
// other ranks of its node, nodeRanks of them in all (itself included), so
// that a waiting rank should give its core away rather than spin. A rank
// the launcher bound (EnvBound) knows how many ranks share its CPUs;
// others assume the node's ranks run on the same CPUs as they may, and
// compare their number with runtime.NumCPU (a rank bound by another
// launcher is taken for a shared one).
func CoresShared(nodeRanks int) bool {
	ranks, cpus := CPUShare(nodeRanks)
	return ranks > cpus
}

// CPUShare is how many ranks share the CPUs this rank may run on, and
// how many CPUs those are, as CoresShared counts them.
func CPUShare(nodeRanks int) (ranks, cpus int) {
	if v, err := strconv.Atoi(os.Getenv(EnvBound)); err == nil && v > 0 {
		return v, runtime.NumCPU()
	}
	return nodeRanks, runtime.NumCPU()
}

// SpinEnv names the soft provider's polling setting (internal/config).
const SpinEnv = config.EnvSoftSpin

// NewSecret returns a fresh per-job key: SecretBytes bytes from crypto/rand,
// hex encoded.
func NewSecret() (string, error) {
	return randomHex(SecretBytes)
}

// NewJobID returns a short random hex job identifier (8 characters).
func NewJobID() (string, error) {
	return randomHex(4)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// FreePort returns a TCP port that is currently free on the IP address ip,
// found by listening on port 0 and closing the listener. Another process may
// take the port before it is used again; callers should treat a later bind
// failure as an ordinary error.
func FreePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, ln.Close()
}
