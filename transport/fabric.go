// Package transport is a job's connected fabric: it bootstraps the job
// (rank, size, secret, endpoint exchange), opens the verbs provider
// through the registry, keeps one reliable-connected queue pair per peer
// (and a loopback pair for the rank itself, so that atomics on its own
// memory go through the same agent as the peers'), registers memory
// (Region), posts writes, reads, typed atomics and bulk accumulates,
// awaits completions, and offers flush, notes, pollers of the rank's own
// memory, a barrier and an allgather built on the fabric's own RDMA
// writes. One file per job; docs/architecture.md maps them.
//
// Progress is driven by whoever waits: the goroutine that needs a
// completion polls the shared completion queue and dispatches what it finds
// for everyone, so there is no progress goroutine and no hop on the hot path.
package transport

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
)

// Environment variables read by Open (through internal/config, which
// checks them; docs/config.md lists them all).
const (
	// EnvProvider selects the verbs provider: soft, ibv, shm or auto (default).
	EnvProvider = config.EnvProvider
	// EnvDevice selects the device of the provider by name.
	EnvDevice = config.EnvDevice
	// EnvTimeout bounds every blocking wait (a Go duration; default 2m,
	// 0 for none). A wait that passes it fails with ErrTimeout.
	EnvTimeout = config.EnvTimeout
	// EnvConnect says when peers are connected: lazy (default: on first
	// use, where the provider can; connect.go) or eager (all at Open).
	EnvConnect = config.EnvConnect
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
	Provider string        // soft, ibv, shm or auto; "" reads RMAGO_PROVIDER
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
	c      *pctx    // the provider context that serves it (contexts.go)
	ci     uint8    // c's index
	qp     verbs.QP // requests to that rank
	selfRx verbs.QP // for the rank itself: the receiving end of the loopback pair
	// inline is qp when its requests complete in the post (shm): posts
	// then count themselves done, without a completion to poll (post.go).
	inline verbs.PostCompleter
	// errRep is qp as a verbs.ErrorReporter, or nil: DirectReady's check
	// of the queue pair's state, without an interface assertion per access.
	errRep verbs.ErrorReporter
	// inlineMax: writes of 1 to inlineMax bytes are posted inline
	// (newQP, post.go).
	inlineMax uint32

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
	peers   []atomic.Pointer[peer] // by rank; nil until first contact (connect.go)
	timeout time.Duration

	// Provider contexts (contexts.go): ctxs[via[r]] serves rank r; multi
	// when there are several, whose Local keys are handles (keys.go).
	ctxs     []*pctx
	via      []uint8
	multi    bool
	blocker  *pctx              // a mixed job's waiter blocks in its CQ (waitcq.go)
	scanMask uint8              // waitMask's finding; under mu (waitcq.go)
	maskFn   func(int) bool     // f.addMask, bound once
	progs    []verbs.Progresser // the contexts software drives
	// shareCores: this node runs more ranks than it has cores
	// (verbs.Config.ShareCores). engines: some context's requests are run
	// by an agent other than the posting thread (a NIC, or Soft-RoCE in
	// the kernel), which a spinning wait must leave a core to.
	shareCores, engines bool
	// gatherFences: the job's fences gather their first round (GatherFences).
	gatherFences bool
	// directAnywhere: some rank reaches a peer at post (DirectNotesAnywhere).
	directAnywhere bool
	// procs is GOMAXPROCS at Open: the spinning waits' yields to
	// goroutines are paced by it (spin.Yielder).
	procs int
	// crowded: this node runs more than two ranks per core (Crowded).
	crowded bool
	lkeys   atomic.Pointer[[]keySet]
	ltab    lkeyTable

	// Lazy connections (connect.go): a context's cm (nil: every peer it
	// serves was connected at Open) and listen (every rank's listening
	// endpoint on it); kicked the ranks a wait started connecting.
	connMu sync.Mutex
	kicked []bool // under mu
	// leaving: per rank, 0, or the order in which its leave barrier note
	// came among the others' (leaving.go); leaves counts them (under mu).
	leaving []atomic.Uint32
	leaves  uint32
	conns   connStats

	// Progress: one goroutine polls at a time; others wait on cond.
	mu      sync.Mutex
	cond    sync.Cond
	polling bool
	notes   map[uint32]*tagNotes // notification arrivals by tag, not yet consumed (notify.go)
	failed  error                // a fatal local error (CQ overrun)

	// World control region: allgather slots.
	ctrl         *Region
	gatherSeq    int
	barSeq       uint32
	closed       atomic.Bool
	disconnected atomic.Bool                // Disconnect ran
	shut         atomic.Bool                // Close ran
	othersFn     func(yield func(int) bool) // f.others, bound once
	checkFn      func(r int) bool           // f.checkRank, bound once
	scanErr      error                      // checkRank's finding; under mu
	scanGone     int                        // checkRank: a rank whose connection ended before its note of a fence, or -1; under mu
	scanLeft     int                        // checkRank: the rank that called Close first of those missed, or -1; under mu
	scan         waitOp                     // the wait checkRank checks for; under mu
	noticesOut   atomic.Int32               // failure notices being sent (propagate.go)
}

type hello struct {
	Ctxs     []ctxHello `json:"ctxs"`     // per provider context, in order
	CtrlAddr uint64     `json:"ctrl"`     // the world control region
	CtrlKeys Keys       `json:"ctrlkeys"` // its key on each context
	Provider string     `json:"prov"`     // the contexts' providers, joined with +
	// The form of the fences' first round (fencemode.go).
	Fence  string `json:"fence,omitempty"`  // RMAGO_FENCE
	Crowd  bool   `json:"crowd,omitempty"`  // this node runs more ranks than cores
	AtPost bool   `json:"atpost,omitempty"` // a peer is reached at post (shm)
}

// ctxHello is what a peer needs to reach this rank through one context.
type ctxHello struct {
	Endpoints []verbs.Endpoint `json:"eps,omitempty"`    // eager: the QP to use to reach rank i
	Listen    *verbs.Endpoint  `json:"listen,omitempty"` // lazy: where to dial this rank
}

// Open connects the job's fabric: it bootstraps from b, opens the
// provider contexts (contexts.go: one provider, or shm for node-local peers
// beside a network provider), exchanges what a peer needs to reach this
// rank, then closes b. With a provider that connects on demand
// (verbs.ConnManager: soft, shm) it connects only the rank to itself;
// each peer is connected on first use (connect.go). Otherwise it creates
// and connects a queue pair per peer.
func Open(b Bootstrap, opt Options) (*Fabric, error) {
	defer b.Close()
	f := &Fabric{boot: b, rank: b.Rank(), size: b.Size(), notes: map[uint32]*tagNotes{}}
	f.cond.L = &f.mu
	f.othersFn = f.others
	f.checkFn = f.checkRank
	f.maskFn = f.addMask
	f.lkeys.Store(new([]keySet))
	s, err := settings(opt)
	if err != nil {
		return nil, err
	}
	f.timeout = s.Timeout
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	if err := f.openContexts(b, s, opt.Notice); err != nil {
		return nil, err
	}
	provNames := f.providerNames()
	f.peers = make([]atomic.Pointer[peer], f.size)
	me := hello{Provider: provNames, Ctxs: make([]ctxHello, len(f.ctxs))}
	for i, c := range f.ctxs {
		if c.pd, err = c.ctx.AllocPD(); err != nil {
			return nil, err
		}
		if c.cq, err = c.ctx.CreateCQ((f.served(c) + 1) * (sendDepth + recvDepth)); err != nil {
			return nil, err
		}
		if f.lazyConnect(s, c) {
			ep := c.cm.ListenEndpoint()
			me.Ctxs[i].Listen = &ep
			c.cm.Accept(func(req verbs.ConnRequest) { f.accept(c, req) })
		} else {
			me.Ctxs[i].Endpoints = make([]verbs.Endpoint, f.size)
		}
	}
	f.hookBlocker()
	f.kicked = make([]bool, f.size)
	f.leaving = make([]atomic.Uint32, f.size)
	for r := range f.peers {
		c := f.ctxs[f.via[r]]
		if c.cm != nil && r != f.rank {
			continue
		}
		p := &peer{rank: r, c: c, ci: c.idx}
		if p.qp, err = f.newQP(c); err != nil {
			return nil, err
		}
		p.inlineMax = inlineSize(p.qp)
		if r == f.rank {
			if p.selfRx, err = f.newQP(c); err != nil {
				return nil, err
			}
		}
		f.peers[r].Store(p)
		if c.cm == nil {
			me.Ctxs[c.idx].Endpoints[r] = p.qp.Endpoint()
		}
	}
	if f.ctrl, err = f.AllocRegion(2*f.size*gatherSlot, AllAccess); err != nil {
		return nil, err
	}
	me.CtrlAddr, me.CtrlKeys = f.ctrl.loc.Addr, f.ctrl.Keys()
	f.fenceHello(&me, s)
	msg, err := json.Marshal(me)
	if err != nil {
		return nil, err
	}
	all, err := b.Allgather(msg)
	if err != nil {
		return nil, err
	}
	hellos := make([]hello, f.size)
	for _, c := range f.ctxs {
		if c.cm != nil {
			c.listen = make([]verbs.Endpoint, f.size)
		}
	}
	for r, m := range all {
		if err := json.Unmarshal(m, &hellos[r]); err != nil {
			return nil, fmt.Errorf("%w: bad hello from rank %d: %v", ErrBootstrap, r, err)
		}
		h := &hellos[r]
		if h.Provider != provNames || len(h.Ctxs) != len(f.ctxs) {
			return nil, fmt.Errorf("%w: rank %d uses provider %s, rank %d uses %s", ErrProvider, r, h.Provider, f.rank, provNames)
		}
		for i, c := range f.ctxs {
			lazy := c.cm != nil
			if lazy != (h.Ctxs[i].Listen != nil) || (!lazy && len(h.Ctxs[i].Endpoints) != f.size) {
				return nil, fmt.Errorf("%w: bad hello from rank %d: ranks disagree on connecting lazily (is %s the same on every rank?)", ErrBootstrap, r, EnvConnect)
			}
			if lazy {
				c.listen[r] = *h.Ctxs[i].Listen
			}
		}
		f.ctrl.peers = append(f.ctrl.peers, Remote{Addr: h.CtrlAddr, RKey: h.CtrlKeys[f.via[r]]})
	}
	f.decideFence(hellos)
	if err := f.connect(hellos); err != nil {
		return nil, err
	}
	ok = true
	return f, nil
}

// served is how many ranks context c serves, the rank itself included.
func (f *Fabric) served(c *pctx) int {
	n := 0
	for _, ci := range f.via {
		if ci == c.idx {
			n++
		}
	}
	return n
}

func (f *Fabric) newQP(c *pctx) (verbs.QP, error) {
	attr := verbs.QPAttr{SendCQ: c.cq, RecvCQ: c.cq, MaxSendWR: sendDepth, MaxRecvWR: recvDepth, MaxSGE: 1}
	if !c.atPost {
		attr.MaxInline = min(c.ctx.Attr().MaxInline, inlineMax)
	}
	return c.pd.CreateQP(attr)
}

// inlineMax is the inline payload asked of a NIC's queue pairs: writes of
// up to this many bytes carry their data in the work request (the NIC
// needs no DMA read of the source; perftest's latency tests do the
// same). Larger inline sizes would grow every send queue entry of every
// peer's queue pair.
const inlineMax = 64

// inlineSize is what qp took of inlineMax (0: no inline writes).
func inlineSize(qp verbs.QP) uint32 {
	if s, ok := qp.(verbs.InlineSizer); ok {
		return uint32(max(min(s.MaxInline(), inlineMax), 0))
	}
	return 0
}

// connect connects the rank to itself and, eagerly, every other queue
// pair. Pairs are connected in increasing peer order on every rank, which
// never deadlocks even for providers whose Connect waits for the other side.
func (f *Fabric) connect(hellos []hello) error {
	for r := range f.peers {
		p := f.peers[r].Load()
		c := f.ctxs[f.via[r]]
		if c.cm != nil && r != f.rank {
			continue // connected on first use, by either side
		}
		p.ready.Store(true)
		if r == f.rank {
			errc := make(chan error, 1)
			f.mu.Lock() // peers may be connecting already (lazy)
			c.byQPN[p.selfRx.Num()] = p
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
		c.byQPN[p.qp.Num()] = p
		f.mu.Unlock()
		if err := f.postRecvs(p, p.qp, recvDepth); err != nil {
			return err
		}
		if err := p.qp.Connect(hellos[r].Ctxs[c.idx].Endpoints[f.rank]); err != nil {
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

// Device describes the device in use: with several provider contexts,
// the network provider's (ProviderOf says which serves a peer).
func (f *Fabric) Device() verbs.DeviceAttr { return f.ctxs[0].ctx.Attr() }

// Timeout is the bound on blocking waits (0: none).
func (f *Fabric) Timeout() time.Duration { return f.timeout }

// Crowded reports whether this node runs more than two ranks per core. A
// rank that backs off there (a busy lock) sleeps as long as Go's timers
// let it, about a millisecond, and leaves the cores to the ranks that can
// make progress: with shorter sleeps, 16 and 32 ranks on 2 cores fighting
// for one lock (apps/lockmix -hot) took 1.9 and 3.7 times as long, the
// lock's target flooded with retries, while 3 and 4 ranks took a
// seventh and a quarter of the time.
func (f *Fabric) Crowded() bool { return f.crowded }

// SyncMemory orders the provider's changes to this rank's registered
// memory before the caller's next reads (a no-op on hardware).
func (f *Fabric) SyncMemory() {
	for _, c := range f.ctxs {
		if s, ok := c.ctx.(verbs.MemorySyncer); ok {
			s.SyncMemory()
		}
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
	// All at once: a queue pair's Close says goodbye and then waits (up to
	// a second, on soft) for the peer's end of stream. One after the other,
	// a peer slow to answer (its ranks crowding the cores) held back every
	// later peer's goodbye: survivors of a rank's early Close learnt of it
	// a second late.
	var wg sync.WaitGroup
	for _, p := range peers {
		if p == nil {
			continue
		}
		for _, q := range []verbs.QP{p.qp, p.selfRx} {
			if q != nil {
				wg.Go(func() { q.Close() })
			}
		}
	}
	wg.Wait()
}

// Close tears the fabric down. It is not collective; call LeaveBarrier
// first for an orderly end, since peers see this rank's connections close.
func (f *Fabric) Close() error {
	if f.shut.Swap(true) {
		return nil
	}
	f.Disconnect()
	f.ctrl.Close()
	f.unhookBlocker()
	var err error
	for _, c := range f.ctxs {
		if c.cq != nil {
			c.cq.Close()
		}
		if c.pd != nil {
			c.pd.Close()
		}
		err = errors.Join(err, c.ctx.Close())
	}
	return err
}
