package shm

import (
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/internal/futex"
	"github.com/rmago/rmago/internal/memfd"
)

// An inbox is a queue pair's receive ring, in a memfd its peer maps: the
// peer (one producer, under its send lock) writes a slot for each write
// with immediate data or send and publishes it by storing the slot's
// sequence number last; the owner's completion queue (one consumer, under
// the queue pair's lock) drains it into posted receives. An entry thus
// costs one cache line moving from the producer's core to the consumer's
// (a separate tail word and doorbell would move three). posted counts the
// receives the owner ever posted, so the producer knows, as a NIC does,
// whether a receive waits for its request (otherwise: receiver not
// ready); the producer rereads it only when the count it last read is
// used up.
//
//	0: unused  8: head (consumer)  16: posted  64: slots
//	slot: op(4) imm(4) len(4) seq(4) payload(slotSize-16)
//
// seq is the slot's position in the stream plus one (modulo 2^32): the
// entry at position i has arrived when slot i&mask holds seq i+1.
const (
	inboxHdr = 64
	slotSize = 256
	slotHdr  = 16
)

type inbox struct {
	mem    *memfd.Mem     // the owner's allocation (nil at the peer)
	mp     *memfd.Mapping // the peer's mapping (nil at the owner)
	base   unsafe.Pointer
	head   *atomic.Uint64
	posted *atomic.Uint64
	mask   uint64
}

// inboxSlots is the ring size for a queue pair taking depth receives.
func inboxSlots(depth int) int {
	n := 1
	for n < depth {
		n *= 2
	}
	return n
}

func inboxBytes(slots int) int { return inboxHdr + slots*slotSize }

func newInbox(depth int) (*inbox, error) {
	slots := inboxSlots(depth)
	m, err := memfd.Alloc(inboxBytes(slots), "rmago-shm-inbox")
	if err != nil {
		return nil, err
	}
	in := inboxAt(unsafe.Pointer(unsafe.SliceData(m.Bytes())), slots)
	in.mem = m
	return in, nil
}

func inboxAt(p unsafe.Pointer, slots int) *inbox {
	return &inbox{
		base:   p,
		head:   (*atomic.Uint64)(unsafe.Add(p, 8)),
		posted: (*atomic.Uint64)(unsafe.Add(p, 16)),
		mask:   uint64(slots - 1),
	}
}

func (in *inbox) slot(i uint64) unsafe.Pointer {
	return unsafe.Add(in.base, inboxHdr+int(i&in.mask)*slotSize)
}

// seqOf is slot i's sequence word.
func (in *inbox) seqOf(i uint64) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Add(in.slot(i), 12))
}

// arrived reports whether the entry at the consumer's head has arrived.
// One load of a word the producer writes only to publish: a waiting
// consumer spins on it without taking the line from the producer.
func (in *inbox) arrived() bool {
	h := in.head.Load()
	return in.seqOf(h).Load() == uint32(h+1)
}

func (in *inbox) free() {
	if in.mem != nil {
		in.mem.Free()
	}
	if in.mp != nil {
		in.mp.Unmap()
	}
}

// A bell is a completion queue's shared memory: ring counts the wake-ups
// (the futex word sleepers wait on), sleepers says whether any waiter
// sleeps, so producers make the wake-up system call only then. They are a
// cache line apart: a producer reads sleepers after every entry, and the
// consumer's own completions change ring; on one line, each entry would
// move it between the cores.
//
// Local completions ring the bell (ding). Peers' entries in an inbox do
// not: a waiter spins on the inboxes themselves, and producers alert the
// bell only when a waiter sleeps (the waiter counts itself in sleepers
// before its last look at the inboxes, and the producer reads sleepers
// after publishing: one of the two sees the other).
type bell struct {
	mem      *memfd.Mem
	mp       *memfd.Mapping
	ring     *atomic.Uint32
	sleepers *atomic.Uint32
}

const bellBytes = 128

func bellAt(p unsafe.Pointer) *bell {
	return &bell{ring: (*atomic.Uint32)(p), sleepers: (*atomic.Uint32)(unsafe.Add(p, 64))}
}

// ding says something was added and wakes sleepers if there are any.
func (b *bell) ding() {
	b.ring.Add(1)
	if b.sleepers.Load() != 0 {
		futex.Wake(b.ring)
	}
}

// alert wakes sleepers, if there are any, after an entry was published
// where waiters look without sleeping (an inbox).
func (b *bell) alert() {
	if b.sleepers.Load() != 0 {
		b.ring.Add(1)
		futex.Wake(b.ring)
	}
}

func (b *bell) free() {
	if b.mem != nil {
		b.mem.Free()
	}
	if b.mp != nil {
		b.mp.Unmap()
	}
}
