package pscw

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
	"github.com/rmago/rmago/verbs"
)

// dataBytes is the size of each rank's data region; the upper half is
// the rank's staging area (sources of writes, destinations of reads).
const (
	dataBytes = 1 << 16
	stageOff  = dataBytes / 2
)

// rank is one rank of an in-process test job.
type rank struct {
	f      *transport.Fabric
	c      *control.Region
	data   []byte
	mr     verbs.MR
	remote []transport.Remote // every rank's data region
}

func (r *rank) me() int   { return r.f.Rank() }
func (r *rank) size() int { return r.f.Size() }

// local is this rank's data region at off.
func (r *rank) local(off int) transport.Local {
	return transport.Local{Addr: r.mr.Addr() + uint64(off), LKey: r.mr.LKey()}
}

// at is rank t's data region at off.
func (r *rank) at(t, off int) transport.Remote {
	return transport.Remote{Addr: r.remote[t].Addr + uint64(off), RKey: r.remote[t].RKey}
}

func (r *rank) u64(off int) uint64 { return binary.LittleEndian.Uint64(r.data[off:]) }

func (r *rank) setU64(off int, v uint64) { binary.LittleEndian.PutUint64(r.data[off:], v) }

// load reads a word of this rank's data region atomically (peers change it
// through the NIC while we look).
func (r *rank) load(off int) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.data[off])))
}

// read reads n bytes of rank t's data at off into the staging area at
// stage and waits for them.
func (r *rank) read(t, off, stage int, n uint32) error {
	seq, err := r.f.Read(t, r.local(stage), r.at(t, off), n)
	if err != nil {
		return err
	}
	return r.f.Wait(t, seq)
}

// write puts 8 bytes holding v (staged at stage) to rank t's data at off,
// without waiting.
func (r *rank) write(t, off, stage int, v uint64) error {
	r.setU64(stage, v)
	_, err := r.f.Write(t, r.local(stage), r.at(t, off), 8)
	return err
}

type jobOpts struct {
	timeout   time.Duration // fabric timeout; default 20s
	noBarrier bool          // skip the final barrier and checks (ranks die)
}

// runJob runs fn on n ranks in this process, each with its own fabric over
// loopback sockets, a window control region and a data region. Unless
// opts.noBarrier, it ends with a barrier.
func runJob(t testing.TB, n int, opts jobOpts, fn func(r *rank) error) {
	t.Helper()
	if opts.timeout == 0 {
		opts.timeout = 20 * time.Second
	}
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	secretHex, _ := launch.NewSecret()
	secret, _ := hex.DecodeString(secretHex)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runRank(i, n, port, secret, opts, fn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}

func runRank(me, n, port int, secret []byte, opts jobOpts, fn func(r *rank) error) error {
	b, err := transport.Rendezvous(transport.RendezvousConfig{Rank: me, Size: n, Rendezvous: fmt.Sprintf("127.0.0.1:%d", port), Secret: secret, Addr: "127.0.0.1"})
	if err != nil {
		return err
	}
	f, err := transport.Open(b, transport.Options{Provider: "soft", Timeout: opts.timeout})
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := control.New(f)
	if err != nil {
		return err
	}
	mem, err := transport.AllocMemory(dataBytes)
	if err != nil {
		return err
	}
	mr, err := f.PD().RegMR(mem.Bytes(), verbs.AccessAll)
	if err != nil {
		return err
	}
	r := &rank{f: f, c: c, data: mem.Bytes(), mr: mr}
	var desc [12]byte
	binary.LittleEndian.PutUint64(desc[:], mr.Addr())
	binary.LittleEndian.PutUint32(desc[8:], mr.RKey())
	all := make([][]byte, n)
	for i := range all {
		all[i] = make([]byte, len(desc))
	}
	if err := f.Allgather(desc[:], all); err != nil {
		return err
	}
	for _, d := range all {
		r.remote = append(r.remote, transport.Remote{Addr: binary.LittleEndian.Uint64(d), RKey: binary.LittleEndian.Uint32(d[8:])})
	}
	if err := fn(r); err != nil {
		return err
	}
	if opts.noBarrier {
		return nil
	}
	if err := f.Barrier(); err != nil { // nobody frees while others work
		return err
	}
	mr.Dereg()
	mem.Free()
	return c.Close()
}
