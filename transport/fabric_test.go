package transport

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// openJob opens n fabrics in this process, one per goroutine, over real
// loopback sockets, and runs fn on each.
func openJob(t *testing.T, n int, fn func(f *Fabric) error) {
	t.Helper()
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	secretHex, _ := launch.NewSecret()
	secret, _ := hex.DecodeString(secretHex)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := Rendezvous(RendezvousConfig{Rank: r, Size: n, Rendezvous: fmt.Sprintf("127.0.0.1:%d", port), Secret: secret, Addr: "127.0.0.1"})
			if err != nil {
				errs[r] = err
				return
			}
			f, err := Open(b, Options{Provider: testProvider(), Timeout: 20 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			defer f.Close()
			errs[r] = fn(f)
			if errs[r] == nil {
				errs[r] = f.LeaveBarrier()
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// testProvider is RMAGO_PROVIDER if set (the Soft-RoCE VM runs these tests
// on ibv), else soft.
func testProvider() string {
	if p := os.Getenv(EnvProvider); p != "" {
		return p
	}
	return "soft"
}

func TestBarrierAndAllgather(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			openJob(t, n, func(f *Fabric) error {
				for it := range 20 {
					if err := f.Barrier(); err != nil {
						return err
					}
					out := make([][]byte, f.Size())
					for i := range out {
						out[i] = make([]byte, 16)
					}
					if err := f.Allgather([]byte(fmt.Sprintf("r%d-i%d", f.Rank(), it)), out); err != nil {
						return err
					}
					for r := range out {
						want := fmt.Sprintf("r%d-i%d", r, it)
						if !bytes.HasPrefix(out[r], []byte(want)) {
							return fmt.Errorf("iteration %d: slot %d = %q, want %q", it, r, out[r], want)
						}
					}
				}
				return nil
			})
		})
	}
}

// TestLeaveBarrierDelivers: once LeaveBarrier returns, nothing this rank
// posted is still queued (a rank that closes then loses nothing), though
// every notification before it, its own included, was posted
// unsignalled; and the ranks then close one after another, the last
// barrier's notifications all delivered.
func TestLeaveBarrierDelivers(t *testing.T) {
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			openJob(t, n, func(f *Fabric) error {
				tag := MakeTag(TagUser, 7, 0)
				for range 50 {
					for r := range f.Size() {
						if r != f.Rank() {
							if err := f.Notify(r, tag); err != nil {
								return err
							}
						}
					}
				}
				if err := f.AwaitNotes(tag, 50*(f.Size()-1), nil); err != nil {
					return err
				}
				if err := f.LeaveBarrier(); err != nil {
					return err
				}
				for r := range f.Size() {
					if f.Outstanding(r) {
						return fmt.Errorf("rank %d: requests still outstanding after LeaveBarrier", r)
					}
				}
				return nil
			})
		})
	}
}

// sharedPage allocates and registers a page on every rank and gathers
// each rank's address and rkey (8 + 4 bytes) into all; done frees it.
func sharedPage(f *Fabric) (mem *Memory, mr verbs.MR, all [][]byte, done func(), err error) {
	g, err := f.AllocRegionExchange(4096, AllAccess)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return g.mem, g.mrs[0], descs(g), func() { g.Close() }, nil
}

// descs is every rank's address and rkey (8 + 4 bytes) of an exchanged
// region.
func descs(g *Region) [][]byte {
	all := make([][]byte, len(g.peers))
	for r, p := range g.peers {
		all[r] = make([]byte, 12)
		putU64(all[r], p.Addr)
		putU32(all[r][8:], p.RKey)
	}
	return all
}

func TestFlushAfterManyUnsignaled(t *testing.T) {
	openJob(t, 3, func(f *Fabric) error {
		mem, mr, all, done, err := sharedPage(f)
		if err != nil {
			return err
		}
		defer done()
		// Every rank adds 1 to a counter at every rank (itself included), 3*sendDepth times.
		src := mem.Bytes()[8:16]
		putU64(src, 1)
		for i := 0; i < 3*sendDepth; i++ {
			for r := range f.Size() {
				wr := verbs.SendWR{Op: verbs.OpFetchAdd, SGL: []verbs.SGE{{Addr: mr.Addr() + 16, Length: 8, LKey: mr.LKey()}}, RemoteAddr: getU64(all[r]), RKey: getU32(all[r][8:]), CompareAdd: 1}
				if _, err := f.Post(r, &wr); err != nil {
					return err
				}
			}
		}
		if err := f.FlushAll(); err != nil {
			return err
		}
		if err := f.Barrier(); err != nil {
			return err
		}
		if got, want := getU64(mem.Bytes()), uint64(3*sendDepth*f.Size()); got != want {
			return fmt.Errorf("counter %d, want %d", got, want)
		}
		// A bad rkey fails that connection with a remote access error (here
		// rank 0's loopback connection, so the others go on).
		if f.Rank() == 0 {
			wr := verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}, RemoteAddr: getU64(all[0]), RKey: getU32(all[0][8:]) ^ 0x30000}
			if _, err := f.Post(0, &wr); err != nil {
				return err
			}
			if err := f.Flush(0); !errors.Is(err, verbs.ErrRemoteAccess) || !errors.Is(err, ErrPeer) {
				return fmt.Errorf("flush after a bad rkey: %v", err)
			}
		}
		return nil
	})
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}
func putU32(b []byte, v uint32) {
	for i := range 4 {
		b[i] = byte(v >> (8 * i))
	}
}
func getU64(b []byte) (v uint64) {
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return
}
func getU32(b []byte) (v uint32) {
	for i := range 4 {
		v |= uint32(b[i]) << (8 * i)
	}
	return
}

// TestNoAllocs: the data path of the fabric allocates nothing in steady
// state: a write, a read and atomics (unsignalled, signalled) with their waits, a flush, a
// notification and its wait, a barrier.
func TestNoAllocs(t *testing.T) {
	openJob(t, 2, func(f *Fabric) error {
		_, mr, all, done, err := sharedPage(f)
		if err != nil {
			return err
		}
		defer done()
		peer := 1 - f.Rank()
		remote := Remote{Addr: getU64(all[peer]), RKey: getU32(all[peer][8:])}
		local := Local{Addr: mr.Addr() + 1024, LKey: mr.LKey()}
		tag := MakeTag(TagWorld, 7, 1)
		var errs error
		cycle := func() {
			// Each rank touches its own half of the peer's first 1 KiB.
			rem := Remote{Addr: remote.Addr + uint64(f.Rank())*512, RKey: remote.RKey}
			seq, err := f.Write(peer, local, rem, 64)
			errs = errors.Join(errs, err, f.Await(peer, seq))
			seq, err = f.Read(peer, local, rem, 64)
			errs = errors.Join(errs, err, f.Await(peer, seq))
			seq, err = f.FetchAdd(peer, local, Remote{Addr: rem.Addr + 256, RKey: rem.RKey}, 1)
			errs = errors.Join(errs, err, f.Await(peer, seq))
			seq, err = f.PostAtomic(peer, Atomic{Op: CompareSwapOp, Local: local, Remote: Remote{Addr: rem.Addr + 264, RKey: rem.RKey}})
			errs = errors.Join(errs, err, f.Await(peer, seq))
			_, err = f.Write(peer, local, rem, 8)
			errs = errors.Join(errs, err, f.Flush(peer), f.FlushAll())
			errs = errors.Join(errs, f.Notify(peer, tag), f.AwaitNotes(tag, 1, f.othersFn))
			errs = errors.Join(errs, f.Barrier())
		}
		cycle() // warm up
		allocs := testing.AllocsPerRun(100, cycle)
		if errs != nil {
			return errs
		}
		if allocs != 0 {
			return fmt.Errorf("%v allocations per cycle, want 0", allocs)
		}
		return nil
	})
}

// TestPostAtomics: rounds of fetch-and-adds and compare-and-swaps longer
// than one chain, from every rank to every rank at once, return exact old
// values and leave exact counts.
func TestPostAtomics(t *testing.T) {
	openJob(t, 3, func(f *Fabric) error {
		mem, mr, all, done, err := sharedPage(f)
		if err != nil {
			return err
		}
		defer done()
		const n = 2*ChainMax + 7 // three chains per round
		// Rank r owns words [r*n, (r+1)*n) of every page: nobody else
		// touches them, so the old values are known exactly.
		ops := make([]Atomic, n)
		local := func(i int) Local { return Local{Addr: mr.Addr() + 2048 + uint64(8*i), LKey: mr.LKey()} }
		for target := range f.Size() {
			remote := func(i int) Remote {
				return Remote{Addr: getU64(all[target]) + uint64(8*(f.Rank()*n+i)), RKey: getU32(all[target][8:])}
			}
			for round := range 3 {
				for i := range ops {
					ops[i] = Atomic{Op: FetchAddOp, Local: local(i), Remote: remote(i), CompareAdd: uint64(i + 1)}
					if round == 2 { // swap in i*1000 where the word holds 2*(i+1)
						ops[i] = Atomic{Op: CompareSwapOp, Local: local(i), Remote: remote(i), CompareAdd: uint64(2 * (i + 1)), Swap: uint64(i * 1000)}
					}
				}
				last, err := f.PostAtomics(target, ops)
				if err != nil {
					return err
				}
				if err := f.Await(target, last); err != nil {
					return err
				}
				for i := range ops {
					if old, want := getU64(mem.Bytes()[2048+8*i:]), uint64(round*(i+1)); old != want {
						return fmt.Errorf("target %d round %d word %d: old %d, want %d", target, round, i, old, want)
					}
				}
			}
		}
		if err := f.Barrier(); err != nil {
			return err
		}
		for r := range f.Size() {
			for i := range n {
				if got := getU64(mem.Bytes()[8*(r*n+i):]); got != uint64(i*1000) {
					return fmt.Errorf("word %d of rank %d: %d, want %d", i, r, got, i*1000)
				}
			}
		}
		return nil
	})
}

// TestFlushBehindIdleRequest: where signals are cheap (ibv; forced here on
// any provider), a write posted while nothing to its peer is outstanding
// is signalled, and the Flush behind it posts no request of its own but
// still returns only once the write has landed.
func TestFlushBehindIdleRequest(t *testing.T) {
	openJob(t, 2, func(f *Fabric) error {
		for _, c := range f.ctxs {
			if !c.atPost {
				c.cheapSignals = true
			}
		}
		mem, mr, all, done, err := sharedPage(f)
		if err != nil {
			return err
		}
		defer done()
		if f.Rank() == 0 {
			p, err := f.peerOf(1)
			if err != nil {
				return err
			}
			if err := f.Flush(1); err != nil { // the exchange's requests
				return err
			}
			src := mem.Bytes()[8:16]
			for i := range 20 {
				putU64(src, uint64(100+i))
				wr := verbs.SendWR{Op: verbs.OpWrite, SGL: []verbs.SGE{{Addr: mr.Addr() + 8, Length: 8, LKey: mr.LKey()}}, RemoteAddr: getU64(all[1]) + 64, RKey: getU32(all[1][8:])}
				seq, err := f.Post(1, &wr)
				if err != nil {
					return err
				}
				if p.c.atPost {
					continue
				}
				if wr.Flags&verbs.Signaled == 0 {
					return fmt.Errorf("write %d to an idle peer not signalled", i)
				}
				if err := f.Flush(1); err != nil {
					return err
				}
				if got := p.posted.Load(); got != seq {
					return fmt.Errorf("flush %d posted a request of its own: %d posted, the write was %d", i, got, seq)
				}
			}
		}
		if err := f.Barrier(); err != nil {
			return err
		}
		if f.Rank() == 1 {
			if got := getU64(mem.Bytes()[64:]); got != 119 {
				return fmt.Errorf("rank 1 holds %d, want 119", got)
			}
		}
		return f.Barrier()
	})
}
