package shm

import (
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/internal/memfd"
)

// An inbox is a queue pair's receive ring, in a memfd its peer maps: the
// peer (one producer, under its send lock) writes a slot for each write
// with immediate data or send and publishes it by advancing tail; the
// owner's completion queue (one consumer, under the queue pair's lock)
// drains it into posted receives. posted counts the receives the owner
// ever posted, so the producer knows, as a NIC does, whether a receive
// waits for its request (otherwise: receiver not ready).
//
//	0: tail (producer)  8: head (consumer)  16: posted  64: slots
//	slot: op(4) imm(4) len(4) pad(4) payload(slotSize-16)
const (
	inboxHdr = 64
	slotSize = 256
	slotHdr  = 16
)

type inbox struct {
	mem    *memfd.Mem     // the owner's allocation (nil at the peer)
	mp     *memfd.Mapping // the peer's mapping (nil at the owner)
	base   unsafe.Pointer
	tail   *atomic.Uint64
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
		tail:   (*atomic.Uint64)(p),
		head:   (*atomic.Uint64)(unsafe.Add(p, 8)),
		posted: (*atomic.Uint64)(unsafe.Add(p, 16)),
		mask:   uint64(slots - 1),
	}
}

func (in *inbox) slot(i uint64) unsafe.Pointer {
	return unsafe.Add(in.base, inboxHdr+int(i&in.mask)*slotSize)
}

func (in *inbox) free() {
	if in.mem != nil {
		in.mem.Free()
	}
	if in.mp != nil {
		in.mp.Unmap()
	}
}

// A bell is a completion queue's shared page: ring counts what producers
// added (the futex word sleepers wait on), sleepers says whether any
// waiter sleeps, so producers make the wake-up system call only then.
type bell struct {
	mem      *memfd.Mem
	mp       *memfd.Mapping
	ring     *atomic.Uint32
	sleepers *atomic.Uint32
}

const bellBytes = 64

func bellAt(p unsafe.Pointer) *bell {
	return &bell{ring: (*atomic.Uint32)(p), sleepers: (*atomic.Uint32)(unsafe.Add(p, 4))}
}

// ding says something was added and wakes sleepers if there are any.
func (b *bell) ding() {
	b.ring.Add(1)
	if b.sleepers.Load() != 0 {
		wake(b.ring)
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
