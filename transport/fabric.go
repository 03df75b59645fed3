// Package transport is a job's connected fabric: it bootstraps the job
// (rank, size, secret, endpoint exchange), opens the verbs provider, keeps
// one reliable-connected queue pair per peer (and a loopback pair for the
// rank itself, so that even local accesses go through the same agent),
// tracks completions, and offers flush, notifications, a barrier and an
// allgather built on the fabric's own RDMA writes.
//
// Progress is driven by whoever waits: the goroutine that needs a
// completion polls the shared completion queue and dispatches what it finds
// for everyone, so there is no progress goroutine and no hop on the hot path.
package transport

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	json "github.com/goccy/go-json"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/ibv"    // real RDMA (libibverbs, build tag ibv)
	_ "github.com/rmago/rmago/verbs/soft" // the embedded default provider
)

// Environment variables read by Open.
const (
	// EnvProvider selects the verbs provider: soft, ibv or auto (default).
	EnvProvider = "RMAGO_PROVIDER"
	// EnvDevice selects the device of the provider by name.
	EnvDevice = "RMAGO_DEVICE"
	// EnvTimeout bounds every blocking wait (a Go duration; default 2m,
	// 0 for none). A wait that passes it fails with ErrTimeout.
	EnvTimeout = "RMAGO_TIMEOUT"
	// EnvConnect says when peers are connected: lazy (default: on first
	// use, where the provider can; connect.go) or eager (all at Open).
	EnvConnect = "RMAGO_CONNECT"
)

// Errors of the fabric. Errors from completions wrap the verbs sentinels
// (verbs.ErrRemoteAccess, verbs.ErrTransport, ...) as well; ErrPeerGone
// (faults.go) is a peer that left the job.
var (
	// ErrTimeout: a wait reached the timeout (RMAGO_TIMEOUT), or a peer
	// stopped taking or sending data for that long (then with ErrPeer).
	ErrTimeout = errors.New("transport: timed out waiting for peers")
	// ErrPeer: a peer failed, or left the job (ErrPeerGone).
	ErrPeer     = errors.New("transport: peer failed")
	ErrClosed   = errors.New("transport: fabric closed")
	ErrProvider = errors.New("transport: no usable provider")
)

// Queue sizes.
const (
	sendDepth = 512 // send requests in flight per peer
	recvDepth = 64  // notifications in flight per peer
	signalGap = sendDepth / 4
)

// Options tune Open. The zero value reads the environment.
type Options struct {
	Provider string        // soft, ibv or auto; "" reads RMAGO_PROVIDER
	Device   string        // "" reads RMAGO_DEVICE
	Timeout  time.Duration // 0 reads RMAGO_TIMEOUT; negative means none
	// Connect is lazy or eager (see EnvConnect); "" reads RMAGO_CONNECT.
	Connect string
	// Notice receives one-line notices (the auto provider's fallback);
	// nil writes them to stderr.
	Notice func(string)
}

// Peer is the fabric's view of one rank.
type peer struct {
	rank   int
	qp     verbs.QP // requests to that rank
	selfRx verbs.QP // for the rank itself: the receiving end of the loopback pair

	// ready: qp is connected (posts go straight to it). Until then, and
	// if connecting fails, the connection's state is below (connect.go).
	ready    atomic.Bool
	outbound bool          // this rank dialed it; under f.connMu
	connDone chan struct{} // closed once connecting ended

	postMu       sync.Mutex // serializes posting to this peer
	posted       atomic.Uint64
	lastSignaled uint64 // under postMu
	done         atomic.Uint64
	err          atomic.Pointer[error]
	flushWR      verbs.SendWR
	noteWR       verbs.SendWR // Notify's request, under postMu
	failWR       verbs.SendWR // a failure notice's request, under postMu (propagate.go)
	wr           verbs.SendWR // reused by the one-sided operations
	sge          [1]verbs.SGE
	chain        [ChainMax]verbs.SendWR // PostAtomics' chains
	chainSGE     [ChainMax]verbs.SGE
	recvWR       verbs.RecvWR
}

// Fabric is a job's connected fabric.
type Fabric struct {
	boot    Bootstrap
	rank    int
	size    int
	ctx     verbs.Context
	pd      verbs.PD
	cq      verbs.CQ
	peers   []atomic.Pointer[peer] // by rank; nil until first contact (connect.go)
	byQPN   map[uint32]*peer       // under mu
	timeout time.Duration

	// Lazy connections (connect.go): cm is the provider's connection
	// manager (nil: every peer was connected at Open), listen every rank's
	// listening endpoint, kicked the ranks a wait started connecting.
	cm     verbs.ConnManager
	listen []verbs.Endpoint
	connMu sync.Mutex
	kicked []bool // under mu
	conns  connStats

	// Progress: one goroutine polls at a time; others wait on cond.
	mu      sync.Mutex
	cond    sync.Cond
	polling bool
	wcs     []verbs.WC
	notes   map[uint32]*tagNotes // notification arrivals by tag, not yet consumed (notify.go)
	failed  error                // a fatal local error (CQ overrun)

	// World control region: allgather slots.
	ctrl         *Memory
	ctrlMR       verbs.MR
	ctrlPeers    []RemoteRegion
	gatherSeq    int
	barSeq       uint32
	closed       atomic.Bool
	disconnected atomic.Bool                // Disconnect ran
	shut         atomic.Bool                // Close ran
	othersFn     func(yield func(int) bool) // f.others, bound once
	checkFn      func(r int) bool           // f.checkRank, bound once
	prog         verbs.Progresser           // the context, if software drives it
	scanErr      error                      // checkRank's finding; under mu
	scan         waitOp                     // the wait checkRank checks for; under mu
	noticesOut   atomic.Int32               // failure notices being sent (propagate.go)
}

// RemoteRegion is a peer's registered memory as seen by this rank.
type RemoteRegion struct {
	Addr uint64 `json:"addr"`
	RKey uint32 `json:"rkey"`
	Len  uint64 `json:"len"`
}

// gatherSlot is the bytes a rank contributes to one fabric allgather.
const gatherSlot = 64

type hello struct {
	Endpoints []verbs.Endpoint `json:"eps,omitempty"`    // eager: the QP to use to reach rank i
	Listen    *verbs.Endpoint  `json:"listen,omitempty"` // lazy: where to dial this rank
	Ctrl      RemoteRegion     `json:"ctrl"`             // the world control region
	Provider  string           `json:"prov"`
}

// Open connects the job's fabric: it bootstraps from b, opens the
// provider, exchanges what a peer needs to reach this rank, then closes b.
// With a provider that connects on demand (verbs.ConnManager: soft) it
// connects only the rank to itself; each peer is connected on first use
// (connect.go). Otherwise it creates and connects a queue pair per peer.
func Open(b Bootstrap, opt Options) (*Fabric, error) {
	defer b.Close()
	f := &Fabric{boot: b, rank: b.Rank(), size: b.Size(), notes: map[uint32]*tagNotes{}, byQPN: map[uint32]*peer{}}
	f.cond.L = &f.mu
	f.othersFn = f.others
	f.checkFn = f.checkRank
	if err := f.setTimeout(opt.Timeout); err != nil {
		return nil, err
	}
	provName, err := f.openProvider(b, opt)
	if err != nil {
		return nil, err
	}
	f.prog, _ = f.ctx.(verbs.Progresser)
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	if f.pd, err = f.ctx.AllocPD(); err != nil {
		return nil, err
	}
	if f.cq, err = f.ctx.CreateCQ((f.size + 1) * (sendDepth + recvDepth)); err != nil {
		return nil, err
	}
	f.wcs = make([]verbs.WC, 64)
	f.peers = make([]atomic.Pointer[peer], f.size)
	lazy, err := f.lazyConnect(opt)
	if err != nil {
		return nil, err
	}
	me := hello{Provider: provName}
	if lazy {
		ep := f.cm.ListenEndpoint()
		me.Listen = &ep
		f.kicked = make([]bool, f.size)
		f.cm.Accept(f.accept)
	} else {
		me.Endpoints = make([]verbs.Endpoint, f.size)
	}
	for r := range f.peers {
		if lazy && r != f.rank {
			continue
		}
		p := &peer{rank: r}
		if p.qp, err = f.newQP(); err != nil {
			return nil, err
		}
		if r == f.rank {
			if p.selfRx, err = f.newQP(); err != nil {
				return nil, err
			}
		}
		f.peers[r].Store(p)
		if !lazy {
			me.Endpoints[r] = p.qp.Endpoint()
		}
	}
	if f.ctrl, err = AllocMemory(2 * f.size * gatherSlot); err != nil {
		return nil, err
	}
	if f.ctrlMR, err = f.pd.RegMR(f.ctrl.Bytes(), verbs.AccessAll); err != nil {
		return nil, err
	}
	me.Ctrl = RemoteRegion{Addr: f.ctrlMR.Addr(), RKey: f.ctrlMR.RKey(), Len: uint64(f.ctrlMR.Len())}
	msg, err := json.Marshal(me)
	if err != nil {
		return nil, err
	}
	all, err := b.Allgather(msg)
	if err != nil {
		return nil, err
	}
	hellos := make([]hello, f.size)
	if lazy {
		f.listen = make([]verbs.Endpoint, f.size)
	}
	for r, m := range all {
		if err := json.Unmarshal(m, &hellos[r]); err != nil {
			return nil, fmt.Errorf("%w: bad hello from rank %d: %v", ErrBootstrap, r, err)
		}
		if hellos[r].Provider != provName {
			return nil, fmt.Errorf("%w: rank %d uses provider %s, rank %d uses %s", ErrProvider, r, hellos[r].Provider, f.rank, provName)
		}
		if lazy != (hellos[r].Listen != nil) || (!lazy && len(hellos[r].Endpoints) != f.size) {
			return nil, fmt.Errorf("%w: bad hello from rank %d: ranks disagree on connecting lazily (is %s the same on every rank?)", ErrBootstrap, r, EnvConnect)
		}
		if lazy {
			f.listen[r] = *hellos[r].Listen
		}
		f.ctrlPeers = append(f.ctrlPeers, hellos[r].Ctrl)
	}
	if err := f.connect(hellos); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
}

func (f *Fabric) setTimeout(d time.Duration) error {
	switch {
	case d < 0:
		f.timeout = 0
	case d > 0:
		f.timeout = d
	default:
		f.timeout = 2 * time.Minute
		if s := os.Getenv(EnvTimeout); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v < 0 {
				return fmt.Errorf("transport: bad %s=%q", EnvTimeout, s)
			}
			f.timeout = v
		}
	}
	return nil
}

// openProvider picks and opens the provider: soft, ibv, or auto (ibv when a
// usable device exists, else soft with a one-line notice).
func (f *Fabric) openProvider(b Bootstrap, opt Options) (string, error) {
	name := opt.Provider
	if name == "" {
		name = os.Getenv(EnvProvider)
	}
	device := opt.Device
	if device == "" {
		device = os.Getenv(EnvDevice)
	}
	// The provider bounds a write to a peer that takes no data, and a frame
	// a peer stops sending halfway, by the same timeout as every wait.
	cfg := verbs.Config{Addr: b.Addr(), Secret: b.Secret(), GIDIndex: -1, Timeout: f.timeout}
	switch name {
	case "", "auto":
		// rdmamap looks for RDMA devices in sysfs; ibv is used when one is
		// usable and the provider is compiled in.
		if ibv.Available() {
			var err error
			if f.ctx, err = verbs.Open("ibv", device, cfg); err == nil {
				return "ibv", nil
			}
		}
		notice := opt.Notice
		if notice == nil {
			notice = func(s string) { fmt.Fprintln(os.Stderr, s) }
		}
		if b.Rank() == 0 {
			notice("rmago: no usable RDMA device; using the soft (TCP) provider")
		}
		name = "soft"
		device = ""
	}
	var err error
	if f.ctx, err = verbs.Open(name, device, cfg); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrProvider, name, err)
	}
	return name, nil
}

func (f *Fabric) newQP() (verbs.QP, error) {
	return f.pd.CreateQP(verbs.QPAttr{SendCQ: f.cq, RecvCQ: f.cq, MaxSendWR: sendDepth, MaxRecvWR: recvDepth, MaxSGE: 1})
}

// connect connects the rank to itself and, eagerly, every other queue
// pair. Pairs are connected in increasing peer order on every rank, which
// never deadlocks even for providers whose Connect waits for the other side.
func (f *Fabric) connect(hellos []hello) error {
	for r := range f.peers {
		p := f.peers[r].Load()
		if f.cm != nil && r != f.rank {
			continue // connected on first use, by either side
		}
		p.ready.Store(true)
		if r == f.rank {
			errc := make(chan error, 1)
			f.mu.Lock() // peers may be connecting already (lazy)
			f.byQPN[p.selfRx.Num()] = p
			f.mu.Unlock()
			if err := f.postRecvs(p, p.selfRx, recvDepth); err != nil {
				return err
			}
			go func() { errc <- p.selfRx.Connect(p.qp.Endpoint()) }()
			if err := p.qp.Connect(p.selfRx.Endpoint()); err != nil {
				return err
			}
			if err := <-errc; err != nil {
				return err
			}
			continue
		}
		// Receives go first: a peer may notify as soon as it is connected.
		f.mu.Lock()
		f.byQPN[p.qp.Num()] = p
		f.mu.Unlock()
		if err := f.postRecvs(p, p.qp, recvDepth); err != nil {
			return err
		}
		if err := p.qp.Connect(hellos[r].Endpoints[f.rank]); err != nil {
			return fmt.Errorf("transport: connecting to rank %d: %w", r, err)
		}
	}
	return nil
}

// postRecvs posts n zero-length receives: notifications carry only their
// immediate data.
func (f *Fabric) postRecvs(p *peer, qp verbs.QP, n int) error {
	for i := 0; i < n; i++ {
		if _, err := qp.PostRecv(&p.recvWR); err != nil {
			return err
		}
	}
	return nil
}

// Rank is this rank's number, Size the job's.
func (f *Fabric) Rank() int { return f.rank }

// Size is the number of ranks in the job.
func (f *Fabric) Size() int { return f.size }

// PD is the protection domain regions must be registered in.
func (f *Fabric) PD() verbs.PD { return f.pd }

// Device describes the device in use.
func (f *Fabric) Device() verbs.DeviceAttr { return f.ctx.Attr() }

// Timeout is the bound on blocking waits (0: none).
func (f *Fabric) Timeout() time.Duration { return f.timeout }

// SyncMemory orders the provider's changes to this rank's registered
// memory before the caller's next reads (a no-op on hardware).
func (f *Fabric) SyncMemory() {
	if s, ok := f.ctx.(verbs.MemorySyncer); ok {
		s.SyncMemory()
	}
}

// Err returns the sticky error of rank r's connection, or nil.
func (f *Fabric) Err(r int) error {
	if p := f.peers[r].Load(); p != nil {
		if e := p.err.Load(); e != nil {
			return *e
		}
	}
	return nil
}

// Post posts one send request to rank r. The fabric sets its ID and
// signals it when asked or every so often, so that the send queue drains;
// it returns the request's sequence number, which Wait accepts. wr.Next
// must be nil.
func (f *Fabric) Post(r int, wr *verbs.SendWR) (uint64, error) {
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("posting a %v to rank %d: %w", wr.Op, r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	return f.postLocked(p, wr)
}

func (f *Fabric) postLocked(p *peer, wr *verbs.SendWR) (uint64, error) {
	if err := f.Err(p.rank); err != nil {
		return 0, fmt.Errorf("posting a %v to rank %d: %w", wr.Op, p.rank, err)
	}
	if f.closed.Load() {
		return 0, ErrClosed
	}
	seq := p.posted.Load() + 1
	if seq-p.done.Load() >= sendDepth-1 {
		// The queue is full: reclaim it by waiting for the last signalled
		// request. Signalling every signalGap requests guarantees there is
		// one well inside the queue.
		target := p.lastSignaled
		if err := f.waitFor(func() bool { return p.done.Load() >= target }, waitOp{what: "post (send queue full)", rank: p.rank, seq: target, fails: true}, nil); err != nil {
			return 0, err
		}
	}
	if seq-p.lastSignaled >= signalGap {
		wr.Flags |= verbs.Signaled
	}
	if wr.Flags&verbs.Signaled != 0 {
		p.lastSignaled = seq
	}
	wr.ID = seq<<16 | uint64(p.rank)
	if _, err := p.qp.PostSend(wr); err != nil {
		return 0, f.postErr(p, err)
	}
	p.posted.Store(seq)
	return seq, nil
}

// postErr reports a failed post to p.
func (f *Fabric) postErr(p *peer, err error) error {
	if errors.Is(err, verbs.ErrQPState) {
		// The queue pair failed under us. The provider may say why (the
		// soft provider's error wraps the cause); otherwise its error
		// completions will: wait for them briefly.
		if e := f.Err(p.rank); e != nil {
			return e
		}
		if e := f.peerErr(p, nil); e != nil {
			f.recordErr(p, e) // the caller may end before it polls the completions
			return e
		}
		op := waitOp{what: "post", rank: p.rank}
		if werr := f.waitUntil(func() bool { return p.err.Load() != nil }, op, time.Now().Add(time.Second), nil); werr != nil && !errors.Is(werr, ErrTimeout) {
			return werr
		}
		if cause := p.err.Load(); cause != nil {
			return *cause
		}
		launch.NotifyPeerLost(p.rank)
		return rankErr(p.rank, err)
	}
	return fmt.Errorf("transport: posting to rank %d: %w", p.rank, err)
}

// postChainLocked posts p.chain[:n] (operations and buffers filled in) as
// one chain of work requests; p.postMu held. It returns the last one's
// sequence number.
func (f *Fabric) postChainLocked(p *peer, n int) (uint64, error) {
	if err := f.Err(p.rank); err != nil {
		return 0, fmt.Errorf("posting atomics to rank %d: %w", p.rank, err)
	}
	if f.closed.Load() {
		return 0, ErrClosed
	}
	first := p.posted.Load() + 1
	for first+uint64(n)-p.done.Load() >= sendDepth-1 {
		// Reclaim the queue as postLocked does; chains are far shorter
		// than signalGap, so a signalled request is well inside it.
		target := p.lastSignaled
		if err := f.waitFor(func() bool { return p.done.Load() >= target }, waitOp{what: "post (send queue full)", rank: p.rank, seq: target, fails: true}, nil); err != nil {
			return 0, err
		}
	}
	for i := range n {
		wr := &p.chain[i]
		seq := first + uint64(i)
		if seq-p.lastSignaled >= signalGap || i == n-1 {
			wr.Flags |= verbs.Signaled // the last, so that the chain can be waited for
		}
		if wr.Flags&verbs.Signaled != 0 {
			p.lastSignaled = seq
		}
		wr.ID = seq<<16 | uint64(p.rank)
		wr.Next = nil
		if i > 0 {
			p.chain[i-1].Next = wr
		}
	}
	bad, err := p.qp.PostSend(&p.chain[0])
	if err != nil {
		// The requests before the refused one were posted.
		for i := range n {
			if &p.chain[i] == bad {
				if i > 0 {
					p.posted.Store(first + uint64(i) - 1)
				}
				break
			}
		}
		return 0, f.postErr(p, err)
	}
	last := first + uint64(n) - 1
	p.posted.Store(last)
	return last, nil
}

// Wait waits until request seq to rank r has completed. If no signalled
// request at or after seq was posted, it posts one, since only signalled
// requests report completion.
func (f *Fabric) Wait(r int, seq uint64) error { return f.waitRequest(r, seq, 0) }

// WaitWithin is Wait bounded by d instead of the fabric's timeout, for a
// protocol undoing an attempt that already waited out a timeout: a rank
// that does not answer within d is given up, as after a timeout.
func (f *Fabric) WaitWithin(r int, seq uint64, d time.Duration) error {
	return f.waitRequest(r, seq, d)
}

// waitRequest is Wait with bound d (0: the fabric's timeout).
func (f *Fabric) waitRequest(r int, seq uint64, d time.Duration) error {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return f.Err(r) // nothing was posted to it
	}
	if p.done.Load() >= seq {
		return f.Err(r)
	}
	p.postMu.Lock()
	if p.lastSignaled < seq {
		p.flushWR = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled}
		if _, err := f.postLocked(p, &p.flushWR); err != nil {
			p.postMu.Unlock()
			return err
		}
	}
	p.postMu.Unlock()
	cond := func() bool { return p.done.Load() >= seq }
	op := waitOp{what: "wait", rank: r, seq: seq, fails: true}
	if d > 0 {
		return f.waitUntil(cond, op, time.Now().Add(d), nil)
	}
	return f.waitFor(cond, op, nil)
}

// Test reports whether request seq to rank r has completed, making
// progress once without blocking (it may post a signalled request so that
// completion can be seen at all).
func (f *Fabric) Test(r int, seq uint64) (bool, error) {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return true, f.Err(r) // nothing was posted to it
	}
	if p.done.Load() >= seq {
		return true, f.Err(r)
	}
	p.postMu.Lock()
	if p.lastSignaled < seq {
		p.flushWR = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled}
		if _, err := f.postLocked(p, &p.flushWR); err != nil {
			p.postMu.Unlock()
			return false, err
		}
	}
	p.postMu.Unlock()
	f.mu.Lock()
	if !f.polling {
		n, err := f.cq.Poll(f.wcs)
		if err != nil {
			f.mu.Unlock()
			return false, err
		}
		f.dispatch(f.wcs[:n])
	}
	f.mu.Unlock()
	if err := f.Err(r); err != nil {
		return true, err
	}
	return p.done.Load() >= seq, nil
}

// Progress drives the fabric once without blocking: it runs what the
// provider has received (soft provider) and records new completions and
// notifications. It reports whether anything happened. The caller is then
// the process's poller until it calls EndProgress. Callers polling their
// own memory use it through LocalWait, which does both.
func (f *Fabric) Progress() bool {
	ran := false
	if f.prog != nil {
		ran = f.prog.Progress()
	}
	f.mu.Lock()
	if !f.polling {
		n, err := f.cq.Poll(f.wcs)
		if err == nil && n > 0 {
			f.dispatch(f.wcs[:n])
			f.cond.Broadcast()
			ran = true
		}
	}
	f.mu.Unlock()
	return ran
}

// EndProgress says the caller stopped driving the fabric with Progress
// (see verbs.Progresser).
func (f *Fabric) EndProgress() {
	if f.prog != nil {
		f.prog.EndProgress()
	}
}

// LocalWait paces a goroutine that polls words of its own memory for a
// change a peer's one-sided write or atomic will make. It allocates
// nothing, and follows one of two schedules:
//
//   - with a provider this process drives (soft), while things keep
//     happening it drives the fabric (Progress, as the process's poller
//     until Done or a sleep) and yields; once nothing
//     has happened for LocalSpin it sleeps between polls, 1 µs doubling to
//     100 µs (an idle rank then costs next to no CPU);
//   - on hardware, where memory changes by itself, it yields for a few
//     polls and then sleeps the shortest sleep Go offers between polls:
//     longer sleeps are stretched by the timer (to about a millisecond in
//     the Soft-RoCE VM, which made a lock ping-pong 4 times slower), and
//     spinning would take CPU from the peers and, on Soft-RoCE, from the
//     kernel's RDMA engine.
type LocalWait struct {
	f        *Fabric
	deadline time.Time // zero: none
	spinEnd  time.Time // soft: polling without sleeping until then
	polls    int       // hardware: polls so far
	pause    time.Duration
	graced   bool // Grace extended the deadline
}

// LocalSpin is how long LocalWait keeps polling without sleeping after the
// last progress it saw, with a provider this process drives.
const LocalSpin = 100 * time.Microsecond

const (
	localMaxSleep = 100 * time.Microsecond // soft: cap of the doubling sleeps
	hwYields      = 64                     // hardware: polls before the first sleep
)

// NewLocalWait starts a wait bounded by the fabric's timeout.
func (f *Fabric) NewLocalWait() LocalWait {
	now := time.Now()
	w := LocalWait{f: f, pause: time.Microsecond}
	if f.prog != nil {
		w.spinEnd = now.Add(LocalSpin)
	}
	if f.timeout > 0 {
		w.deadline = now.Add(f.timeout)
	}
	return w
}

// Grace extends a wait whose Pause reached the deadline, once, by the
// fabric's NoticeGrace, and reports whether it did: a caller that is about
// to blame the ranks it waited for first gives the failure notices of other
// ranks (the cause the ranks it waits for may be stuck on) time to arrive.
func (w *LocalWait) Grace() bool {
	if w.graced || w.deadline.IsZero() {
		return false
	}
	w.graced = true
	w.deadline = time.Now().Add(w.f.NoticeGrace())
	return true
}

// Pause is called after a poll found nothing: it drives the fabric, and
// yields or sleeps. It returns false, at once, when the deadline has
// passed.
func (w *LocalWait) Pause() bool {
	now := time.Now()
	if !w.deadline.IsZero() && now.After(w.deadline) {
		return false
	}
	if w.f.prog == nil {
		w.f.Progress() // completions and notifications only
		if w.polls++; w.polls < hwYields {
			runtime.Gosched()
		} else {
			time.Sleep(time.Microsecond)
		}
		return true
	}
	if w.f.Progress() {
		w.spinEnd = now.Add(LocalSpin)
		w.pause = time.Microsecond
		return true
	}
	if now.Before(w.spinEnd) {
		runtime.Gosched()
		return true
	}
	d := w.pause
	if !w.deadline.IsZero() {
		d = min(d, w.deadline.Sub(now))
	}
	w.f.EndProgress() // asleep, it polls no more: the reader goroutines take over
	time.Sleep(d)
	w.pause = min(2*w.pause, localMaxSleep)
	return true
}

// Done ends the wait: call it (defer it) when the polled condition holds or
// the wait fails, so that the provider's own goroutines may poll again.
func (w *LocalWait) Done() { w.f.EndProgress() }

// Flush waits until every request posted to rank r so far has completed
// at the target (remote completion).
func (f *Fabric) Flush(r int) error {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return f.Err(r) // nothing was posted to it
	}
	p.postMu.Lock()
	target := p.posted.Load()
	if p.done.Load() >= target {
		p.postMu.Unlock()
		return f.Err(r)
	}
	if p.lastSignaled < target {
		p.flushWR = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled}
		seq, err := f.postLocked(p, &p.flushWR)
		if err != nil {
			p.postMu.Unlock()
			return err
		}
		target = seq
	}
	p.postMu.Unlock()
	return f.waitFor(func() bool { return p.done.Load() >= target }, waitOp{what: "flush", rank: r, seq: target, fails: true}, nil)
}

// FlushAll flushes every peer, the rank itself included.
func (f *Fabric) FlushAll() error {
	var errs []error
	for r := range f.size {
		if err := f.Flush(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitFor makes progress until cond holds (checked under f.mu). It fails
// if the connection to op.rank fails (op.rank < 0: none in particular;
// from, if not nil, lists ranks whose failure also ends the wait, unless
// the notification the wait expects from them has arrived), or on
// timeout. It allocates nothing unless it fails.
func (f *Fabric) waitFor(cond func() bool, op waitOp, from func(yield func(int) bool)) error {
	var deadline time.Time
	if f.timeout > 0 {
		deadline = time.Now().Add(f.timeout)
	}
	return f.waitUntil(cond, op, deadline, from)
}

// checkRank is the yield function waitUntil hands to its from iterator:
// it finds the failed ranks that end the wait (f.scan), leaving the error
// of one in f.scanErr. The group of a notification wait fails as a whole:
// a rank that failed (ErrPeer) ends the wait even after its notification
// arrived, as the peers it failed on may never notify (it stops there);
// a rank that left in order (ErrPeerGone) ends it only if its notification
// has not arrived, and is named only if no rank failed, since ranks may
// leave because of another's failure. A rank not connected yet is
// connected in the background (kick), so that a wait for a rank that
// failed before it ever reached this one fails at once too. f.mu held.
func (f *Fabric) checkRank(r int) bool {
	p := f.peers[r].Load()
	if p == nil {
		f.kick(r)
		return true
	}
	e := p.err.Load()
	if e == nil {
		return true
	}
	if !errors.Is(*e, ErrPeerGone) {
		f.scanErr = *e
		return false
	}
	if f.scanErr == nil && (f.scan.ntags == 0 || !f.delivered(r)) {
		f.scanErr = *e
	}
	return true
}

// waitUntil is waitFor with an explicit deadline (zero: none).
func (f *Fabric) waitUntil(cond func() bool, op waitOp, deadline time.Time, from func(yield func(int) bool)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := deadline // the wait's own deadline, then the grace's (propagate.go)
	for {
		if cond() {
			return nil
		}
		if f.failed != nil {
			return f.failed
		}
		if op.rank >= 0 {
			if err := f.Err(op.rank); err != nil {
				return fmt.Errorf("%s to rank %d: %w", op.what, op.rank, err)
			}
		}
		if from != nil {
			// Called directly rather than ranged over: a range-over-func
			// loop here would allocate its state on every wait. A failure
			// reaches the completion queue after everything the rank sent
			// before it, so its notification, if it sent one, has been
			// counted by now.
			f.scanErr = nil
			f.scan = op
			from(f.checkFn)
			if err := f.scanErr; err != nil {
				f.scanErr = nil
				return fmt.Errorf("%s: %w", op.what, err)
			}
		}
		if f.polling {
			f.cond.Wait()
			continue
		}
		f.polling = true
		f.mu.Unlock()
		n, err := f.cq.Wait(f.wcs, end)
		f.mu.Lock()
		f.polling = false
		f.dispatch(f.wcs[:n])
		f.cond.Broadcast()
		if errors.Is(err, verbs.ErrTimeout) {
			if !cond() && from != nil && end.Equal(deadline) {
				// The ranks still missing look healthy, but may be stuck
				// on one that failed: wait a little for a failure notice
				// naming it before blaming them.
				end = deadline.Add(f.noticeGrace())
				continue
			}
			if !cond() {
				f.scan = op
				terr := f.timeoutErr(op, deadline, from)
				if op.fails && op.rank >= 0 {
					return f.failPeer(op.rank, terr)
				}
				if from != nil && op.ntags > 0 && op.tags[0]>>28 == TagFence {
					f.giveUpMissing(from, terr)
				}
				return terr
			}
		} else if err != nil {
			f.failed = fmt.Errorf("transport: completion queue: %w", err)
		}
	}
}

// dispatch records completions; f.mu held.
func (f *Fabric) dispatch(wcs []verbs.WC) {
	for i := range wcs {
		wc := &wcs[i]
		if wc.Op == verbs.OpRecv || wc.Op == verbs.OpRecvImm {
			p := f.byQPN[wc.QPN]
			if p == nil {
				continue
			}
			if wc.Status != verbs.StatusSuccess {
				// On the loopback pair the receiving queue pair fails only
				// because the sending one did, which reports the cause.
				if p.selfRx == nil {
					f.setErr(p, wc)
				}
				continue
			}
			if isNotice(wc.Imm) {
				f.noticeArrived(p.rank, wc.Imm)
			} else {
				f.noteArrived(wc.Imm, p.rank)
			}
			qp := p.qp
			if p.selfRx != nil {
				qp = p.selfRx
			}
			// A failed repost means the queue pair is in error; its
			// error completions say why.
			qp.PostRecv(&p.recvWR)
			continue
		}
		r := int(wc.ID & 0xffff)
		if r >= len(f.peers) {
			continue
		}
		p := f.peers[r].Load()
		if p == nil {
			continue
		}
		if wc.Status != verbs.StatusSuccess {
			f.setErr(p, wc)
			continue
		}
		if seq := wc.ID >> 16; seq > p.done.Load() {
			p.done.Store(seq)
		}
	}
}

// setErr records a failed completion as the peer's sticky error. The cause
// (a remote access error, say) wins over the flushes that follow it.
func (f *Fabric) setErr(p *peer, wc *verbs.WC) {
	if f.closed.Load() {
		return
	}
	old := p.err.Load()
	if old != nil && !(errors.Is(*old, verbs.ErrFlushed) && wc.Status != verbs.StatusFlushed) {
		return
	}
	e := f.peerErr(p, wc)
	p.err.Store(&e)
	if old == nil {
		launch.NotifyPeerLost(p.rank) // rmarun names the first failure, not this rank's
	}
	if old == nil || !reportable(*old) {
		f.announce(p.rank, e) // once: the flushes' error is not reportable
	}
}

// Barrier returns once every rank has entered it. It is built on
// notifications: each rank notifies every other and waits for all of them.
// Everything a rank posted before the barrier is visible at its targets
// after it (each notification is ordered after the requests before it), but
// gets (reads) are complete only once Flush says so.
func (f *Fabric) Barrier() error {
	f.barSeq++
	return f.TagBarrier(MakeTag(TagWorld, 0, f.barSeq))
}

// TagBarrier is a barrier whose notifications carry tag, so that barriers
// of independent objects (windows) never take each other's notifications.
// Callers alternate tags between consecutive barriers (MakeTag's seq does):
// no rank can be more than one barrier ahead of another.
func (f *Fabric) TagBarrier(tag uint32) error {
	for i := 1; i < f.size; i++ {
		if err := f.Notify((f.rank+i)%f.size, tag); err != nil {
			return err
		}
	}
	return f.WaitNotify(tag, f.size-1, f.othersFn)
}

func (f *Fabric) others(yield func(int) bool) {
	for r := range f.size {
		if r != f.rank && !yield(r) {
			return
		}
	}
}

// Tag kinds.
const (
	TagWorld  = 1 // world barrier
	TagGather = 2 // allgather
	TagFence  = 3 // window fence
	TagUser   = 8 // first kind free for higher layers
)

// MakeTag builds a notification tag from a kind (4 bits), an object id
// (16 bits) and a sequence number, of which only the parity is kept (bit
// 0). Bits 1 to 11 are free for the caller's flags.
func MakeTag(kind uint8, id uint16, seq uint32) uint32 {
	return uint32(kind&0xf)<<28 | uint32(id)<<12 | seq&1
}

// Allgather gives every rank's data (at most 64 bytes each) to every rank,
// through RDMA writes into the world control region and a barrier. It is
// collective. out[r] receives rank r's bytes.
func (f *Fabric) Allgather(mine []byte, out [][]byte) error {
	if len(mine) > gatherSlot {
		return fmt.Errorf("transport: allgather of %d bytes (max %d)", len(mine), gatherSlot)
	}
	f.gatherSeq++
	half := f.gatherSeq % 2
	slotOff := func(r int) int { return (half*f.size + r) * gatherSlot }
	ctrl := f.ctrl.Bytes()
	src := ctrl[slotOff(f.rank) : slotOff(f.rank)+gatherSlot]
	clear(src)
	copy(src, mine)
	for r := range f.size {
		if r == f.rank {
			continue
		}
		wr := verbs.SendWR{
			Op:         verbs.OpWrite,
			SGL:        []verbs.SGE{{Addr: f.ctrlMR.Addr() + uint64(slotOff(f.rank)), Length: gatherSlot, LKey: f.ctrlMR.LKey()}},
			RemoteAddr: f.ctrlPeers[r].Addr + uint64(slotOff(f.rank)),
			RKey:       f.ctrlPeers[r].RKey,
		}
		if _, err := f.Post(r, &wr); err != nil {
			return err
		}
	}
	if err := f.TagBarrier(MakeTag(TagGather, 0, uint32(f.gatherSeq))); err != nil {
		return err
	}
	for r := range f.size {
		copy(out[r], ctrl[slotOff(r):slotOff(r)+gatherSlot])
	}
	return nil
}

// Disconnect closes every connection in order: each peer learns that this
// rank left (ErrPeerGone), and nothing more runs here. A rank that ends
// calls it before it deregisters its memory, so that a peer still sending
// to that memory is told that the rank left rather than that it refused
// the access (a remote access error). Every later operation fails with
// ErrClosed. Close calls it.
func (f *Fabric) Disconnect() {
	f.awaitNotices()
	f.closed.Store(true)
	// Under connMu, so that no connection starts or is accepted after it.
	f.connMu.Lock()
	if f.disconnected.Swap(true) {
		f.connMu.Unlock()
		return
	}
	peers := make([]*peer, 0, len(f.peers))
	for r := range f.peers {
		peers = append(peers, f.peers[r].Load())
	}
	f.connMu.Unlock()
	for _, p := range peers {
		if p == nil {
			continue
		}
		if p.qp != nil {
			p.qp.Close()
		}
		if p.selfRx != nil {
			p.selfRx.Close()
		}
	}
}

// Close tears the fabric down. It is not collective; call Barrier first
// for an orderly end, since peers see this rank's connections close.
func (f *Fabric) Close() error {
	if f.shut.Swap(true) {
		return nil
	}
	f.Disconnect()
	if f.ctrlMR != nil {
		f.ctrlMR.Dereg()
	}
	if f.ctrl != nil {
		f.ctrl.Free()
	}
	if f.cq != nil {
		f.cq.Close()
	}
	if f.pd != nil {
		f.pd.Close()
	}
	if f.ctx != nil {
		return f.ctx.Close()
	}
	return nil
}

// Memory is page-aligned memory outside the Go heap (a memfd mapped
// shared, internal/memfd), for allocated windows: it never moves, the
// garbage collector never scans it, and node-local peers can map it (the
// shm provider).
type Memory struct {
	m *memfd.Mem
}

// AllocMemory maps n bytes (rounded up to pages) of zeroed memory.
func AllocMemory(n int) (*Memory, error) {
	if n <= 0 {
		return nil, fmt.Errorf("transport: allocating %d bytes", n)
	}
	m, err := memfd.Alloc(n, "rmago")
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return &Memory{m: m}, nil
}

// Bytes is the memory.
func (m *Memory) Bytes() []byte {
	if m.m == nil {
		return nil
	}
	return m.m.Bytes()
}

// Ptr is the address of the first byte.
func (m *Memory) Ptr() unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(m.Bytes())) }

// Free unmaps the memory; it must be deregistered first.
func (m *Memory) Free() error {
	if m.m == nil {
		return nil
	}
	mm := m.m
	m.m = nil
	return mm.Free()
}
