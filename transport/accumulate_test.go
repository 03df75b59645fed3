package transport

import (
	"fmt"
	"testing"
)

// TestPostAccumulate: every rank adds its own vector into the first words
// of every rank's page with bulk accumulates (itself included, through
// its loopback queue pair), then fetches them back with a fetching
// accumulate: the sums are exact, and the old values are what the
// accumulates left. On a provider without bulk accumulates it checks only
// that it says so.
func TestPostAccumulate(t *testing.T) {
	const words = 40
	openJob(t, 3, func(f *Fabric) error {
		ok, maxFetch := f.BulkAccumulate()
		if !ok {
			if f.Device().Provider == "soft" {
				return fmt.Errorf("the soft provider does not report bulk accumulates")
			}
			return nil
		}
		if maxFetch < 8*words {
			return fmt.Errorf("fetch limit %d", maxFetch)
		}
		mem, mr, all, done, err := sharedPage(f)
		if err != nil {
			return err
		}
		defer done()
		b := mem.Bytes()
		for i := range words {
			putU64(b[2048+8*i:], uint64(f.Rank()+1)<<(8*uint(i%4)))
		}
		local := Local{Addr: mr.Addr() + 2048, LKey: mr.LKey()}
		for target := range f.Size() {
			remote := Remote{Addr: getU64(all[target]), RKey: getU32(all[target][8:])}
			if _, err := f.PostAccumulate(target, Accumulate{Op: AccSum, Type: Uint64, Local: local, Len: 8 * words, Remote: remote}); err != nil {
				return err
			}
		}
		if err := f.FlushAll(); err != nil {
			return err
		}
		if err := f.Barrier(); err != nil {
			return err
		}
		// 1+2+3 = 6 in every byte lane the ranks used.
		for target := range f.Size() {
			remote := Remote{Addr: getU64(all[target]), RKey: getU32(all[target][8:])}
			seq, err := f.PostAccumulate(target, Accumulate{Op: AccNoOp, Type: Uint64, Local: local, Len: 8 * words, Remote: remote, Fetch: true})
			if err != nil {
				return err
			}
			if err := f.Await(target, seq); err != nil {
				return err
			}
			for i := range words {
				if got, want := getU64(b[2048+8*i:]), uint64(6)<<(8*uint(i%4)); got != want {
					return fmt.Errorf("rank %d word %d: %#x, want %#x", target, i, got, want)
				}
			}
		}
		if _, err := f.PostAccumulate(0, Accumulate{Op: AccBXor, Type: Float64, Local: local, Len: 8}); err == nil {
			return fmt.Errorf("bitwise accumulate on floats posted")
		}
		return f.Barrier() // no rank frees its page while others read it
	})
}
