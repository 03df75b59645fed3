package transport

import (
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// openMixed runs n in-process ranks on the auto provider, split into the
// pretend nodes ids (RendezvousConfig.Nodes), collecting rank 0's notices.
func openMixed(t *testing.T, ids []string, fn func(f *Fabric) error) []string {
	t.Helper()
	n := len(ids)
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	secretHex, _ := launch.NewSecret()
	secret, _ := hex.DecodeString(secretHex)
	errs := make([]error, n)
	var notices []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := Rendezvous(RendezvousConfig{Rank: r, Size: n, Rendezvous: fmt.Sprintf("127.0.0.1:%d", port), Secret: secret, Addr: "127.0.0.1", Nodes: ids})
			if err != nil {
				errs[r] = err
				return
			}
			f, err := Open(b, Options{Provider: "auto", Timeout: 20 * time.Second, Notice: func(s string) {
				mu.Lock()
				notices = append(notices, s)
				mu.Unlock()
			}})
			if err != nil {
				errs[r] = err
				return
			}
			defer f.Close()
			errs[r] = fn(f)
			if errs[r] == nil {
				errs[r] = f.Barrier()
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	return notices
}

// noHardware skips a test whose expectations assume that the network
// provider auto picks is soft.
func noHardware(t *testing.T) {
	for _, c := range verbs.Discover("") {
		if c.Kind == verbs.KindHardware && c.Err == nil {
			t.Skipf("an RDMA device is usable here (%s)", c.Name)
		}
	}
}

// A job on two pretend nodes reaches node-local peers (and itself) through
// shm and the others through soft; a job on one node opens only shm.
func TestMixedProviderOfEachPeer(t *testing.T) {
	noHardware(t)
	ids := PretendNodes(4, 2)
	notices := openMixed(t, ids, func(f *Fabric) error {
		if got := f.Providers(); !slices.Equal(got, []string{"soft", "shm"}) {
			return fmt.Errorf("providers %v", got)
		}
		for r := range f.Size() {
			want := "soft"
			if ids[r] == ids[f.Rank()] {
				want = "shm"
			}
			if got := f.ProviderOf(r); got != want {
				return fmt.Errorf("rank %d through %s, want %s", r, got, want)
			}
		}
		return nil
	})
	if len(notices) != 1 || !strings.Contains(notices[0], "using the soft (TCP) provider") {
		t.Fatalf("two nodes: notices %q", notices)
	}
	notices = openMixed(t, []string{"n", "n", "n"}, func(f *Fabric) error {
		if got := f.Providers(); !slices.Equal(got, []string{"shm"}) {
			return fmt.Errorf("one node: providers %v", got)
		}
		for r := range f.Size() {
			if got := f.ProviderOf(r); got != "shm" {
				return fmt.Errorf("one node: rank %d through %s", r, got)
			}
		}
		return nil
	})
	if len(notices) != 0 {
		t.Fatalf("one node: notices %q", notices)
	}
}

// Writes, reads and notifications reach every peer of a mixed job, each
// through its provider, with exact data.
func TestMixedDataAndNotify(t *testing.T) {
	const n = 4
	openMixed(t, PretendNodes(n, 2), func(f *Fabric) error {
		g, err := f.AllocRegionExchange(8*n+8*n, AllAccess)
		if err != nil {
			return err
		}
		defer g.Close()
		w := g.Words()
		for r := range n {
			w[n+r] = uint64(1000*f.Rank() + r) // staging: what goes to rank r
		}
		for r := range n {
			if _, err := f.Write(r, g.Local(8*(n+r)), g.Remote(r, 8*f.Rank()), 8); err != nil {
				return err
			}
			if err := f.Flush(r); err != nil {
				return err
			}
			if err := f.Notify(r, MakeTag(TagUser, 1, 0)); err != nil {
				return err
			}
		}
		if err := f.AwaitNotes(MakeTag(TagUser, 1, 0), n, f.othersFn); err != nil {
			return err
		}
		f.SyncMemory()
		for r := range n {
			if got, want := w[r], uint64(1000*r+f.Rank()); got != want {
				return fmt.Errorf("word from rank %d: %d, want %d", r, got, want)
			}
		}
		if err := f.Barrier(); err != nil {
			return err
		}
		// Read each peer's word written by rank (f.Rank()+1)%n back.
		for r := range n {
			src := (f.Rank() + 1) % n
			seq, err := f.Read(r, g.Local(8*(n+r)), g.Remote(r, 8*src), 8)
			if err != nil {
				return err
			}
			if err := f.Await(r, seq); err != nil {
				return err
			}
			f.SyncMemory()
			if got, want := w[n+r], uint64(1000*src+r); got != want {
				return fmt.Errorf("read from rank %d: %d, want %d", r, got, want)
			}
		}
		return f.Barrier() // before g.Close: peers may still read it
	})
}

// Fetch-adds and compare-swaps on the same words from node-local peers
// (shm: CPU atomics on the mapping), the owner itself and remote peers
// (soft: the responder's CPU atomics) stay atomic: exact totals.
func TestMixedAtomicsExactTotals(t *testing.T) {
	const n, k = 4, 300
	openMixed(t, PretendNodes(n, 2), func(f *Fabric) error {
		g, err := f.AllocRegionExchange(32, AllAccess)
		if err != nil {
			return err
		}
		defer g.Close()
		w := g.Words()
		for _, tgt := range []int{0, n - 1} { // one word on each pretend node
			for range k {
				if _, err := f.FetchAdd(tgt, g.Local(16), g.Remote(tgt, 0), 1); err != nil {
					return err
				}
				guess := uint64(0)
				for { // increment by compare-swap
					seq, err := f.CompareSwap(tgt, g.Local(24), g.Remote(tgt, 8), guess, guess+1)
					if err != nil {
						return err
					}
					if err := f.Await(tgt, seq); err != nil {
						return err
					}
					f.SyncMemory()
					if w[3] == guess {
						break
					}
					guess = w[3]
				}
			}
			if err := f.Flush(tgt); err != nil {
				return err
			}
		}
		if err := f.Barrier(); err != nil {
			return err
		}
		f.SyncMemory()
		if me := f.Rank(); me == 0 || me == n-1 {
			if fa, cs := g.Words()[0], g.Words()[1]; fa != n*k || cs != n*k {
				return fmt.Errorf("rank %d: fetch-add total %d, compare-swap total %d, want %d", me, fa, cs, n*k)
			}
		}
		return nil
	})
}

// When shm does not open, auto falls back to the network provider for
// every peer with a one-line notice.
func TestMixedShmFallbackNotice(t *testing.T) {
	noHardware(t)
	old := selectProvider
	selectProvider = func(name, device string, cfg verbs.Config) (verbs.Choice, error) {
		if name == shmName {
			return verbs.Choice{}, fmt.Errorf("%w: shm refused by the test", verbs.ErrNoDevice)
		}
		return old(name, device, cfg)
	}
	defer func() { selectProvider = old }()
	notices := openMixed(t, []string{"n", "n"}, func(f *Fabric) error {
		if got := f.Providers(); !slices.Equal(got, []string{"soft"}) {
			return fmt.Errorf("providers %v", got)
		}
		if f.ProviderOf(1-f.Rank()) != "soft" {
			return errors.New("peer not through soft")
		}
		return nil
	})
	var fallback []string
	for _, s := range notices {
		if strings.Contains(s, "shm provider unavailable") {
			fallback = append(fallback, s)
		}
	}
	if len(fallback) != 1 || !strings.Contains(fallback[0], "shm refused by the test") || !strings.Contains(fallback[0], "node-local peers use the soft provider") || strings.Contains(fallback[0], "\n") {
		t.Fatalf("notices %q", notices)
	}
}

// TestShareCores: a rank whose node runs more ranks than the machine has
// cores yields its core while it spins (Fabric.shareCores, passed to the
// providers as verbs.Config.ShareCores); a rank alone on its node keeps it.
func TestShareCores(t *testing.T) {
	cpus := runtime.NumCPU()
	if cpus > 8 {
		t.Skipf("%d cores: a crowded pretend node would take %d ranks", cpus, cpus+1)
	}
	ids := []string{"alone"}
	for range cpus + 1 {
		ids = append(ids, "crowded")
	}
	var mu sync.Mutex
	got := make([]bool, len(ids))
	openMixed(t, ids, func(f *Fabric) error {
		mu.Lock()
		got[f.Rank()] = f.shareCores
		mu.Unlock()
		return nil
	})
	for r, share := range got {
		if want := ids[r] == "crowded"; share != want {
			t.Errorf("rank %d on node %q: shareCores %v, want %v", r, ids[r], share, want)
		}
	}
}

// In a job of shm and soft, a waiter blocks in the shm CQ (the blocker)
// and soft's completions wake it: notifications sent well after the
// waits began, from a node-local peer and from the other node, both
// arrive; and the blocker's Wait, without a deadline, returns when a soft
// notification arrives (it would block for good if soft's completions did
// not wake it: mixedHangGuard).
func TestMixedBlockerWoken(t *testing.T) {
	noHardware(t)
	both, soft := MakeTag(TagPost, 7, 0), MakeTag(TagPost, 8, 0)
	openMixed(t, []string{"a", "a", "b"}, func(f *Fabric) error {
		if f.blocker == nil || f.blocker.name != shmName {
			return fmt.Errorf("blocker %v, want the shm context", f.blocker)
		}
		switch f.Rank() {
		case 0:
			if err := f.AwaitNotes(both, 2, func(yield func(int) bool) { _ = yield(1) && yield(2) }); err != nil {
				return err
			}
			if err := f.Notify(2, both); err != nil { // go on
				return err
			}
			guard := time.AfterFunc(mixedHangGuard, func() {
				t.Errorf("the blocker's Wait was not woken by soft's completion within %v", mixedHangGuard)
				f.blocker.cq.(verbs.Waker).Wake()
			})
			defer guard.Stop()
			for !f.HasNote(soft, 2) {
				b := f.blocker
				n, err := b.cq.Wait(b.wcs, time.Time{})
				f.mu.Lock()
				if n > 0 {
					f.dispatch(b, b.wcs[:n])
				}
				f.pollLocked()
				f.mu.Unlock()
				if err != nil {
					return err
				}
			}
			return f.AwaitNoteFrom(soft, 2)
		case 1:
			time.Sleep(30 * time.Millisecond)
			return f.Notify(0, both)
		default:
			time.Sleep(30 * time.Millisecond)
			if err := f.Notify(0, both); err != nil {
				return err
			}
			if err := f.AwaitNoteFrom(both, 0); err != nil {
				return err
			}
			time.Sleep(30 * time.Millisecond)
			return f.Notify(0, soft)
		}
	})
}

// mixedHangGuard is how long TestMixedBlockerWoken lets the blocker's Wait
// block before it calls the wake-up missing, inside the job's 20 s timeout
// (a hang guard, not a timing assertion: the wake-up comes at once or
// never).
const mixedHangGuard = 10 * time.Second
