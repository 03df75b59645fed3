// Package soft is rmago's software RDMA provider: the verbs contract over
// TCP, in pure Go, the embedded default when no RDMA device exists.
//
// Each connected queue pair owns one persistent TCP connection to its peer.
// A reader goroutine per connection plays the NIC: for every request it
// checks the rkey, the access flags and that [addr, addr+len) lies inside the
// registered region, then applies writes (read from the socket straight into
// the registered memory), reads, 8-byte atomics (sync/atomic on the
// target word) and bulk accumulates (verbs/accop), so the target program
// never has to call anything. A
// violation completes the origin's request with a remote access error,
// leaves the target memory untouched and tears the connection down, as an
// RC queue pair goes to the error state.
//
// Connections are authenticated with the job's secret (internal/auth) before
// any request is served, and run the TCP congestion control
// verbs.Config.TCPCongestion names (Reno by default: congestion.go). Wire format, progress and faults:
// docs/architecture.md. Import the package for its side effect:
//
//	import _ "github.com/rmago/rmago/verbs/soft"
package soft

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/internal/keytab"
	"github.com/rmago/rmago/verbs/internal/wcring"
)

// Name is the name the provider registers under.
const Name = "soft"

func init() { verbs.Register(Name, provider{}) }

// provider is the soft verbs.Provider.
type provider struct{}

// Kind is verbs.KindSoftware: discovery falls back to it when no hardware
// provider is usable.
func (provider) Kind() verbs.Kind { return verbs.KindSoftware }

// Usable reports whether device names the soft device (verbs.Discoverer):
// it needs nothing but TCP.
func (provider) Usable(device string) error {
	if device != "" && device != deviceName {
		return fmt.Errorf("%w: soft has only device %s, not %q", verbs.ErrNoDevice, deviceName, device)
	}
	return nil
}

// deviceName is the one software device.
const deviceName = "soft0"

// The provider implements the verbs contract and the optional interfaces
// of a software provider.
var (
	_ verbs.Discoverer         = provider{}
	_ verbs.Context            = (*device)(nil)
	_ verbs.MemorySyncer       = (*device)(nil)
	_ verbs.Progresser         = (*device)(nil)
	_ verbs.ConnManager        = (*device)(nil)
	_ verbs.PD                 = (*pd)(nil)
	_ verbs.MR                 = (*region)(nil)
	_ verbs.CQ                 = (*cq)(nil)
	_ verbs.CompletionNotifier = (*cq)(nil)
	_ verbs.QP                 = (*qp)(nil)
	_ verbs.ErrorReporter      = (*qp)(nil)
	_ verbs.ErrorSetter        = (*qp)(nil)
	_ verbs.ConnRequest        = (*connRequest)(nil)
)

func deviceAttr() verbs.DeviceAttr {
	return verbs.DeviceAttr{
		Name: deviceName, Provider: Name, MaxMRSize: 1 << 40, MaxQPWR: 1 << 15,
		MaxSGE: maxSGE, MaxInline: 0, AtomicCap: verbs.AtomicHCA, MTU: 1 << 20,
		LinkLayer: "TCP", PortActive: true, PostCopiesPayload: true,
		Accumulate: true, MaxFetchAccumulate: maxFetchAcc, ReadsBeforeRecv: true,
		AtomicsInOrder: true, Guards: true,
	}
}

// Devices always lists the one software device.
func (provider) Devices() ([]verbs.DeviceAttr, error) {
	return []verbs.DeviceAttr{deviceAttr()}, nil
}

// Open starts the device: a TCP listener on cfg.Addr (default 127.0.0.1)
// that accepts authenticated queue pair connections.
func (provider) Open(devName string, cfg verbs.Config) (verbs.Context, error) {
	if err := (provider{}).Usable(devName); err != nil {
		return nil, err
	}
	if len(cfg.Secret) == 0 {
		return nil, fmt.Errorf("%w: soft provider needs the job secret", verbs.ErrInvalid)
	}
	addr := cfg.Addr
	if addr == "" {
		addr = "127.0.0.1"
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: timeout %v", verbs.ErrInvalid, cfg.Timeout)
	}
	congestion, err := congestionOf(cfg)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: congestionControl(congestion)}
	ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return nil, fmt.Errorf("soft: listen on %s: %w", addr, err)
	}
	c := &device{
		ln:      ln,
		secret:  append([]byte(nil), cfg.Secret...),
		qps:     map[uint32]*qp{},
		waiting: map[uint32]net.Conn{},
		timeout: cfg.Timeout,

		congestion:  congestion,
		corkDelay:   corkDelay,
		answerDelay: corkAtomicDelay,
	}
	c.prog.spinFor, c.prog.shareCores = spinOf(cfg), cfg.ShareCores
	c.hold.never = c.prog.spinFor <= 0 || cfg.ShareCores
	if err := c.prog.startSleeper(); err != nil {
		ln.Close()
		return nil, err
	}
	var b [4]byte
	rand.Read(b[:])
	c.nextQPN.Store(binary.LittleEndian.Uint32(b[:]) & 0x7fff00)
	c.wg.Add(1)
	go c.acceptLoop()
	return c, nil
}

// device is the open soft device.
type device struct {
	ln      net.Listener
	secret  []byte
	regions keytab.Table[region]
	nextQPN atomic.Uint32
	// timeout bounds a write to a peer that takes no data, a frame the
	// peer stopped sending halfway, and the wait of Dereg for requests the
	// peer does not answer (verbs.Config.Timeout; 0: none).
	timeout time.Duration
	// congestion is the TCP congestion control of the device's
	// connections ("": the host's default; congestion.go).
	congestion string
	// corkDelay bounds how long a small request waits in a queue pair's
	// cork (coalesce.go).
	corkDelay time.Duration
	// answerDelay bounds how long answers wait for a request to go with
	// (held.go; tests lengthen it).
	answerDelay time.Duration
	// hold says whether traffic a peer waits for may be held back (hold.go).
	hold holdState

	mu      sync.Mutex
	qps     map[uint32]*qp      // by number
	waiting map[uint32]net.Conn // authenticated connections for QPs not yet created or connected
	// acceptFn answers on-demand connection requests (connmgr.go).
	acceptFn func(verbs.ConnRequest)
	closed   bool
	wg       sync.WaitGroup

	prog progress // the context's receive engines, driven by spinning (rx.go)
}

func (c *device) Attr() verbs.DeviceAttr { return deviceAttr() }

func (c *device) AllocPD() (verbs.PD, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, verbs.ErrClosed
	}
	return &pd{ctx: c}, nil
}

func (c *device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("%w: CQ depth %d", verbs.ErrInvalid, depth)
	}
	return &cq{ring: wcring.New(depth), notify: make(chan struct{}, 1), prog: &c.prog}, nil
}

func (c *device) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return verbs.ErrClosed
	}
	c.closed = true
	qps := make([]*qp, 0, len(c.qps))
	for _, q := range c.qps {
		qps = append(qps, q)
	}
	for _, conn := range c.waiting {
		conn.Close()
	}
	c.mu.Unlock()
	err := c.ln.Close()
	for _, q := range qps {
		q.Close()
	}
	c.wg.Wait()
	c.prog.stopSleeper()
	return err
}

// pd is a protection domain: regions and queue pairs of one pd work together.
type pd struct{ ctx *device }

func (p *pd) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if err := verbs.CheckRegMR(buf, access); err != nil {
		return nil, err
	}
	base := unsafe.Pointer(unsafe.SliceData(buf))
	r := &region{pd: p, base: base, addr: uint64(uintptr(base)), length: uint64(len(buf)), access: access}
	if _, err := p.ctx.regions.Add(r, nil, func(key uint32) { r.key = key }); err != nil {
		return nil, err
	}
	return r, nil
}

func (p *pd) Close() error { return nil }
