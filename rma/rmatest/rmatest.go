// Package rmatest runs a job of N ranks inside one test process: each rank
// is a goroutine with its own rma.World, connected to the others over real
// loopback sockets by the real soft provider, so tests exercise the whole
// stack without starting processes.
//
// The same tests also run as separate processes: started by rmarun (the
// RMAGO_RANK environment is set), a test binary is one rank of the job, Run
// calls fn once with the World that rma.Init returns (on whatever provider
// RMAGO_PROVIDER selects), and tests written for another number of ranks
// are skipped:
//
//	go test -c -o rma.test ./rma
//	rmarun -n 4 ./rma.test -test.run 'TestPutGetRanks|TestAllToAll'
package rmatest

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/internal/join"
	"github.com/rmago/rmago/transport"
)

// Timeout bounds every blocking wait of the ranks, so that a test whose
// rank failed ends instead of hanging.
var Timeout = 30 * time.Second

// Run starts n ranks, calls fn on each with its World, and closes the
// Worlds. A rank's error or panic fails the test, naming the rank.
func Run(t testing.TB, n int, fn func(w *rma.World) error) {
	t.Helper()
	if InProcesses() {
		if size := jobSize(); size != 0 && size != n {
			t.Skipf("written for %d ranks; this job has %d", n, size)
		}
		w, err := rma.Init()
		if err != nil {
			t.Fatalf("rank %s: %v", os.Getenv(launch.EnvRank)+os.Getenv("PMI_RANK"), err)
		}
		if w.Size() != n { // the size was not in the environment
			w.Close()
			t.Skipf("written for %d ranks; this job has %d", n, w.Size())
		}
		err = fn(w)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Errorf("rank %d: %v", w.Rank(), err)
		}
		return
	}
	for r, err := range Start(n, fn) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// InProcesses reports whether this test process is one rank of a job that
// rmarun or a PMI launcher (mpiexec, srun --mpi=pmi2) started.
func InProcesses() bool {
	k, _ := launch.Detect(os.Getenv)
	return k != launch.Singleton
}

// jobSize is the job's size as the launcher's environment gives it
// (RMAGO_SIZE, PMI_SIZE), or 0 when it does not (mpiexec -pmi-port).
func jobSize() int {
	for _, v := range []string{launch.EnvSize, "PMI_SIZE"} {
		if n, err := strconv.Atoi(os.Getenv(v)); err == nil {
			return n
		}
	}
	return 0
}

// Provider is the provider in-process jobs use: RMAGO_PROVIDER if set
// (the suites run on shm that way), else soft; auto (a mixed job) when
// RMAGO_TEST_NODES splits the ranks into pretend nodes.
func Provider() string {
	if p := os.Getenv("RMAGO_PROVIDER"); p != "" && p != "auto" {
		return p
	}
	if pretendNodes() > 1 {
		return "auto"
	}
	return "soft"
}

// pretendNodes is RMAGO_TEST_NODES: in-process jobs split their ranks
// into that many pretend nodes (transport.PretendNodes), shm inside each
// and the network provider between them; 0 or 1: one node.
func pretendNodes() int {
	k, _ := strconv.Atoi(os.Getenv("RMAGO_TEST_NODES"))
	return k
}

// Start is Run without a testing.TB, always in-process: it returns each
// rank's error.
func Start(n int, fn func(w *rma.World) error) []error {
	return start(Provider(), pretendNodes(), n, fn)
}

// StartOn is Start on the named provider with every rank on one node,
// whatever RMAGO_PROVIDER and RMAGO_TEST_NODES say: for what only one
// provider does (AllocateShared's segments need shm).
func StartOn(provider string, n int, fn func(w *rma.World) error) []error {
	return start(provider, 1, n, fn)
}

// start runs n ranks in-process on provider, split into nodes pretend
// nodes (0 or 1: one node).
func start(provider string, nodes, n int, fn func(w *rma.World) error) []error {
	errs := make([]error, n)
	// Rank 0's listener is open before any rank starts: a port found free
	// and closed again could be taken by another test's connection first.
	ln, port, err := launch.ListenFree(launch.DefaultAddr)
	if err != nil {
		for r := range errs {
			errs[r] = err
		}
		return errs
	}
	defer ln.Close()
	secretHex, _ := launch.NewSecret()
	secret, _ := hex.DecodeString(secretHex)
	rendezvous := net.JoinHostPort(launch.DefaultAddr, strconv.Itoa(port))
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
				}
			}()
			cfg := transport.RendezvousConfig{Rank: r, Size: n, Rendezvous: rendezvous, Secret: secret, Addr: launch.DefaultAddr,
				Nodes: transport.PretendNodes(n, nodes)}
			if r == 0 {
				cfg.Listener = ln
			}
			b, err := transport.Rendezvous(cfg)
			if err != nil {
				errs[r] = err
				return
			}
			v, err := join.World(b, transport.Options{Provider: provider, Timeout: Timeout, Notice: func(string) {}})
			if err != nil {
				errs[r] = err
				return
			}
			w := v.(*rma.World)
			errs[r] = fn(w)
			if cerr := w.Close(); errs[r] == nil {
				errs[r] = cerr
			}
		}()
	}
	wg.Wait()
	return errs
}
