package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// Lazy connections (connect.go): a job connects only the pairs that
// communicate, one connection per pair whoever asks first, a peer's first
// request is accepted by a rank that never contacted it, concurrent first
// posts share one connection, and a peer that is gone before it was ever
// contacted gives an error naming it at once.

// peersOf lists the ranks f holds a queue pair for, itself excluded.
func peersOf(f *Fabric) []int {
	var rs []int
	for r := range f.size {
		if r != f.rank && f.peers[r].Load() != nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// settled waits until f's connection attempt with rank r, if any, has
// ended, so that its counts are final: a passive side sees a peer's first
// requests run as soon as the connection is attached, a little before its
// acceptor records the connection.
func settled(f *Fabric, r int) {
	if p := f.peers[r].Load(); p != nil && p.connDone != nil {
		<-p.connDone
	}
}

// exposeWord registers an 8-byte word of f's memory for remote access.
func exposeWord(t *testing.T, f *Fabric) (*Memory, verbs.MR) {
	t.Helper()
	g, err := f.AllocRegion(8, AllAccess)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g.mem, g.mrs[0]
}

// awaitWord drives f, as a goroutine polling its own memory does, until
// the word at b holds want. It contacts no peer.
func awaitWord(f *Fabric, b []byte, want uint64) error {
	w := f.NewPoller()
	defer w.Done()
	for {
		f.SyncMemory()
		if binary.LittleEndian.Uint64(b) == want {
			return nil
		}
		if !w.Pause() {
			return fmt.Errorf("word is %d, want %d", binary.LittleEndian.Uint64(b), want)
		}
	}
}

// TestLazyConnectsOnlyUsedPairs: in a job of 6 where only ranks 0 and 1,
// and 2 and 3, talk (a write and a notification one way, a notification
// back), exactly those two pairs are connected, with one connection each;
// ranks 4 and 5 connect to nobody.
func TestLazyConnectsOnlyUsedPairs(t *testing.T) {
	fs := openFabrics(t, 6, hangBound)
	for _, f := range fs {
		if got := peersOf(f); len(got) != 0 {
			t.Fatalf("rank %d holds queue pairs for %v after Open, want none", f.rank, got)
		}
	}
	const ping, pong = 0x8000_0100, 0x8000_0200
	mems := make([]*Memory, 6)
	rems := make([]Remote, 6)
	locals := make([]Local, 6)
	for r, f := range fs {
		mem, mr := exposeWord(t, f)
		mems[r] = mem
		rems[r] = Remote{Addr: mr.Addr(), RKey: mr.RKey()}
		locals[r] = Local{Addr: mr.Addr(), LKey: mr.LKey()}
	}
	partner := map[int]int{0: 1, 1: 0, 2: 3, 3: 2}
	onRanks(t, fs[:4], func(f *Fabric) error {
		me := f.Rank()
		other := partner[me]
		from := func(yield func(int) bool) { yield(other) }
		if me%2 == 0 { // the active side: write, notify, wait for the answer
			binary.LittleEndian.PutUint64(mems[me].Bytes(), uint64(100+me))
			if _, err := f.Write(other, locals[me], rems[other], 8); err != nil {
				return err
			}
			if err := f.Notify(other, ping); err != nil {
				return err
			}
			return f.AwaitNotes(pong, 1, from)
		}
		if err := f.AwaitNotes(ping, 1, from); err != nil {
			return err
		}
		f.SyncMemory()
		if got := binary.LittleEndian.Uint64(mems[me].Bytes()); got != uint64(100+other) {
			return fmt.Errorf("word from rank %d is %d, want %d", other, got, 100+other)
		}
		return f.Notify(other, pong)
	})
	var accepted, handed, dialed int32
	for r, f := range fs {
		for o := range fs {
			settled(f, o)
		}
		want := []int{}
		if p, ok := partner[r]; ok {
			want = []int{p}
		}
		if got := peersOf(f); !slices.Equal(got, want) {
			t.Errorf("rank %d holds queue pairs for %v, want %v", r, got, want)
		}
		accepted += f.conns.accepted.Load()
		handed += f.conns.handed.Load()
		dialed += f.conns.dialed.Load()
	}
	if accepted+handed != 2 || dialed != accepted+2*handed {
		t.Errorf("connections: %d accepted + %d handed over (dialed %d), want 2 pairs, one connection each", accepted, handed, dialed)
	}
}

// TestConcurrentFirstPosts: 32 goroutines of rank 0 post their first
// fetch-and-add to rank 1 at once. One connection is made (one dial, one
// acceptance), every atomic lands once, and each goroutine gets a
// distinct old value.
func TestConcurrentFirstPosts(t *testing.T) {
	fs := openFabrics(t, 2, hangBound)
	mem1, mr1 := exposeWord(t, fs[1])
	const n = 32
	sink, err := fs[0].AllocRegion(8*n, AllAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	remote := Remote{Addr: mr1.Addr(), RKey: mr1.RKey()}
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			<-start
			local := sink.Local(8 * g)
			seq, err := fs[0].FetchAdd(1, local, remote, 1)
			if err == nil {
				err = fs[0].Await(1, seq)
			}
			errs[g] = err
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := awaitWord(fs[1], mem1.Bytes(), n); err != nil {
		t.Fatal(err)
	}
	var olds []uint64
	for g := range n {
		olds = append(olds, binary.LittleEndian.Uint64(sink.Bytes()[8*g:]))
	}
	slices.Sort(olds)
	for i, v := range olds {
		if v != uint64(i) {
			t.Fatalf("old values %v, want 0..%d once each", olds, n-1)
		}
	}
	settled(fs[1], 0)
	if d, a := fs[0].conns.dialed.Load(), fs[1].conns.accepted.Load(); d != 1 || a != 1 || fs[0].conns.accepted.Load() != 0 || fs[1].conns.dialed.Load() != 0 {
		t.Errorf("rank 0 dialed %d, rank 1 accepted %d; want one connection", d, a)
	}
}

// TestFirstContactFromPassiveSide: rank 1 never contacts rank 0; rank 0's
// first write and notification reach it (its acceptor makes the queue pair
// on demand), and rank 1's answer goes back over that same connection.
func TestFirstContactFromPassiveSide(t *testing.T) {
	fs := openFabrics(t, 2, hangBound)
	mem1, mr1 := exposeWord(t, fs[1])
	mem0, mr0 := exposeWord(t, fs[0])
	binary.LittleEndian.PutUint64(mem0.Bytes(), 0xfeed)
	if _, err := fs[0].Write(1, Local{Addr: mr0.Addr(), LKey: mr0.LKey()}, Remote{Addr: mr1.Addr(), RKey: mr1.RKey()}, 8); err != nil {
		t.Fatal(err)
	}
	// Rank 1 only polls its own memory: it contacts nobody.
	if err := awaitWord(fs[1], mem1.Bytes(), 0xfeed); err != nil {
		t.Fatal(err)
	}
	settled(fs[1], 0)
	p := fs[1].peers[0].Load()
	if p == nil || !p.ready.Load() || p.outbound || fs[1].conns.accepted.Load() != 1 || fs[1].conns.dialed.Load() != 0 {
		t.Fatalf("rank 1's queue pair for rank 0: %+v (accepted %d, dialed %d), want one accepted on demand", p, fs[1].conns.accepted.Load(), fs[1].conns.dialed.Load())
	}
	const answer = 0x8000_0300
	if err := fs[1].Notify(0, answer); err != nil {
		t.Fatal(err)
	}
	if err := fs[0].AwaitNotes(answer, 1, func(yield func(int) bool) { yield(1) }); err != nil {
		t.Fatal(err)
	}
	if d := fs[1].conns.dialed.Load() + fs[0].conns.accepted.Load(); d != 0 {
		t.Errorf("the answer made %d more connections, want none", d)
	}
}

// TestCrossingConnects: every rank of 8 notifies every other at once (a
// barrier), so most pairs ask for their connection from both sides
// together; every pair still ends with exactly one connection, and five
// more barriers reuse them.
func TestCrossingConnects(t *testing.T) {
	const n = 8
	fs := openFabrics(t, n, hangBound)
	for range 6 {
		onRanks(t, fs, func(f *Fabric) error { return f.Barrier() })
	}
	var accepted, handed, dialed int32
	for _, f := range fs {
		for o := range fs {
			settled(f, o)
		}
		if got := len(peersOf(f)); got != n-1 {
			t.Errorf("rank %d holds %d queue pairs, want %d", f.rank, got, n-1)
		}
		accepted += f.conns.accepted.Load()
		handed += f.conns.handed.Load()
		dialed += f.conns.dialed.Load()
	}
	if accepted+handed != n*(n-1)/2 || dialed != accepted+2*handed {
		t.Errorf("%d accepted + %d handed over (dialed %d), want %d pairs, one connection each", accepted, handed, dialed, n*(n-1)/2)
	}
	t.Logf("%d pairs: %d accepted, %d crossed", n*(n-1)/2, accepted, handed)
}

// TestPeerGoneBeforeContact: rank 2 leaves before any rank contacted it.
// A notification to it, and a wait for its notification (which contacts
// it in the background), fail at once, not at the timeout, with ErrPeer
// naming rank 2; the live ranks go on.
func TestPeerGoneBeforeContact(t *testing.T) {
	fs := openFabrics(t, 3, hangBound)
	fs[2].Close()
	const tag, live = 0x8000_0400, 0x8000_0500
	onRanks(t, fs[:2], func(f *Fabric) error {
		if f.Rank() == 0 {
			err := f.Notify(2, tag)
			if !errors.Is(err, ErrPeer) || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 2") {
				return fmt.Errorf("notify a rank gone before contact: %v", err)
			}
		} else {
			err := f.AwaitNotes(tag, 1, func(yield func(int) bool) { yield(2) })
			if !errors.Is(err, ErrPeer) || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 2") {
				return fmt.Errorf("wait for a rank gone before contact: %v", err)
			}
		}
		if err := f.Notify(1-f.Rank(), live); err != nil {
			return err
		}
		return f.AwaitNotes(live, 1, func(yield func(int) bool) { yield(1 - f.Rank()) })
	})
}

// TestEagerConnect: RMAGO_CONNECT=eager (Options.Connect) connects every
// pair in Open, as the ibv provider always does: no connection is made
// later, on either side.
func TestEagerConnect(t *testing.T) {
	const n = 4
	fs, err := openFabricsWith(t, n, func(int) Options { return Options{Provider: "soft", Timeout: hangBound, Connect: "eager"} })
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.ctxs[0].cm != nil || len(peersOf(f)) != n-1 {
			t.Fatalf("rank %d: lazy %v, queue pairs for %v after an eager Open", f.rank, f.ctxs[0].cm != nil, peersOf(f))
		}
	}
	onRanks(t, fs, func(f *Fabric) error { return f.Barrier() })
	for _, f := range fs {
		if a, d := f.conns.accepted.Load(), f.conns.dialed.Load(); a != 0 || d != 0 {
			t.Errorf("rank %d accepted %d and dialed %d connections after Open", f.rank, a, d)
		}
	}
}

// TestConnectModesDisagree: ranks that disagree on connecting lazily fail
// Open with ErrBootstrap naming the setting; a bad setting is refused.
func TestConnectModesDisagree(t *testing.T) {
	_, err := openFabricsWith(t, 2, func(r int) Options {
		return Options{Provider: "soft", Timeout: hangBound, Connect: []string{"lazy", "eager"}[r]}
	})
	if !errors.Is(err, ErrBootstrap) || !strings.Contains(err.Error(), EnvConnect) {
		t.Fatalf("Open with mixed modes: %v", err)
	}
	_, err = openFabricsWith(t, 1, func(int) Options { return Options{Provider: "soft", Connect: "sometimes"} })
	if err == nil || !strings.Contains(err.Error(), EnvConnect) {
		t.Fatalf("Open with a bad mode: %v", err)
	}
}
