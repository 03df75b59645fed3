// Package controltest runs in-process jobs for testing the synchronization
// protocols: N ranks as goroutines, each with its own fabric over loopback
// sockets (soft provider), a window control region and a data region whose
// every rank's address is known.
package controltest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// DataBytes is the size of each rank's data region; from StageOff up is
// the rank's staging area (sources of writes, destinations of reads).
const (
	DataBytes = 1 << 16
	StageOff  = DataBytes / 2
)

// Rank is one rank of an in-process test job.
type Rank struct {
	F    *transport.Fabric
	C    *control.Region
	Data []byte
	Reg  *transport.Region // the data region, exchanged with every rank
}

func (r *Rank) Me() int   { return r.F.Rank() }
func (r *Rank) Size() int { return r.F.Size() }

// Local is this rank's data region at off.
func (r *Rank) Local(off int) transport.Local {
	return r.Reg.Local(off)
}

// At is rank t's data region at off.
func (r *Rank) At(t, off int) transport.Remote {
	return r.Reg.Remote(t, off)
}

func (r *Rank) U64(off int) uint64 { return binary.LittleEndian.Uint64(r.Data[off:]) }

func (r *Rank) SetU64(off int, v uint64) { binary.LittleEndian.PutUint64(r.Data[off:], v) }

// Load reads a word of this rank's data region atomically (peers change it
// through the NIC while we look).
func (r *Rank) Load(off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.Data[off])))
}

// Read reads n bytes of rank t's data at off into the staging area at
// stage and waits for them.
func (r *Rank) Read(t, off, stage int, n uint32) error {
	seq, err := r.F.Read(t, r.Local(stage), r.At(t, off), n)
	if err != nil {
		return err
	}
	return r.F.Await(t, seq)
}

// Write puts 8 bytes holding v (staged at stage) to rank t's data at off,
// without waiting.
func (r *Rank) Write(t, off, stage int, v uint64) error {
	r.SetU64(stage, v)
	_, err := r.F.Write(t, r.Local(stage), r.At(t, off), 8)
	return err
}

// Options tune Run.
type Options struct {
	Timeout   time.Duration // fabric timeout; default 20s
	NoBarrier bool          // skip the final barrier and check (ranks die)
	// Check runs on every rank after a final barrier (nil: none), then a
	// barrier again so nobody frees while others check.
	Check func(r *Rank) error
}

// Run runs fn on n ranks in this process, each with its own fabric over
// loopback sockets, a window control region and a data region. Unless
// opts.NoBarrier, it ends with a barrier and checks that every lock word
// is back to zero.
func Run(t testing.TB, n int, opts Options, fn func(r *Rank) error) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 20 * time.Second
	}
	// Rank 0's listener is open before any rank starts: a port found free
	// and closed again could be taken by another test's connection first.
	ln, port, err := launch.ListenFree("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	secretHex, _ := launch.NewSecret()
	secret, _ := hex.DecodeString(secretHex)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runRank(i, n, ln, port, secret, opts, fn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}

func runRank(me, n int, ln *net.TCPListener, port int, secret []byte, opts Options, fn func(r *Rank) error) error {
	k, _ := strconv.Atoi(os.Getenv("RMAGO_TEST_NODES")) // pretend nodes: a mixed job (rmatest)
	cfg := transport.RendezvousConfig{Rank: me, Size: n, Rendezvous: fmt.Sprintf("127.0.0.1:%d", port), Secret: secret, Addr: "127.0.0.1",
		Nodes: transport.PretendNodes(n, k)}
	if me == 0 {
		cfg.Listener = ln
	}
	b, err := transport.Rendezvous(cfg)
	if err != nil {
		return err
	}
	f, err := transport.Open(b, transport.Options{Provider: provider(), Timeout: opts.Timeout, Notice: func(string) {}})
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := control.New(f)
	if err != nil {
		return err
	}
	reg, err := f.AllocRegionExchange(DataBytes, transport.AllAccess)
	if err != nil {
		return err
	}
	r := &Rank{F: f, C: c, Data: reg.Bytes(), Reg: reg}
	if err := fn(r); err != nil {
		return err
	}
	if opts.NoBarrier {
		return nil
	}
	if err := f.Barrier(); err != nil {
		return err
	}
	if opts.Check != nil {
		if err := opts.Check(r); err != nil {
			return err
		}
	}
	if err := f.Barrier(); err != nil { // nobody frees while others check
		return err
	}
	reg.Close()
	return c.Close()
}

// provider is the provider the ranks use: RMAGO_PROVIDER if set (the
// suites run on shm that way), else soft.
func provider() string {
	if p := os.Getenv("RMAGO_PROVIDER"); p != "" && p != "auto" {
		return p
	}
	if k, _ := strconv.Atoi(os.Getenv("RMAGO_TEST_NODES")); k > 1 {
		return "auto"
	}
	return "soft"
}
