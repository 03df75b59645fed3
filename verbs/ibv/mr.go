//go:build ibv && linux && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// Protection domains and memory regions: registering memory with the
// device (ibv_reg_mr) and letting go of it.

// pd is a protection domain.
type pd struct {
	c  *devContext
	mu sync.Mutex
	pd *C.struct_ibv_pd
}

// RegMR registers buf. Its address is handed to the device: buf must not
// move or be freed until Dereg (allocate it with mmap or pin it).
func (p *pd) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if err := verbs.CheckRegMR(buf, access); err != nil {
		return nil, err
	}
	if uint64(len(buf)) > p.c.attr.MaxMRSize {
		return nil, fmt.Errorf("%w: region of %d bytes exceeds the device's %d", verbs.ErrInvalid, len(buf), p.c.attr.MaxMRSize)
	}
	var acc C.int
	if access&verbs.AccessLocalWrite != 0 {
		acc |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if access&verbs.AccessRemoteWrite != 0 {
		acc |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if access&verbs.AccessRemoteRead != 0 {
		acc |= C.IBV_ACCESS_REMOTE_READ
	}
	if access&verbs.AccessRemoteAtomic != 0 {
		acc |= C.IBV_ACCESS_REMOTE_ATOMIC
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, verbs.ErrClosed
	}
	addr := uintptr(unsafe.Pointer(&buf[0]))
	m, err := C.rg_reg_mr(p.pd, C.uintptr_t(addr), C.size_t(len(buf)), acc)
	if m == nil {
		return nil, errnoErr(fmt.Sprintf("ibv_reg_mr(%d bytes)", len(buf)), err)
	}
	return &mr{mr: m, buf: buf, addr: uint64(addr), lkey: uint32(m.lkey), rkey: uint32(m.rkey), access: access}, nil
}

// Close deallocates the domain; its MRs and QPs must be closed first.
func (p *pd) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return verbs.ErrClosed
	}
	if rc := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return rcErr("ibv_dealloc_pd (MRs or QPs still open?)", rc)
	}
	p.pd = nil
	return nil
}

// mr is a registered memory region.
type mr struct {
	mu     sync.Mutex
	mr     *C.struct_ibv_mr
	buf    []byte // keeps the memory reachable while registered
	addr   uint64
	lkey   uint32
	rkey   uint32
	access verbs.Access
}

// Addr is the virtual address of the region's first byte.
func (m *mr) Addr() uint64 { return m.addr }

// Len is the region's length.
func (m *mr) Len() int { return len(m.buf) }

// LKey is the local key.
func (m *mr) LKey() uint32 { return m.lkey }

// RKey is the remote key.
func (m *mr) RKey() uint32 { return m.rkey }

// Access is the access the region was registered with.
func (m *mr) Access() verbs.Access { return m.access }

// Dereg deregisters the region.
func (m *mr) Dereg() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mr == nil {
		return verbs.ErrClosed
	}
	if rc := C.ibv_dereg_mr(m.mr); rc != 0 {
		return rcErr("ibv_dereg_mr", rc)
	}
	m.mr, m.buf = nil, nil
	return nil
}
