package shm

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/internal/keytab"
)

// The shared region table: one 32-byte entry per region index, in a memfd
// every connected peer maps. A key's low 16 bits are its index, its high
// 16 bits random, so a stale or guessed key misses.
//
//	word 0: tag = key<<32 | fd<<16 | access<<8 | flags (live 1,
//	        memfd-backed 2); fd, when not 0, is the owner's descriptor of
//	        the memfd holding the region from its start (mapFromProc)
//	word 1: the region's first address, in the owner's address space
//	word 2: its length
//	word 3: accesses in flight (origins add 1 before they check the tag
//	        and subtract it when done; Dereg clears live and waits for 0)
const (
	maxRegions = keytab.Slots
	entryBytes = 32
	tableBytes = maxRegions * entryBytes

	flagLive  = 1
	flagMemfd = 2
)

type entry struct {
	tag   atomic.Uint64
	addr  atomic.Uint64
	len   atomic.Uint64
	users atomic.Int64
}

type table [maxRegions]entry

func tableAt(p unsafe.Pointer) *table { return (*table)(p) }

// check admits an access of n bytes at addr with rights need to the region
// of key: it counts the access in (the caller calls done unless check
// fails) and returns the entry. Zero-length accesses check nothing.
func (t *table) check(key uint32, addr, n uint64, need verbs.Access) (*entry, bool) {
	e := &t[key&(maxRegions-1)]
	e.users.Add(1)
	tag := e.tag.Load()
	if uint32(tag>>32) != key || tag&flagLive == 0 || verbs.Access(tag>>8&0xff)&need != need {
		e.users.Add(-1)
		return nil, false
	}
	ra, rl := e.addr.Load(), e.len.Load()
	if addr < ra || n > rl || addr-ra > rl-n {
		e.users.Add(-1)
		return nil, false
	}
	return e, true
}

func (e *entry) done() { e.users.Add(-1) }

// region is a registered memory region.
type region struct {
	pd     *pd
	base   unsafe.Pointer
	addr   uint64
	length uint64
	key    uint32
	access verbs.Access
	fd     int   // the memfd holding it, -1 if none
	off    int64 // its offset in that memfd
	dying  atomic.Bool
}

func (r *region) Addr() uint64         { return r.addr }
func (r *region) Len() int             { return int(r.length) }
func (r *region) LKey() uint32         { return r.key }
func (r *region) RKey() uint32         { return r.key }
func (r *region) Access() verbs.Access { return r.access }

func (p *pd) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if err := verbs.CheckRegMR(buf, access); err != nil {
		return nil, err
	}
	base := unsafe.Pointer(unsafe.SliceData(buf))
	r := &region{pd: p, base: base, addr: uint64(uintptr(base)), length: uint64(len(buf)), access: access, fd: -1}
	if fd, off, err := memfd.Lookup(uintptr(base), len(buf)); err == nil {
		// The region keeps its own descriptor, so that what it hands to
		// peers is never a descriptor its allocation closed and the
		// process reused.
		if dup, err := dupCloexec(fd); err == nil {
			r.fd, r.off = dup, off
		}
	}
	if err := p.ctx.addRegion(r); err != nil {
		if r.fd >= 0 {
			syscall.Close(r.fd)
		}
		return nil, err
	}
	return r, nil
}

// addRegion gives r a key and publishes it in the shared table. An index
// is reused only once no origin still counts itself in on its entry.
func (c *device) addRegion(r *region) error {
	_, err := c.regions.Add(r, func(idx uint32) bool { return c.table[idx].users.Load() == 0 }, func(key uint32) {
		r.key = key
		e := &c.table[keytab.Index(key)]
		e.addr.Store(r.addr)
		e.len.Store(r.length)
		flags := uint64(flagLive)
		if r.fd >= 0 {
			flags |= flagMemfd
			if r.off == 0 && r.fd < 1<<16 {
				flags |= uint64(r.fd) << 16
			}
		}
		e.tag.Store(uint64(key)<<32 | uint64(r.access)<<8 | flags)
	})
	return err
}

// lookup finds this process's live region with key, or nil.
func (c *device) lookup(key uint32) *region {
	r := c.regions.Lookup(key)
	if r == nil || r.dying.Load() {
		return nil
	}
	return r
}

// Dereg unpublishes the region, then waits for the accesses in flight,
// at most the context's timeout (an origin killed in the middle of a copy
// never finishes it).
func (r *region) Dereg() error {
	if r.dying.Swap(true) {
		return fmt.Errorf("%w: region already deregistered", verbs.ErrClosed)
	}
	c := r.pd.ctx
	e := &c.table[r.key&(maxRegions-1)]
	e.tag.Store(uint64(r.key) << 32) // not live
	var deadline time.Time
	if c.timeout > 0 {
		deadline = time.Now().Add(c.timeout)
	}
	pause := time.Microsecond
	for e.users.Load() != 0 && (deadline.IsZero() || time.Now().Before(deadline)) {
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
	c.regions.Remove(r.key)
	if r.fd >= 0 {
		// A responder may be sending it right now: SCM_RIGHTS takes its
		// own reference, so closing ours later is enough.
		syscall.Close(r.fd)
	}
	return nil
}

// resolve maps a local SGE to bytes of a live region of pd with access need.
func (c *device) resolve(p *pd, s verbs.SGE, need verbs.Access) ([]byte, error) {
	r := c.lookup(s.LKey)
	if r == nil || r.pd != p || r.access&need != need {
		return nil, fmt.Errorf("%w: lkey %#x", verbs.ErrLocalAccess, s.LKey)
	}
	if s.Addr < r.addr || uint64(s.Length) > r.length || s.Addr-r.addr > r.length-uint64(s.Length) {
		return nil, fmt.Errorf("%w: [%#x,+%d) outside region", verbs.ErrLocalAccess, s.Addr, s.Length)
	}
	if s.Length == 0 {
		return nil, nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(r.base, s.Addr-r.addr)), s.Length), nil
}

// dupCloexec duplicates fd, close-on-exec.
func dupCloexec(fd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
