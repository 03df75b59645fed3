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

// A device context: an opened device and port, the GID it addresses by,
// and the protection domains and completion queues made from it.

// devContext is an open device: the verbs.Context.
type devContext struct {
	ctx  *C.struct_ibv_context
	port int
	attr verbs.DeviceAttr

	maxCQE          int
	maxQPRdAtom     int // responder resources (max_dest_rd_atomic)
	maxQPInitRdAtom int // initiator depth (max_rd_atomic)
	lid             uint16
	mtuEnum         int
	ethernet        bool

	gidIndex int
	gid      [16]byte
	global   bool // use a GRH (RoCE, or a GID chosen on InfiniBand)

	spinPolls int   // verbs.Config.SpinPolls (cq.fixed)
	pace      pacer // its posting goroutines' yields (pacer.go)

	mu     sync.Mutex
	closed bool
}

func openAt(l **C.struct_ibv_device, i int, name string, port int) (*devContext, error) {
	ctx, err := C.ibv_open_device(C.rg_dev_at(l, C.int(i)))
	if ctx == nil {
		return nil, fmt.Errorf("%w: ibv_open_device %s: %v", verbs.ErrNoDevice, name, err)
	}
	c := &devContext{ctx: ctx, port: port}
	var da C.struct_ibv_device_attr
	if rc := C.ibv_query_device(ctx, &da); rc != 0 {
		C.ibv_close_device(ctx)
		return nil, rcErr("ibv_query_device "+name, rc)
	}
	if port < 1 || port > int(da.phys_port_cnt) {
		C.ibv_close_device(ctx)
		return nil, fmt.Errorf("%w: %s has no port %d (ports 1..%d)", verbs.ErrInvalid, name, port, int(da.phys_port_cnt))
	}
	var pa C.struct_ibv_port_attr
	if rc := C.rg_query_port(ctx, C.int(port), &pa); rc != 0 {
		C.ibv_close_device(ctx)
		return nil, rcErr("ibv_query_port "+name, rc)
	}
	c.maxCQE = int(da.max_cqe)
	c.maxQPRdAtom = int(da.max_qp_rd_atom)
	c.maxQPInitRdAtom = int(da.max_qp_init_rd_atom)
	c.lid = uint16(pa.lid)
	c.mtuEnum = int(pa.active_mtu)
	c.ethernet = pa.link_layer == C.IBV_LINK_LAYER_ETHERNET
	ll := "InfiniBand"
	if c.ethernet {
		ll = "Ethernet"
	}
	c.attr = verbs.DeviceAttr{
		Name:       name,
		Provider:   "ibv",
		MaxMRSize:  uint64(da.max_mr_size),
		MaxQPWR:    int(da.max_qp_wr),
		MaxSGE:     int(da.max_sge),
		MaxInline:  max(int(C.rg_probe_inline(ctx)), 0),
		AtomicCap:  atomicCap(da.atomic_cap),
		MTU:        mtuBytes(c.mtuEnum),
		LinkLayer:  ll,
		PortActive: pa.state == C.IBV_PORT_ACTIVE,
		// RC acknowledges every request: a signal adds only a CQE.
		CheapSignals: true,
	}
	if devs, _ := SysDevices(); devs != nil {
		for _, d := range devs {
			if d.Name == name && len(d.NetDevs) > 0 {
				c.attr.NetDev = d.NetDevs[0]
			}
		}
	}
	return c, nil
}

func atomicCap(a C.enum_ibv_atomic_cap) verbs.AtomicCap {
	switch a {
	case C.IBV_ATOMIC_HCA:
		return verbs.AtomicHCA
	case C.IBV_ATOMIC_GLOB:
		return verbs.AtomicGlob
	}
	return verbs.AtomicNone
}

// mtuBytes converts an enum ibv_mtu to bytes.
func mtuBytes(e int) int {
	if e < 1 || e > 5 {
		return 0
	}
	return 128 << e // 1: 256 ... 5: 4096
}

// mtuEnum converts bytes to the largest enum ibv_mtu not above them (0: none).
func mtuEnum(b int) int {
	for e := 5; e >= 1; e-- {
		if b >= 128<<e {
			return e
		}
	}
	return 0
}

// pickGID chooses the source GID: index want if want >= 0, else the best
// entry of the port's table (RoCE v2 IPv4-mapped, then other RoCE v2, then
// any valid one). InfiniBand ports use no GRH unless an index was given.
func (c *devContext) pickGID(want int) error {
	var gid [16]byte
	var typ C.int
	if want >= 0 {
		if rc := C.rg_query_gid(c.ctx, C.int(c.port), C.int(want), (*C.uint8_t)(unsafe.Pointer(&gid[0])), &typ); rc != 0 || gid == [16]byte{} {
			return fmt.Errorf("%w: %s port %d has no GID at index %d", verbs.ErrInvalid, c.attr.Name, c.port, want)
		}
		c.gidIndex, c.gid, c.global = want, gid, true
		return nil
	}
	var pa C.struct_ibv_port_attr
	if rc := C.rg_query_port(c.ctx, C.int(c.port), &pa); rc != 0 {
		return rcErr("ibv_query_port", rc)
	}
	best, bestScore := -1, 0
	for i := 0; i < int(pa.gid_tbl_len) && i < 256; i++ {
		if C.rg_query_gid(c.ctx, C.int(c.port), C.int(i), (*C.uint8_t)(unsafe.Pointer(&gid[0])), &typ) != 0 || gid == [16]byte{} {
			continue
		}
		v4 := gid[10] == 0xff && gid[11] == 0xff && [10]byte(gid[:10]) == [10]byte{}
		score := 1
		switch {
		case typ == C.IBV_GID_TYPE_ROCE_V2 && v4:
			score = 4
		case typ == C.IBV_GID_TYPE_ROCE_V2 && !(gid[0] == 0xfe && gid[1]&0xc0 == 0x80):
			score = 3
		case typ == C.IBV_GID_TYPE_ROCE_V2:
			score = 2
		}
		if score > bestScore {
			best, bestScore, c.gid = i, score, gid
		}
		if !c.ethernet {
			break // InfiniBand: index 0 is the port GID
		}
	}
	if best < 0 {
		if !c.ethernet {
			c.gidIndex = 0
			return nil
		}
		return fmt.Errorf("%w: %s port %d has no valid GID (RoCE needs an IP address on its interface)", verbs.ErrNoDevice, c.attr.Name, c.port)
	}
	c.gidIndex = best
	c.global = c.ethernet
	return nil
}

// Attr describes the device and the opened port.
func (c *devContext) Attr() verbs.DeviceAttr { return c.attr }

// GIDIndex is the index of the source GID chosen at Open.
func (c *devContext) GIDIndex() int { return c.gidIndex }

func (c *devContext) live() error {
	if c.closed {
		return verbs.ErrClosed
	}
	return nil
}

// AllocPD allocates a protection domain.
func (c *devContext) AllocPD() (verbs.PD, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.live(); err != nil {
		return nil, err
	}
	p, err := C.ibv_alloc_pd(c.ctx)
	if p == nil {
		return nil, errnoErr("ibv_alloc_pd", err)
	}
	return &pd{c: c, pd: p}, nil
}

// CreateCQ creates a completion queue of at least depth entries.
func (c *devContext) CreateCQ(depth int) (verbs.CQ, error) {
	if depth < 1 || depth > c.maxCQE {
		return nil, fmt.Errorf("%w: CQ depth %d (device max %d)", verbs.ErrInvalid, depth, c.maxCQE)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.live(); err != nil {
		return nil, err
	}
	w, err := C.rg_create_cq(c.ctx, C.int(depth))
	if w == nil {
		return nil, errnoErr("ibv_create_cq with a completion channel", err)
	}
	// Poll and the blocked waiter each have their own buffers.
	n := min(depth, pollBatch)
	q := &cq{c: c, cq: w.cq, w: w}
	q.raw = (*C.struct_ibv_wc)(cAlloc(n, unsafe.Sizeof(C.struct_ibv_wc{})))
	q.out = unsafe.Slice((*C.rg_wc)(cAlloc(n, unsafe.Sizeof(C.rg_wc{}))), n)
	q.pq = (*C.rg_pollq)(cAlloc(1, unsafe.Sizeof(C.rg_pollq{})))
	*q.pq = C.rg_pollq{cq: q.cq, raw: q.raw, out: &q.out[0]}
	q.wraw = (*C.struct_ibv_wc)(cAlloc(n, unsafe.Sizeof(C.struct_ibv_wc{})))
	q.wout = unsafe.Slice((*C.rg_wc)(cAlloc(n, unsafe.Sizeof(C.rg_wc{}))), n)
	return q, nil
}

// Close closes the device. Its PDs, CQs, QPs and MRs must be closed first.
func (c *devContext) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return verbs.ErrClosed
	}
	c.closed = true
	if rc := C.ibv_close_device(c.ctx); rc != 0 {
		return rcErr("ibv_close_device", rc)
	}
	return nil
}
