package transport

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// RemoteRegion is a peer's registered memory as seen by this rank.
type RemoteRegion struct {
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
	Len  uint64 `json:"len"`
}

// Memory is page-aligned memory outside the Go heap (an anonymous
// mapping), for allocated windows: it never moves and the garbage collector
// never scans it.
type Memory struct {
	b []byte
}

// AllocMemory maps n bytes (rounded up to pages) of zeroed memory.
func AllocMemory(n int) (*Memory, error) {
	// The mapping is page-rounded; Bytes is n long but may be resliced up to
	// the page end (cap).
	if n <= 0 {
		return nil, fmt.Errorf("transport: allocating %d bytes", n)
	}
	page := os.Getpagesize()
	size := (n + page - 1) / page * page
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("transport: mmap %d bytes: %w", size, err)
	}
	return &Memory{b: b[:n:size]}, nil
}

// Bytes is the memory.
func (m *Memory) Bytes() []byte { return m.b }

// Ptr is the address of the first byte.
func (m *Memory) Ptr() unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(m.b)) }

// Free unmaps the memory; it must be deregistered first.
func (m *Memory) Free() error {
	if m.b == nil {
		return nil
	}
	b := m.b[:cap(m.b)]
	m.b = nil
	return syscall.Munmap(b)
}
