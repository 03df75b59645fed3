// Package keytab is the memory-region key table the software providers
// share: it hands out 32-bit keys whose low 16 bits index the table and
// whose high 16 bits are a generation, random for an index's first key
// and one more for each later key of the same index, so a guessed key
// misses and a stale one always does (until the index has been reused
// 65536 times), and it finds a key's value without a lock or an
// allocation. (Random high bits for every key let a new region take the
// key of the one freed just before at the same index once in 65536
// reuses; a peer that cached a mapping of the old region under that key
// and address, the shm provider, then reached the old memory: a fence's
// note lost in a loop of windows created and freed, at the 34795th.)
package keytab

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rmago/rmago/verbs"
)

// Slots is the table's size: keys index slots 1 to Slots-1 (index 0 is
// never used, so key 0 is never valid).
const Slots = 1 << 16

// Index is the slot a key names.
func Index(key uint32) uint32 { return key & (Slots - 1) }

type slot[T any] struct {
	key uint32
	v   *T
}

// Table maps keys to values. Lookup is an atomic load of an immutable
// slice; Add and Remove copy it on write under a mutex. The zero value is
// an empty table.
type Table[T any] struct {
	mu    sync.Mutex
	slots atomic.Pointer[[]slot[T]]
}

// Add gives v a new key and stores it. It reuses the lowest free index
// for which reusable (if not nil) reports true, else appends one. publish
// (if not nil) runs under the table's lock with the new key before v
// becomes visible to Lookup. More than Slots-1 values is an error wrapping
// verbs.ErrInvalid.
func (t *Table[T]) Add(v *T, reusable func(index uint32) bool, publish func(key uint32)) (uint32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var old []slot[T]
	if p := t.slots.Load(); p != nil {
		old = *p
	}
	idx := -1
	for i := 1; i < len(old); i++ {
		if old[i].v == nil && (reusable == nil || reusable(uint32(i))) {
			idx = i
			break
		}
	}
	n := len(old)
	if idx < 0 {
		n = max(n, 1)
		if n >= Slots {
			return 0, fmt.Errorf("%w: more than %d regions", verbs.ErrInvalid, Slots-1)
		}
		idx = n
		n++
	}
	next := make([]slot[T], n)
	copy(next, old)
	var gen uint32
	if idx < len(old) && old[idx].key != 0 {
		gen = (old[idx].key>>16 + 1) & 0xffff // the index's previous key, plus one
	} else {
		var rnd [2]byte
		rand.Read(rnd[:])
		gen = uint32(binary.LittleEndian.Uint16(rnd[:]))
	}
	key := gen<<16 | uint32(idx)
	if publish != nil {
		publish(key)
	}
	next[idx] = slot[T]{key: key, v: v}
	t.slots.Store(&next)
	return key, nil
}

// Lookup returns the value stored under key, or nil.
func (t *Table[T]) Lookup(key uint32) *T {
	p := t.slots.Load()
	if p == nil {
		return nil
	}
	idx := int(Index(key))
	if idx >= len(*p) {
		return nil
	}
	s := &(*p)[idx]
	if s.key != key {
		return nil
	}
	return s.v
}

// Remove frees key's slot; its index may then be reused by Add, with the
// next generation.
func (t *Table[T]) Remove(key uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.slots.Load()
	if p == nil {
		return
	}
	old := *p
	idx := int(Index(key))
	if idx >= len(old) || old[idx].key != key {
		return
	}
	next := make([]slot[T], len(old))
	copy(next, old)
	next[idx] = slot[T]{key: key} // kept for the next key's generation
	t.slots.Store(&next)
}
