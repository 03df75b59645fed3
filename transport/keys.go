package transport

import "sync"

// Local keys of a fabric with several provider contexts (contexts.go): a
// region has one lkey per context, but Local carries one key and no peer.
// In such a fabric a Local's LKey is a handle: the region's index in the
// fabric's table of lkeys, translated to the lkey of the context serving
// the peer when a request is posted (one atomic load and two indexed
// loads; nothing allocates). A fabric with one context uses the
// provider's lkey itself and translates nothing.

// keySet is a region's key on each context, by context index.
type keySet [MaxContexts]uint32

// Keys is a region's remote key on each of the fabric's contexts, for a
// caller that publishes its regions itself: each peer picks the one that
// serves it with Fabric.KeyOf.
type Keys = keySet

// badKey is the lkey of an unknown handle: no provider hands it out.
const badKey = ^uint32(0)

// lkeyTable is the fabric's table of handles, copied on write.
type lkeyTable struct {
	mu   sync.Mutex
	free []uint32 // handles of closed regions
}

// lkeyOn is the lkey on context ci of the Local key k.
func (f *Fabric) lkeyOn(k uint32, ci uint8) uint32 {
	if !f.multi {
		return k
	}
	t := *f.lkeys.Load()
	if int(k) < len(t) {
		return t[k][ci]
	}
	return badKey
}

// newHandle stores a region's lkeys and returns its handle.
func (f *Fabric) newHandle(ks keySet) uint32 {
	f.ltab.mu.Lock()
	defer f.ltab.mu.Unlock()
	old := *f.lkeys.Load()
	t := make([]keySet, len(old), max(len(old), 1)+1)
	copy(t, old)
	var h uint32
	if n := len(f.ltab.free); n > 0 {
		h = f.ltab.free[n-1]
		f.ltab.free = f.ltab.free[:n-1]
		t[h] = ks
	} else {
		h = uint32(len(t))
		t = append(t, ks)
	}
	f.lkeys.Store(&t)
	return h
}

// dropHandle forgets a closed region's handle.
func (f *Fabric) dropHandle(h uint32) {
	f.ltab.mu.Lock()
	defer f.ltab.mu.Unlock()
	old := *f.lkeys.Load()
	t := append([]keySet(nil), old...)
	t[h] = keySet{badKey, badKey}
	f.lkeys.Store(&t)
	f.ltab.free = append(f.ltab.free, h)
}

// KeyOf picks, of the keys rank r published for one of its regions
// (Region.Keys), the one this rank uses to reach it.
func (f *Fabric) KeyOf(r int, k Keys) uint32 { return k[f.via[r]] }
