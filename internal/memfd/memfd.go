// Package memfd allocates page-aligned memory that other processes of the
// same user can map: anonymous files from memfd_create(2), never named in
// any file system, mapped MAP_SHARED. A process-wide table remembers which
// file and offset back each allocation, so that a provider handed any
// address range (a registered region) can tell whether it lies in such
// memory (Lookup) and pass the file to a peer (SCM_RIGHTS), which maps it
// and reaches the memory directly.
//
// Nothing outlives the process: the files have no name, so the last
// mapping or descriptor to go (at Free, or when the process ends, however
// it ends) releases the memory.
package memfd

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"unsafe"
)

// ErrNotMemfd means an address range does not lie inside one allocation.
var ErrNotMemfd = errors.New("memfd: not in shared memory")

// Mem is one allocation: a memfd of the rounded-up size, mapped shared.
type Mem struct {
	b  []byte // n long, cap the mapping's size
	fd int
}

// table maps allocations by address, sorted by start.
var table struct {
	mu   sync.RWMutex
	mems []*Mem
}

// Alloc maps n bytes (rounded up to pages) of zeroed shared memory, backed
// by a new memfd named name (the name shows only in /proc/PID/maps).
func Alloc(n int, name string) (*Mem, error) {
	if n <= 0 {
		return nil, fmt.Errorf("memfd: allocating %d bytes", n)
	}
	size := roundPage(n)
	fd, err := create(name)
	if err != nil {
		return nil, fmt.Errorf("memfd: memfd_create: %w", err)
	}
	if err := syscall.Ftruncate(fd, int64(size)); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("memfd: sizing %d bytes: %w", size, err)
	}
	b, err := syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("memfd: mmap %d bytes: %w", size, err)
	}
	m := &Mem{b: b[:n:size], fd: fd}
	table.mu.Lock()
	i := sort.Search(len(table.mems), func(i int) bool { return table.mems[i].start() > m.start() })
	table.mems = append(table.mems, nil)
	copy(table.mems[i+1:], table.mems[i:])
	table.mems[i] = m
	table.mu.Unlock()
	return m, nil
}

func roundPage(n int) int {
	page := os.Getpagesize()
	return (n + page - 1) / page * page
}

func (m *Mem) start() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(m.b))) }

// Bytes is the memory, as long as asked for (its capacity reaches the
// page-rounded end).
func (m *Mem) Bytes() []byte { return m.b }

// FD is the memfd backing the memory; it stays open until Free.
func (m *Mem) FD() int { return m.fd }

// Free unmaps the memory and closes its file, and forgets it. Peers that
// mapped it keep their mapping until they unmap it.
func (m *Mem) Free() error {
	table.mu.Lock()
	for i, x := range table.mems {
		if x == m {
			table.mems = append(table.mems[:i], table.mems[i+1:]...)
			break
		}
	}
	table.mu.Unlock()
	if m.b == nil {
		return nil
	}
	b := m.b[:cap(m.b)]
	m.b = nil
	err := syscall.Munmap(b)
	if cerr := syscall.Close(m.fd); err == nil {
		err = cerr
	}
	return err
}

// Lookup finds the allocation holding [addr, addr+n): its memfd and the
// offset of addr in it. The descriptor belongs to the allocation; callers
// duplicate it (sending it in SCM_RIGHTS does) and must not close it.
func Lookup(addr uintptr, n int) (fd int, off int64, err error) {
	table.mu.RLock()
	defer table.mu.RUnlock()
	i := sort.Search(len(table.mems), func(i int) bool { return table.mems[i].start() > addr })
	if i == 0 {
		return -1, 0, ErrNotMemfd
	}
	m := table.mems[i-1]
	s := m.start()
	if n < 0 || addr-s > uintptr(cap(m.b)) || uintptr(n) > uintptr(cap(m.b))-(addr-s) {
		return -1, 0, ErrNotMemfd
	}
	return m.fd, int64(addr - s), nil
}

// Mapping is a peer's memfd mapped into this process.
type Mapping struct {
	b    []byte // the whole page-aligned mapping
	base unsafe.Pointer
}

// Map maps n bytes of fd starting at off (any alignment) shared, read and
// write. The caller may close fd afterwards.
func Map(fd int, off int64, n int) (*Mapping, error) {
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	delta := int(off - start)
	size := roundPage(n + delta)
	b, err := syscall.Mmap(fd, start, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("memfd: mapping a peer's %d bytes: %w", n, err)
	}
	return &Mapping{b: b, base: unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), delta)}, nil
}

// Base is the address of the mapped byte at the offset Map was given.
func (m *Mapping) Base() unsafe.Pointer { return m.base }

// Unmap removes the mapping.
func (m *Mapping) Unmap() error {
	if m == nil || m.b == nil {
		return nil
	}
	b := m.b
	m.b, m.base = nil, nil
	return syscall.Munmap(b)
}
