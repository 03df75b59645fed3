package transport

import (
	"fmt"
	"testing"
)

// TestPostGuardedWrite: every rank takes turns at a "lock" word of rank 0
// (a compare-and-swap guard 0 -> its rank+1) with a guarded 8-byte write
// of its stamp into rank 0's page, in rounds; the write lands exactly
// when the swap succeeded, which the old value says. Where the provider
// takes no guards (ibv), PostGuardedWrite refuses.
func TestPostGuardedWrite(t *testing.T) {
	openJob(t, 3, func(f *Fabric) error {
		mem, mr, all, done, err := sharedPage(f)
		if err != nil {
			return err
		}
		defer done()
		me := f.Rank()
		if me == 0 {
			if f.Guards(0) {
				return fmt.Errorf("Guards(self): true, want false (requests to itself run in the post)")
			}
			return f.Barrier()
		}
		if !f.Guards(0) {
			if _, err := f.PostGuardedWrite(0, []Atomic{{Op: CompareSwapOp}}, Local{}, Remote{}, 8); err == nil {
				return fmt.Errorf("PostGuardedWrite where the provider takes no guards: no error")
			}
			return f.Barrier()
		}
		page := getU64(all[0])
		rkey := getU32(all[0][8:])
		lockWord := Remote{Addr: page, RKey: rkey}
		slot := Remote{Addr: page + uint64(8*me), RKey: rkey} // this rank's stamp word at rank 0
		src := Local{Addr: mr.Addr() + 1024, LKey: mr.LKey()}
		old := Local{Addr: mr.Addr() + 1032, LKey: mr.LKey()}
		check := Local{Addr: mr.Addr() + 1040, LKey: mr.LKey()}
		for round := 1; round <= 50; round++ {
			putU64(mem.Bytes()[1024:], uint64(round*10+me))
			g := []Atomic{{Op: CompareSwapOp, Local: old, Remote: lockWord, CompareAdd: 0, Swap: uint64(me)}}
			seq, err := f.PostGuardedWrite(0, g, src, slot, 8)
			if err != nil {
				return err
			}
			if err := f.Await(0, seq); err != nil {
				return err
			}
			got := getU64(mem.Bytes()[1032:])
			// Read the stamp back.
			seq, err = f.Read(0, check, slot, 8)
			if err == nil {
				err = f.Await(0, seq)
			}
			if err != nil {
				return err
			}
			stamp := getU64(mem.Bytes()[1040:])
			landed := stamp == uint64(round*10+me)
			if landed != (got == 0) {
				return fmt.Errorf("round %d: the swap found %d, and the write landed: %v", round, got, landed)
			}
			if got == 0 { // held: release
				g[0] = Atomic{Op: CompareSwapOp, Local: old, Remote: lockWord, CompareAdd: uint64(me), Swap: 0}
				if seq, err = f.PostAtomics(0, g); err == nil {
					err = f.Await(0, seq)
				}
				if err != nil {
					return err
				}
			}
		}
		return f.Barrier()
	})
}
