//go:build ibv && linux && cgo

package ibv

/*
#cgo LDFLAGS: -libverbs
#include <stdlib.h> // C.calloc, C.free
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// providerBuilt says whether the cgo libibverbs provider is compiled in.
const providerBuilt = true

const (
	postBatch   = 64 // requests converted and posted per cgo call
	pollBatch   = 64 // completions fetched per cgo call
	maxRdAtomic = 16 // outstanding reads/atomics per QP (initiator and responder)
	minRnrTimer = 12 // 0.64 ms
	ackTimeout  = 14 // 4.096 µs * 2^14 ≈ 67 ms per transport retry
	retryCount  = 7
	rnrRetry    = 7 // 7 = retry forever

	// maxBlock bounds one sleep on the completion channel, so that no OS
	// thread sits in a cgo call for a whole long deadline; Wait sleeps again.
	maxBlock = time.Second
)

// CQ.Wait's busy phase, in polls of the CQ with runtime.Gosched between
// them: at least minSpin, at most maxSpin. One poll is about 200 ns on a
// current server (minSpin: 5-8 µs, the order of an interrupt and a
// wake-up; maxSpin: about 50 µs) and about 4 µs under QEMU TCG, where a
// wake-up by a completion event costs 0.1-1 ms. Counting polls rather
// than time scales the bounds with the machine.
const (
	minSpin = 32
	maxSpin = 256
)

// fixedSpin fixes the busy phase's length in polls for the CQs of contexts
// whose verbs.Config.SpinPolls is 0; -1 (the default) adapts it. Tests
// change it.
var fixedSpin = -1

// The provider registers itself only in builds with the tag (stub.go
// records why it is missing in the others).
func init() { verbs.Register(Name, provider{}) }

// provider is the libibverbs verbs.Provider.
type provider struct{}

// Kind is verbs.KindHardware: discovery tries it before software providers.
func (provider) Kind() verbs.Kind { return verbs.KindHardware }

// Usable reports, from sysfs alone, whether device ("": the one
// DefaultDevice picks) exists and is usable (verbs.Discoverer).
func (provider) Usable(device string) error { return usable(device, "") }

// The provider implements the verbs contract.
var (
	_ verbs.Discoverer = provider{}
	_ verbs.Context    = (*devContext)(nil)
	_ verbs.PD         = (*pd)(nil)
	_ verbs.MR         = (*mr)(nil)
	_ verbs.CQ         = (*cq)(nil)
	_ verbs.QP         = (*qp)(nil)
)

// errnoErr turns a libibverbs return code or errno into an error, wrapping
// the verbs sentinel that best fits it.
func errnoErr(what string, e error) error {
	var en syscall.Errno
	if !errors.As(e, &en) || en == 0 {
		return fmt.Errorf("ibv: %s failed", what)
	}
	switch en {
	case syscall.EINVAL, syscall.EOPNOTSUPP:
		return fmt.Errorf("%w: %s: %v", verbs.ErrInvalid, what, en)
	case syscall.ENOMEM:
		return fmt.Errorf("%w: %s: %v", verbs.ErrQueueFull, what, en)
	}
	return fmt.Errorf("ibv: %s: %w", what, en)
}

func rcErr(what string, rc C.int) error {
	if rc < 0 {
		rc = -rc
	}
	return errnoErr(what, syscall.Errno(rc))
}

// deviceList returns the libibverbs device list; the caller frees it.
func deviceList() (**C.struct_ibv_device, []string, error) {
	if !hasDevices() {
		return nil, nil, fmt.Errorf("%w: none in /sys/class/infiniband (no RDMA hardware or rdma_rxe/siw link)", verbs.ErrNoDevice)
	}
	var n C.int
	l, err := C.ibv_get_device_list(&n)
	if l == nil {
		return nil, nil, fmt.Errorf("%w: ibv_get_device_list: %v", verbs.ErrNoDevice, err)
	}
	names := make([]string, int(n))
	for i := range names {
		names[i] = C.GoString(C.rg_dev_name(l, C.int(i)))
	}
	if len(names) == 0 {
		C.ibv_free_device_list(l)
		return nil, nil, fmt.Errorf("%w: libibverbs lists no devices (is the provider library, e.g. ibverbs-providers, installed?)", verbs.ErrNoDevice)
	}
	return l, names, nil
}

// Devices lists the devices libibverbs can open, describing port 1 of each.
func (provider) Devices() ([]verbs.DeviceAttr, error) {
	l, names, err := deviceList()
	if err != nil {
		return nil, err
	}
	defer C.ibv_free_device_list(l)
	var out []verbs.DeviceAttr
	var firstErr error
	for i, name := range names {
		c, err := openAt(l, i, name, 1)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out = append(out, c.attr)
		c.Close()
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %v", verbs.ErrNoDevice, firstErr)
	}
	return out, nil
}

// Open opens the named device, or DefaultDevice(cfg.NetDev)'s choice when
// device is "". cfg.Port selects the port (0: 1), cfg.GIDIndex the GID (-1:
// the RoCE v2 GID of an IPv4 address, else the best other one) and
// cfg.SpinPolls CQ.Wait's busy phase.
func (provider) Open(device string, cfg verbs.Config) (verbs.Context, error) {
	l, names, err := deviceList()
	if err != nil {
		return nil, err
	}
	defer C.ibv_free_device_list(l)
	if device == "" {
		if device, err = DefaultDevice(cfg.NetDev); err != nil {
			return nil, err
		}
	}
	idx := -1
	for i, n := range names {
		if n == device {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("%w: %q not found (libibverbs lists %v)", verbs.ErrNoDevice, device, names)
	}
	port := cfg.Port
	if port == 0 {
		port = 1
	}
	c, err := openAt(l, idx, device, port)
	if err != nil {
		return nil, err
	}
	if err := c.pickGID(cfg.GIDIndex); err != nil {
		c.Close()
		return nil, err
	}
	c.spinPolls = cfg.SpinPolls
	return c, nil
}

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

// cq is a completion queue created on its own completion channel, with
// C-side poll buffers.
//
// Wait polls for a while (spinBudget: a few microseconds on hardware), then
// sleeps on the channel: the waiter holding waitMu arms the CQ, polls once
// more, and blocks in poll() on the channel's fd (rg_cq_block). Poll never blocks and may run
// beside a blocked waiter: each has its own buffers, and ibv_poll_cq is
// thread-safe.
type cq struct {
	c   *devContext
	mu  sync.Mutex       // guards cq, raw, out, qps
	cq  *C.struct_ibv_cq // nil once closed
	raw *C.struct_ibv_wc // pollBatch ibv_wc, C memory
	out []C.rg_wc        // flattened completions, C memory
	pq  *C.rg_pollq      // cq, raw and out for rg_poll, C memory
	qps int              // queue pairs created on the CQ and not closed (counted once per role)

	waitMu  sync.Mutex   // one blocked waiter at a time; guards w's event state, wraw, wout
	w       *C.rg_waiter // the CQ, its channel and wake eventfd, C memory
	wraw    *C.struct_ibv_wc
	wout    []C.rg_wc
	closing atomic.Bool // Close has begun: waiters give up

	// The busy phase's tuning (spinBudget).
	sleepNs atomic.Int64 // what a sleep ended by a completion event takes: a low quantile of recent ones
	stepNs  atomic.Int64 // what one busy-phase step takes, averaged
}

// statusOf maps ibv_wc_status to verbs.Status.
var statusOf = func() (t [32]verbs.Status) {
	for i := range t {
		t[i] = verbs.StatusLocalError
	}
	t[C.IBV_WC_SUCCESS] = verbs.StatusSuccess
	t[C.IBV_WC_WR_FLUSH_ERR] = verbs.StatusFlushed
	t[C.IBV_WC_REM_ACCESS_ERR] = verbs.StatusRemoteAccess
	t[C.IBV_WC_REM_OP_ERR] = verbs.StatusRemoteOp
	t[C.IBV_WC_REM_INV_REQ_ERR] = verbs.StatusRemoteOp
	t[C.IBV_WC_REM_INV_RD_REQ_ERR] = verbs.StatusRemoteOp
	t[C.IBV_WC_REM_ABORT_ERR] = verbs.StatusRemoteOp
	t[C.IBV_WC_RETRY_EXC_ERR] = verbs.StatusTransport
	t[C.IBV_WC_BAD_RESP_ERR] = verbs.StatusTransport
	t[C.IBV_WC_RESP_TIMEOUT_ERR] = verbs.StatusTransport
	t[C.IBV_WC_FATAL_ERR] = verbs.StatusTransport
	t[C.IBV_WC_INV_EECN_ERR] = verbs.StatusTransport
	t[C.IBV_WC_INV_EEC_STATE_ERR] = verbs.StatusTransport
	t[C.IBV_WC_RNR_RETRY_EXC_ERR] = verbs.StatusRNR
	return t
}()

func opOf(o uint32) verbs.Opcode {
	switch o {
	case C.IBV_WC_SEND:
		return verbs.OpSend
	case C.IBV_WC_RDMA_WRITE:
		return verbs.OpWrite
	case C.IBV_WC_RDMA_READ:
		return verbs.OpRead
	case C.IBV_WC_COMP_SWAP:
		return verbs.OpCompareSwap
	case C.IBV_WC_FETCH_ADD:
		return verbs.OpFetchAdd
	case C.IBV_WC_RECV:
		return verbs.OpRecv
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		return verbs.OpRecvImm
	}
	return 0
}

// Poll moves up to len(wc) completions (at most 64 per call) into wc.
func (q *cq) Poll(wc []verbs.WC) (int, error) {
	if len(wc) == 0 {
		return 0, nil
	}
	q.mu.Lock()
	if q.cq == nil {
		q.mu.Unlock()
		return 0, verbs.ErrClosed
	}
	n := min(len(wc), len(q.out))
	k := int(C.rg_poll(cAddr(unsafe.Pointer(q.pq)), C.int(n)))
	if k > 0 {
		convertWCs(q.out[:k], wc)
	}
	q.mu.Unlock()
	if k < 0 {
		return 0, fmt.Errorf("ibv: ibv_poll_cq returned %d", k)
	}
	return k, nil
}

// convertWCs turns flattened completions into verbs.WCs.
func convertWCs(out []C.rg_wc, wc []verbs.WC) {
	for i := range out {
		s := &out[i]
		st := uint32(s.status)
		w := &wc[i]
		w.ID = uint64(s.wr_id)
		w.Status = verbs.StatusLocalError
		if st < uint32(len(statusOf)) {
			w.Status = statusOf[st]
		}
		w.Op = opOf(uint32(s.opcode))
		w.ByteLen = uint32(s.byte_len)
		w.Imm = uint32(s.imm)
		w.HasImm = s.has_imm != 0
		w.QPN = uint32(s.qp_num)
	}
}

// Wait returns completions as soon as there are some, or ErrTimeout at the
// deadline. It polls, then polls spinBudget more times with
// runtime.Gosched between polls (a completion that is microseconds away
// costs no system call), then sleeps on the CQ's completion channel until
// the device signals a new completion, the deadline passes or Close wakes
// it. It allocates nothing and starts no goroutine: the calling goroutine
// sleeps in a cgo call (its OS thread blocked in poll(), at most maxBlock at
// a time) and polls the CQ itself when woken.
func (q *cq) Wait(wc []verbs.WC, deadline time.Time) (int, error) {
	n, err := q.Poll(wc)
	if n > 0 || err != nil || len(wc) == 0 {
		return n, err
	}
	fixed := q.fixed()
	polls := q.spinBudget()
	var start time.Time
	if fixed < 0 {
		start = time.Now()
	}
	for range polls {
		runtime.Gosched()
		if n, err = q.Poll(wc); n > 0 || err != nil {
			return n, err
		}
	}
	if fixed < 0 {
		q.stepNs.Store(nextStep(q.stepNs.Load(), int64(time.Since(start))/int64(polls)))
	}
	return q.block(wc, deadline)
}

// fixed is the busy phase's length in polls that the context's
// verbs.Config.SpinPolls fixes (negative: 0), else fixedSpin's: -1 adapts.
func (q *cq) fixed() int {
	if n := q.c.spinPolls; n != 0 {
		return max(n, 0)
	}
	return fixedSpin
}

// spinBudget is the number of polls in Wait's busy phase. Spinning as long
// as a sleep and its wake-up cost is the classic rule (it is never worse
// than twice the best choice made knowing when the completion comes): the
// budget is the estimated cost of a sleep (sleepNs) over the cost of a
// poll (stepNs), between minSpin and maxSpin. On hardware, sleeps are
// cheap and the budget stays near minSpin; under an emulator, where an
// event takes hundreds of microseconds, it grows towards maxSpin. Waits
// that the busy phase satisfies leave the estimates as they are.
func (q *cq) spinBudget() int {
	if fixed := q.fixed(); fixed >= 0 {
		return fixed
	}
	sl, st := q.sleepNs.Load(), q.stepNs.Load()
	if sl <= 0 || st <= 0 {
		return minSpin
	}
	return int(min(max(sl/st, minSpin), maxSpin))
}

// nextSleep updates the estimate of what a sleep costs with one sleep's
// duration. It tracks the lower quartile of the durations: a sleep lasts
// the wake-up's cost plus however long the completion took to come, so the
// shorter sleeps tell the cost, and a quantile is not thrown by one event
// that was already pending. Steps are 1/16 of the estimate down and a
// third of that up, so a quarter of the samples end up below it.
func nextSleep(est, sample int64) int64 {
	if est <= 0 {
		return max(sample, 1)
	}
	step := max(est/16, 3)
	if sample < est {
		return max(est-step, 1)
	}
	return min(est+step/3, max(sample, est))
}

// nextStep folds one measurement of a busy-phase step into the average.
func nextStep(avg, sample int64) int64 {
	if avg <= 0 {
		return max(sample, 1)
	}
	return max(avg+(sample-avg)/8, 1)
}

// block is Wait's sleeping phase.
func (q *cq) block(wc []verbs.WC, deadline time.Time) (int, error) {
	q.waitMu.Lock()
	defer q.waitMu.Unlock()
	for {
		if q.closing.Load() {
			return 0, verbs.ErrClosed
		}
		timeout := maxBlock
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				// Polled after the last sleep: nothing came in time.
				return 0, verbs.ErrTimeout
			}
			timeout = min(timeout, left)
		}
		ms := int((timeout + time.Millisecond - 1) / time.Millisecond) // poll() rounds up too
		n := min(len(wc), len(q.wout))
		t := time.Now()
		k := int(C.rg_cq_block(q.w, C.int(n), q.wraw, &q.wout[0], C.int(ms)))
		switch {
		case k > 0:
			if q.w.slept != 0 && q.fixed() < 0 {
				q.sleepNs.Store(nextSleep(q.sleepNs.Load(), int64(time.Since(t))))
			}
			convertWCs(q.wout[:k], wc)
			return k, nil
		case k == C.RG_WOKEN:
			// Close woke us; the closing check above ends the wait.
		case k < 0:
			return 0, errnoErr("waiting for a completion event", syscall.Errno(-k))
		}
	}
}

// MaxInline is the inline payload the queue pair was granted
// (verbs.InlineSizer).
func (q *qp) MaxInline() int { return q.maxInline }

// attach counts a queue pair created on the CQ: Close refuses while any remain.
func (q *cq) attach() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cq == nil || q.closing.Load() {
		return verbs.ErrClosed
	}
	q.qps++
	return nil
}

func (q *cq) detach() {
	q.mu.Lock()
	q.qps--
	q.mu.Unlock()
}

// Close destroys the queue and its completion channel; its QPs must be
// closed first. A goroutine blocked in Wait is woken and gets ErrClosed.
func (q *cq) Close() error {
	q.mu.Lock()
	if q.cq == nil || q.closing.Load() {
		q.mu.Unlock()
		return verbs.ErrClosed
	}
	if q.qps > 0 {
		q.mu.Unlock()
		return fmt.Errorf("ibv: ibv_destroy_cq: queue pairs still attached: %w", syscall.EBUSY)
	}
	q.closing.Store(true)
	C.rg_wake(q.w)
	q.mu.Unlock()
	q.waitMu.Lock() // the woken waiter has left
	defer q.waitMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if rc := C.rg_destroy_cq(q.w); rc != 0 {
		C.rg_unwake(q.w)
		q.closing.Store(false)
		return rcErr("ibv_destroy_cq", rc)
	}
	q.cq, q.w = nil, nil
	C.free(unsafe.Pointer(q.raw))
	C.free(unsafe.Pointer(&q.out[0]))
	C.free(unsafe.Pointer(q.wraw))
	C.free(unsafe.Pointer(&q.wout[0]))
	C.free(unsafe.Pointer(q.pq))
	q.raw, q.out, q.wraw, q.wout, q.pq = nil, nil, nil, nil, nil
	return nil
}

// QP states as this provider tracks them.
const (
	qpInit = iota
	qpRTS
	qpClosed
)

// qp is an RC queue pair with C-side buffers for building requests.
type qp struct {
	c         *devContext
	qp        *C.struct_ibv_qp
	scq, rcq  *cq // attached until Close
	num       uint32
	psn       uint32
	maxSGE    int
	maxInline int
	maxSend   int
	maxRecv   int

	sendMu sync.Mutex // guards the send buffers and state
	state  int
	sd     []C.rg_swr
	ssg    []C.struct_ibv_sge
	swr    *C.struct_ibv_send_wr
	sq     *C.rg_sendq // qp, sd, ssg and swr for rg_post_send, C memory

	recvMu sync.Mutex // guards the receive buffers
	rd     []C.rg_rwr
	rsg    []C.struct_ibv_sge
	rwr    *C.struct_ibv_recv_wr
	rq     *C.rg_recvq // qp, rd, rsg and rwr for rg_post_recv, C memory
}

// cAddr passes C memory to C as an integer, which cgo does not check for
// Go pointers (see rg_sendq in shim.h). Never pass Go memory this way.
func cAddr(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }

// cAlloc allocates n zeroed elements of size sz in C memory.
func cAlloc(n int, sz uintptr) unsafe.Pointer {
	p := C.calloc(C.size_t(n), C.size_t(sz))
	if p == nil {
		panic("ibv: out of C memory")
	}
	return p
}

// CreateQP creates an RC queue pair in the INIT state, with remote read,
// write and atomic access allowed (regions still decide).
func (p *pd) CreateQP(attr verbs.QPAttr) (verbs.QP, error) {
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, fmt.Errorf("%w: completion queues must come from the ibv provider", verbs.ErrInvalid)
	}
	c := p.c
	if scq.c != c || rcq.c != c {
		return nil, fmt.Errorf("%w: completion queues of another device", verbs.ErrInvalid)
	}
	if attr.MaxSendWR < 1 || attr.MaxSendWR > c.attr.MaxQPWR || attr.MaxRecvWR < 0 || attr.MaxRecvWR > c.attr.MaxQPWR {
		return nil, fmt.Errorf("%w: queue depths %d/%d (device max %d)", verbs.ErrInvalid, attr.MaxSendWR, attr.MaxRecvWR, c.attr.MaxQPWR)
	}
	nsge := max(attr.MaxSGE, 1)
	if nsge > c.attr.MaxSGE {
		return nil, fmt.Errorf("%w: %d SGEs (device max %d)", verbs.ErrInvalid, nsge, c.attr.MaxSGE)
	}
	if attr.MaxInline < 0 {
		return nil, fmt.Errorf("%w: inline size %d", verbs.ErrInvalid, attr.MaxInline)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, verbs.ErrClosed
	}
	if err := scq.attach(); err != nil {
		return nil, err
	}
	if err := rcq.attach(); err != nil {
		scq.detach()
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			scq.detach()
			rcq.detach()
		}
	}()
	var cp C.struct_ibv_qp_cap
	var h *C.struct_ibv_qp
	var err error
	// The device may grant less inline data than asked for; step down.
	for inl := min(attr.MaxInline, max(c.attr.MaxInline, 0)); ; inl /= 2 {
		h, err = C.rg_create_qp(p.pd, scq.cq, rcq.cq, C.int(attr.MaxSendWR), C.int(max(attr.MaxRecvWR, 1)), C.int(nsge), C.int(inl), &cp)
		if h != nil || inl == 0 {
			break
		}
	}
	if h == nil {
		return nil, errnoErr("ibv_create_qp", err)
	}
	acc := C.int(C.IBV_ACCESS_LOCAL_WRITE | C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_REMOTE_READ)
	if c.attr.AtomicCap != verbs.AtomicNone {
		acc |= C.IBV_ACCESS_REMOTE_ATOMIC
	}
	if rc := C.rg_qp_init(h, C.int(c.port), acc); rc != 0 {
		C.ibv_destroy_qp(h)
		return nil, rcErr("modify QP to INIT", rc)
	}
	ok = true
	q := &qp{
		c:         c,
		qp:        h,
		scq:       scq,
		rcq:       rcq,
		num:       uint32(h.qp_num),
		psn:       rand.Uint32() & 0xffffff,
		maxSGE:    min(int(cp.max_send_sge), int(cp.max_recv_sge)),
		maxInline: int(cp.max_inline_data),
		maxSend:   int(cp.max_send_wr),
		maxRecv:   int(cp.max_recv_wr),
	}
	q.maxSGE = max(q.maxSGE, 1)
	sb := min(q.maxSend, postBatch)
	q.sd = unsafe.Slice((*C.rg_swr)(cAlloc(sb, unsafe.Sizeof(C.rg_swr{}))), sb)
	q.ssg = unsafe.Slice((*C.struct_ibv_sge)(cAlloc(sb*q.maxSGE, unsafe.Sizeof(C.struct_ibv_sge{}))), sb*q.maxSGE)
	q.swr = (*C.struct_ibv_send_wr)(cAlloc(sb, unsafe.Sizeof(C.struct_ibv_send_wr{})))
	rb := max(min(q.maxRecv, postBatch), 1)
	q.rd = unsafe.Slice((*C.rg_rwr)(cAlloc(rb, unsafe.Sizeof(C.rg_rwr{}))), rb)
	q.rsg = unsafe.Slice((*C.struct_ibv_sge)(cAlloc(rb*q.maxSGE, unsafe.Sizeof(C.struct_ibv_sge{}))), rb*q.maxSGE)
	q.rwr = (*C.struct_ibv_recv_wr)(cAlloc(rb, unsafe.Sizeof(C.struct_ibv_recv_wr{})))
	q.sq = (*C.rg_sendq)(cAlloc(1, unsafe.Sizeof(C.rg_sendq{})))
	*q.sq = C.rg_sendq{qp: h, d: &q.sd[0], sges: &q.ssg[0], wrs: q.swr}
	q.rq = (*C.rg_recvq)(cAlloc(1, unsafe.Sizeof(C.rg_recvq{})))
	*q.rq = C.rg_recvq{qp: h, d: &q.rd[0], sges: &q.rsg[0], wrs: q.rwr}
	return q, nil
}

// Num is the queue pair number.
func (q *qp) Num() uint32 { return q.num }

// Endpoint is this side's connection information.
func (q *qp) Endpoint() verbs.Endpoint {
	c := q.c
	ep := verbs.Endpoint{
		QPN:      q.num,
		PSN:      q.psn,
		LID:      c.lid,
		GIDIndex: c.gidIndex,
		MTU:      c.attr.MTU,
		Device:   c.attr.Name,
	}
	if c.global {
		ep.GID = append([]byte(nil), c.gid[:]...)
	}
	return ep
}

// Connect moves the queue pair INIT → RTR → RTS against remote.
func (q *qp) Connect(remote verbs.Endpoint) error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	switch q.state {
	case qpClosed:
		return verbs.ErrClosed
	case qpRTS:
		return fmt.Errorf("%w: queue pair %d is already connected", verbs.ErrQPState, q.num)
	}
	c := q.c
	mtu := c.mtuEnum
	if remote.MTU > 0 {
		if e := mtuEnum(remote.MTU); e == 0 {
			return fmt.Errorf("%w: remote MTU %d", verbs.ErrInvalid, remote.MTU)
		} else if e < mtu {
			mtu = e
		}
	}
	var dgid [16]byte
	global := len(remote.GID) == 16 && [16]byte(remote.GID) != [16]byte{}
	if global {
		dgid = [16]byte(remote.GID)
	} else if c.ethernet {
		return fmt.Errorf("%w: RoCE needs the peer's GID (endpoint %+v)", verbs.ErrInvalid, remote)
	}
	if remote.QPN == 0 || remote.QPN > 0xffffff {
		return fmt.Errorf("%w: remote QPN %d", verbs.ErrInvalid, remote.QPN)
	}
	rc := C.rg_qp_rtr(q.qp, C.int(c.port), C.int(mtu), C.uint32_t(remote.QPN), C.uint32_t(remote.PSN&0xffffff),
		C.int(min(c.maxQPRdAtom, maxRdAtomic)), minRnrTimer, C.uint16_t(remote.LID),
		boolInt(global), (*C.uint8_t)(unsafe.Pointer(&dgid[0])), C.int(c.gidIndex))
	if rc != 0 {
		return rcErr(fmt.Sprintf("modify QP %d to RTR (peer qpn %d)", q.num, remote.QPN), rc)
	}
	rc = C.rg_qp_rts(q.qp, C.uint32_t(q.psn), C.int(min(c.maxQPInitRdAtom, maxRdAtomic)), ackTimeout, retryCount, rnrRetry)
	if rc != 0 {
		return rcErr(fmt.Sprintf("modify QP %d to RTS", q.num), rc)
	}
	q.state = qpRTS
	return nil
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// fillSend validates wr and writes it into descriptor d and SGE slots sg.
// The caller has checked len(wr.SGL) against the queue pair's maximum.
func (q *qp) fillSend(d *C.rg_swr, wr *verbs.SendWR, sg []C.struct_ibv_sge) error {
	var op uint32
	atomicOp := false
	switch wr.Op {
	case verbs.OpWrite:
		op = C.IBV_WR_RDMA_WRITE
	case verbs.OpWriteImm:
		op = C.IBV_WR_RDMA_WRITE_WITH_IMM
	case verbs.OpRead:
		op = C.IBV_WR_RDMA_READ
	case verbs.OpSend:
		op = C.IBV_WR_SEND
	case verbs.OpFetchAdd:
		op, atomicOp = C.IBV_WR_ATOMIC_FETCH_AND_ADD, true
	case verbs.OpCompareSwap:
		op, atomicOp = C.IBV_WR_ATOMIC_CMP_AND_SWP, true
	default:
		return fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, wr.Op)
	}
	var flags uint32
	if wr.Flags&verbs.Signaled != 0 {
		flags |= C.IBV_SEND_SIGNALED
	}
	if wr.Flags&verbs.Fence != 0 {
		flags |= C.IBV_SEND_FENCE
	}
	if atomicOp {
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 || wr.RemoteAddr%8 != 0 {
			return fmt.Errorf("%w: atomics take one 8-byte SGE and an 8-byte aligned remote address", verbs.ErrInvalid)
		}
		if q.c.attr.AtomicCap == verbs.AtomicNone {
			return fmt.Errorf("%w: %s has no atomic support", verbs.ErrInvalid, q.c.attr.Name)
		}
	}
	if wr.Flags&verbs.Inline != 0 {
		if atomicOp || wr.Op == verbs.OpRead {
			return fmt.Errorf("%w: inline %v", verbs.ErrInvalid, wr.Op)
		}
		var total uint64
		for _, s := range wr.SGL {
			total += uint64(s.Length)
		}
		if total > uint64(q.maxInline) {
			return fmt.Errorf("%w: %d inline bytes (queue pair max %d)", verbs.ErrInvalid, total, q.maxInline)
		}
		flags |= C.IBV_SEND_INLINE
	}
	for i, s := range wr.SGL {
		sg[i].addr = C.uint64_t(s.Addr)
		sg[i].length = C.uint32_t(s.Length)
		sg[i].lkey = C.uint32_t(s.LKey)
	}
	d.wr_id = C.uint64_t(wr.ID)
	d.remote_addr = C.uint64_t(wr.RemoteAddr)
	d.compare_add = C.uint64_t(wr.CompareAdd)
	d.swap = C.uint64_t(wr.Swap)
	d.rkey = C.uint32_t(wr.RKey)
	d.imm = C.uint32_t(wr.Imm)
	d.opcode = C.uint32_t(op)
	d.flags = C.uint32_t(flags)
	d.num_sge = C.uint32_t(len(wr.SGL))
	return nil
}

// nthSend returns the request i places after wr.
func nthSend(wr *verbs.SendWR, i int) *verbs.SendWR {
	for ; i > 0 && wr != nil; i-- {
		wr = wr.Next
	}
	return wr
}

// postErr turns a failed ibv_post_send/recv into a verbs error.
func (q *qp) postErr(what string, rc C.int) error {
	switch syscall.Errno(rc) {
	case syscall.ENOMEM:
		return fmt.Errorf("%w: %s on QP %d", verbs.ErrQueueFull, what, q.num)
	case syscall.EINVAL:
		if st := C.rg_qp_state(q.qp); st == C.IBV_QPS_ERR || st == C.IBV_QPS_RESET {
			return fmt.Errorf("%w: %s: QP %d is in the error state", verbs.ErrQPState, what, q.num)
		}
	}
	return rcErr(what, rc)
}

// PostSend posts the chain in one cgo call per 64 requests. Invalid requests
// are caught before posting: the ones before it are posted, and it is
// returned with an error wrapping verbs.ErrInvalid. Once the requests are
// posted the caller may yield to Go's scheduler, at most once a
// millisecond per context (pacer.go).
func (q *qp) PostSend(first *verbs.SendWR) (*verbs.SendWR, error) {
	bad, err := q.postSend(first)
	q.c.pace.posted()
	return bad, err
}

// postSend is PostSend under the send lock.
func (q *qp) postSend(first *verbs.SendWR) (*verbs.SendWR, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	switch q.state {
	case qpClosed:
		return first, verbs.ErrClosed
	case qpInit:
		return first, fmt.Errorf("%w: queue pair %d is not connected", verbs.ErrQPState, q.num)
	}
	wr := first
	for wr != nil {
		batch := wr
		n, ns := 0, 0
		var verr error
		for wr != nil && n < len(q.sd) {
			if len(wr.SGL) > q.maxSGE {
				verr = fmt.Errorf("%w: %d SGEs (queue pair max %d)", verbs.ErrInvalid, len(wr.SGL), q.maxSGE)
				break
			}
			if verr = q.fillSend(&q.sd[n], wr, q.ssg[ns:ns+len(wr.SGL)]); verr != nil {
				break
			}
			ns += len(wr.SGL)
			n++
			wr = wr.Next
		}
		if n > 0 {
			if r := C.rg_post_send(cAddr(unsafe.Pointer(q.sq)), C.int(n)); r != 0 {
				return nthSend(batch, int(r>>32)), q.postErr("ibv_post_send", C.int(int32(r)))
			}
		}
		if verr != nil {
			return wr, verr
		}
	}
	return nil, nil
}

// PostRecv posts the chain of receives in one cgo call per 64 requests.
// Receives may be posted before Connect.
func (q *qp) PostRecv(first *verbs.RecvWR) (*verbs.RecvWR, error) {
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if q.rd == nil {
		return first, verbs.ErrClosed
	}
	wr := first
	for wr != nil {
		batch := wr
		n, ns := 0, 0
		var verr error
		for wr != nil && n < len(q.rd) {
			if len(wr.SGL) > q.maxSGE {
				verr = fmt.Errorf("%w: %d SGEs (queue pair max %d)", verbs.ErrInvalid, len(wr.SGL), q.maxSGE)
				break
			}
			for i, s := range wr.SGL {
				g := &q.rsg[ns+i]
				g.addr, g.length, g.lkey = C.uint64_t(s.Addr), C.uint32_t(s.Length), C.uint32_t(s.LKey)
			}
			q.rd[n].wr_id = C.uint64_t(wr.ID)
			q.rd[n].num_sge = C.uint32_t(len(wr.SGL))
			ns += len(wr.SGL)
			n++
			wr = wr.Next
		}
		if n > 0 {
			if r := C.rg_post_recv(cAddr(unsafe.Pointer(q.rq)), C.int(n)); r != 0 {
				for i := int(r >> 32); i > 0 && batch.Next != nil; i-- {
					batch = batch.Next
				}
				return batch, q.postErr("ibv_post_recv", C.int(int32(r)))
			}
		}
		if verr != nil {
			return wr, verr
		}
	}
	return nil, nil
}

// Close destroys the queue pair; outstanding requests are flushed (their
// completions may or may not be delivered, as on hardware).
func (q *qp) Close() error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if q.state == qpClosed {
		return verbs.ErrClosed
	}
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return rcErr("ibv_destroy_qp", rc)
	}
	q.state = qpClosed
	q.scq.detach()
	q.rcq.detach()
	C.free(unsafe.Pointer(&q.sd[0]))
	C.free(unsafe.Pointer(&q.ssg[0]))
	C.free(unsafe.Pointer(q.swr))
	C.free(unsafe.Pointer(&q.rd[0]))
	C.free(unsafe.Pointer(&q.rsg[0]))
	C.free(unsafe.Pointer(q.rwr))
	C.free(unsafe.Pointer(q.sq))
	C.free(unsafe.Pointer(q.rq))
	q.sd, q.ssg, q.swr, q.rd, q.rsg, q.rwr, q.sq, q.rq = nil, nil, nil, nil, nil, nil, nil, nil
	q.qp = nil
	return nil
}
