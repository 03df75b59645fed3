package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/rmago/rmago/apps/internal/coll"
	"github.com/rmago/rmago/rma"
)

// config is one run: every rank inserts keys keys into a table of slots
// slots per rank, then looks them all up (and keys/4 absent ones).
type config struct {
	keys  int
	slots int
}

// mix is splitmix64's finalizer, a bijection of uint64 that maps only 0 to
// 0: distinct indices give distinct, nonzero keys, and it also serves as
// the hash of a key.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// key is the key of index i (i >= 0), never 0, the empty slot's mark.
func key(i int) int64 { return int64(mix(uint64(i) + 1)) }

// value is the value stored with k.
func value(k int64) int64 { return int64(mix(uint64(k)) | 1) }

// keyRange is the indices of rank r's keys: consecutive ranks share half
// of theirs, so every key but the first and last ranks' halves is
// inserted by two ranks at the same time.
func keyRange(cfg config, r int) (lo, hi int) {
	lo = r * (cfg.keys / 2)
	return lo, lo + cfg.keys
}

// distinct is the number of distinct keys all p ranks insert.
func distinct(cfg config, p int) int {
	_, hi := keyRange(cfg, p-1)
	return hi
}

// table is the distributed hash table: p*slots slots, slot g on rank
// g/slots. keys holds the slots' keys (0: empty), vals the values.
type table struct {
	keys, vals *rma.Window[int64]
	p, slots   int
}

// home is the first slot key k probes.
func (t *table) home(k int64) int { return int(mix(uint64(k)^0x5bd1e995) % uint64(t.p*t.slots)) }

// insert puts k → v in the table with open addressing (linear probing):
// compare-and-swap each probed slot from empty to k. It reports whether
// this call inserted k (false: another rank's insert got there first).
func (t *table) insert(k, v int64, val []int64) (bool, error) {
	g := t.home(k)
	for range t.p * t.slots {
		owner, i := g/t.slots, g%t.slots
		old, err := t.keys.CompareAndSwap(0, k, owner, i)
		if err != nil {
			return false, err
		}
		switch old {
		case 0: // claimed: store the value (completed by the next flush)
			val[0] = v
			return true, t.vals.Put(val, owner, i)
		case k: // already there
			return false, nil
		}
		g = (g + 1) % (t.p * t.slots)
	}
	return false, errors.New("hashtable: table full")
}

// lookup finds k: it gets each probed slot's key until k or an empty slot.
func (t *table) lookup(k int64, buf []int64) (v int64, found bool, err error) {
	g := t.home(k)
	for range t.p * t.slots {
		owner, i := g/t.slots, g%t.slots
		if err := t.keys.Get(buf, owner, i); err != nil {
			return 0, false, err
		}
		if err := t.keys.Flush(owner); err != nil {
			return 0, false, err
		}
		switch buf[0] {
		case 0:
			return 0, false, nil
		case k:
			if err := t.vals.Get(buf, owner, i); err != nil {
				return 0, false, err
			}
			if err := t.vals.Flush(owner); err != nil {
				return 0, false, err
			}
			return buf[0], true, nil
		}
		g = (g + 1) % (t.p * t.slots)
	}
	return 0, false, nil
}

// outcome is what a rank learns from a run.
type outcome struct {
	insert, lookup time.Duration // the slowest rank's
	seq            time.Duration // sequential inserts and lookups
	inserted       int           // keys inserted by all ranks' successful swaps
	verified       bool
	why            string
}

// run builds the table on every rank of w and verifies it. It is
// collective.
func run(w *rma.World, cfg config) (outcome, error) {
	var out outcome
	p, me := w.Size(), w.Rank()
	if cfg.keys < 2 || cfg.slots < 1 || distinct(cfg, p) > p*cfg.slots {
		return out, fmt.Errorf("%d distinct keys do not fit %d×%d slots", distinct(cfg, p), p, cfg.slots)
	}
	red, err := coll.NewReducer[float64](w, 4)
	if err != nil {
		return out, err
	}
	defer red.Free()
	keys, err := rma.Allocate[int64](w, cfg.slots)
	if err != nil {
		return out, err
	}
	vals, err := rma.Allocate[int64](w, cfg.slots)
	if err != nil {
		return out, err
	}
	t := &table{keys: keys, vals: vals, p: p, slots: cfg.slots}
	lo, hi := keyRange(cfg, me)
	// Insert in an order of my own, so that ranks sharing keys meet on
	// them at different times (and sometimes at the same).
	order := make([]int64, 0, hi-lo)
	for i := lo; i < hi; i++ {
		order = append(order, key(i))
	}
	for i := range order {
		j := int(mix(uint64(i*p+me)) % uint64(i+1))
		order[i], order[j] = order[j], order[i]
	}
	vbuf := make([]int64, len(order)) // put origins stay untouched until the flush

	if err := w.Barrier(); err != nil {
		return out, err
	}
	start := time.Now()
	if err := errors.Join(keys.LockAll(0), vals.LockAll(0)); err != nil {
		return out, err
	}
	mine := 0
	for n, k := range order {
		ok, err := t.insert(k, value(k), vbuf[n:n+1])
		if err != nil {
			return out, err
		}
		if ok {
			mine++
		}
	}
	if err := errors.Join(keys.UnlockAll(), vals.UnlockAll()); err != nil {
		return out, err
	}
	// Lookups start once every rank's inserts are complete.
	if err := w.Barrier(); err != nil {
		return out, err
	}
	insertTime := time.Since(start).Seconds()

	start = time.Now()
	if err := errors.Join(keys.LockAll(0), vals.LockAll(0)); err != nil {
		return out, err
	}
	missing, wrong, ghosts := 0, 0, 0
	buf := make([]int64, 1)
	for _, k := range order {
		v, found, err := t.lookup(k, buf)
		if err != nil {
			return out, err
		}
		switch {
		case !found:
			missing++
		case v != value(k):
			wrong++
		}
	}
	// Keys nobody inserted must not be found.
	for i := range cfg.keys / 4 {
		_, found, err := t.lookup(key(distinct(cfg, p)+me*cfg.keys+i), buf)
		if err != nil {
			return out, err
		}
		if found {
			ghosts++
		}
	}
	lookupTime := time.Since(start).Seconds()

	// No duplicates: get the whole table and count every key once.
	all := make([]int64, p*cfg.slots)
	for r := range p {
		if err := keys.Get(all[r*cfg.slots:(r+1)*cfg.slots], r, 0); err != nil {
			return out, err
		}
	}
	if err := errors.Join(keys.UnlockAll(), vals.UnlockAll()); err != nil {
		return out, err
	}
	expected := make(map[int64]bool, distinct(cfg, p))
	for i := range distinct(cfg, p) {
		expected[key(i)] = true
	}
	seen := make(map[int64]bool, len(all))
	dups, strangers := 0, 0
	for _, k := range all {
		switch {
		case k == 0:
		case seen[k]:
			dups++
		case !expected[k]:
			strangers++ // a key nobody inserted
		}
		seen[k] = true
	}
	for k := range expected {
		if !seen[k] {
			strangers++ // an inserted key missing from the table
		}
	}

	var seq float64
	if me == 0 {
		seq = sequential(cfg, p).Seconds()
	}
	maxes, err := red.Allreduce([]float64{insertTime, lookupTime}, coll.Max[float64])
	if err != nil {
		return out, err
	}
	sums, err := red.Allreduce([]float64{float64(missing + wrong + ghosts + dups + strangers), float64(mine), seq}, coll.Sum[float64])
	if err != nil {
		return out, err
	}
	out.insert = time.Duration(maxes[0] * float64(time.Second))
	out.lookup = time.Duration(maxes[1] * float64(time.Second))
	out.seq = time.Duration(sums[2] * float64(time.Second))
	out.inserted = int(sums[1])
	if missing+wrong+ghosts+dups+strangers > 0 {
		out.why = fmt.Sprintf("rank %d: %d keys not found, %d wrong values, %d absent keys found, %d duplicates, %d keys missing or foreign",
			me, missing, wrong, ghosts, dups, strangers)
	}
	switch {
	case sums[0] > 0 && out.why == "":
		out.why = fmt.Sprintf("%v errors on other ranks", sums[0])
	case sums[0] == 0 && out.inserted != distinct(cfg, p):
		out.why = fmt.Sprintf("%d successful inserts for %d distinct keys", out.inserted, distinct(cfg, p))
	}
	out.verified = out.why == ""
	return out, errors.Join(keys.Free(), vals.Free())
}

// sequential times the same work on one core: an open-addressing table of
// the same size in one array, every rank's inserts, then every rank's
// lookups.
func sequential(cfg config, p int) time.Duration {
	n := p * cfg.slots
	t := &table{p: p, slots: cfg.slots}
	ks := make([]int64, n)
	vs := make([]int64, n)
	start := time.Now()
	for r := range p {
		lo, hi := keyRange(cfg, r)
		for i := lo; i < hi; i++ {
			k := key(i)
			for g := t.home(k); ; g = (g + 1) % n {
				if ks[g] == 0 {
					ks[g], vs[g] = k, value(k)
					break
				}
				if ks[g] == k {
					break
				}
			}
		}
	}
	found := 0
	for r := range p {
		lo, hi := keyRange(cfg, r)
		for i := lo; i < hi; i++ {
			k := key(i)
			for g := t.home(k); ks[g] != 0; g = (g + 1) % n {
				if ks[g] == k {
					found++
					break
				}
			}
		}
	}
	d := time.Since(start)
	if found != p*cfg.keys {
		panic("sequential hash table lost keys")
	}
	return d
}
