package transport

import (
	"errors"
	"fmt"
	"testing"
)

// TestRegionExchange: every rank allocates and exchanges a region, writes
// its rank into its own slot of every rank's region, and adds rank+1 to
// every rank's counter word with signalled fetch-adds (PostAtomic); after a
// barrier each region holds exactly every rank's slot and the sum, no old
// value an add returned exceeds the sum less that add, an atomic without an
// operation is refused, and Close twice is harmless.
func TestRegionExchange(t *testing.T) {
	const n = 3
	openJob(t, n, func(f *Fabric) error {
		g, err := f.AllocRegionExchange(4096, AllAccess)
		if err != nil {
			return err
		}
		if g.Len() != 4096 || g.Access() != AllAccess || len(g.Words()) != 512 {
			return fmt.Errorf("region of %d bytes, access %v, %d words", g.Len(), g.Access(), len(g.Words()))
		}
		me := f.Rank()
		putU64(g.Bytes()[1024:], uint64(100+me)) // the source of the writes
		for r := range n {
			seq, err := f.Write(r, g.Local(1024), g.Remote(r, 8*(1+me)), 8)
			if err == nil {
				err = f.Await(r, seq)
			}
			if err != nil {
				return err
			}
			seq, err = f.PostAtomic(r, Atomic{Op: FetchAddOp, Local: g.Local(2048 + 8*r), Remote: g.Remote(r, 0), CompareAdd: uint64(me + 1)})
			if err == nil {
				err = f.Await(r, seq)
			}
			if err != nil {
				return err
			}
		}
		if err := f.Barrier(); err != nil {
			return err
		}
		f.SyncMemory()
		w := g.Words()
		if w[0] != n*(n+1)/2 {
			return fmt.Errorf("counter %d, want %d", w[0], n*(n+1)/2)
		}
		for r := range n {
			if w[1+r] != uint64(100+r) {
				return fmt.Errorf("slot of rank %d holds %d, want %d", r, w[1+r], 100+r)
			}
			if old := w[256+r]; old > n*(n+1)/2-uint64(me+1) {
				return fmt.Errorf("fetch-add to rank %d returned %d", r, old)
			}
		}
		if _, err := f.PostAtomic(me, Atomic{Local: g.Local(0), Remote: g.Remote(me, 0)}); err == nil {
			return errors.New("PostAtomic without an operation was accepted")
		}
		if err := f.Barrier(); err != nil { // nobody deregisters while others write
			return err
		}
		return errors.Join(g.Close(), g.Close())
	})
}
