// Package verbs is rmago's provider-neutral RDMA contract, shaped like
// libibverbs: devices, contexts, protection domains, memory regions with
// local and remote keys, completion queues and reliable-connected (RC) queue
// pairs that carry send work requests (RDMA write, write with immediate,
// RDMA read, atomics, send) and receive requests.
//
// Providers implement the contract and register themselves by name, the way
// database/sql drivers do; a program links in the ones it imports and opens
// one by name:
//
//	import _ "github.com/rmago/rmago/verbs/soft" // the TCP software-RDMA provider
//	ctx, err := verbs.Open("soft", "", verbs.Config{Addr: "127.0.0.1", Secret: key})
//
// or by discovery, the first usable hardware provider before the software
// one (registry.go, select.go):
//
//	ch, err := verbs.Select("auto", "", cfg) // ch.Provider, ch.Context, ch.Notice
//
// The contract follows the hardware's rules, so code written against it
// runs unchanged on the software provider and on real InfiniBand or RoCE:
//   - memory is reached only through registered regions, locally by lkey and
//     remotely by (address, rkey); the responder checks both;
//   - remote addresses are the target's real virtual addresses;
//   - work requests on one queue pair execute in order, and a signalled
//     completion implies that every earlier request on that queue pair has
//     completed too;
//   - atomics act on 8-byte aligned words and are atomic against each other.
//
// The contract and each provider: docs/architecture.md.
package verbs

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors shared by every provider. Providers wrap them with
// detail; test with errors.Is.
var (
	// ErrNoDevice means the provider found no usable device.
	ErrNoDevice = errors.New("verbs: no RDMA device")
	// ErrUnknownProvider means no provider registered under that name.
	ErrUnknownProvider = errors.New("verbs: unknown provider")
	// ErrInvalid means an argument broke the contract (bad length, alignment,
	// access flags, queue depth, ...). Nothing was posted.
	ErrInvalid = errors.New("verbs: invalid argument")
	// ErrLocalAccess means a scatter-gather entry is not inside a region
	// registered with that lkey and the needed local access.
	ErrLocalAccess = errors.New("verbs: local protection error")
	// ErrQueueFull means the send or receive queue has no free slot.
	ErrQueueFull = errors.New("verbs: work queue full")
	// ErrQPState means the queue pair is not connected, or is in the error state.
	ErrQPState = errors.New("verbs: queue pair not ready")
	// ErrClosed means the object was closed or destroyed.
	ErrClosed = errors.New("verbs: closed")
	// ErrTimeout means a blocking wait reached its deadline.
	ErrTimeout = errors.New("verbs: timed out")
	// ErrAuth means a peer failed authentication.
	ErrAuth = errors.New("verbs: peer failed authentication")
	// ErrPeerClosed means the peer closed its queue pair in order (it
	// called Close, or its program ended): nothing more will come from it
	// and nothing more sent to it will run. Providers that can tell an
	// orderly close from a failure (soft) report it as the queue pair's
	// cause (ErrorReporter).
	ErrPeerClosed = errors.New("verbs: peer closed its queue pair")
)

// Access is a set of memory region access flags, as in ibv_access_flags.
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << iota // the local side may write into the region (receives, read results)
	AccessRemoteWrite                     // peers may RDMA-write into the region
	AccessRemoteRead                      // peers may RDMA-read from the region
	AccessRemoteAtomic                    // peers may run atomics on the region's words
)

// AccessAll is every access flag: what an RMA window needs.
const AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// Opcode is the operation of a send work request.
type Opcode uint8

// Send opcodes. OpRecv and OpRecvImm appear only in work completions.
const (
	OpWrite       Opcode = iota + 1 // RDMA write: local SGEs → remote (addr, rkey)
	OpWriteImm                      // RDMA write with immediate: also consumes a receive at the target
	OpRead                          // RDMA read: remote (addr, rkey) → local SGEs
	OpFetchAdd                      // 8-byte atomic fetch-and-add; the old value lands in the local SGE
	OpCompareSwap                   // 8-byte atomic compare-and-swap; the old value lands in the local SGE
	OpSend                          // two-sided send into the target's next receive buffer
	OpRecv                          // completion of a receive that took a send
	OpRecvImm                       // completion of a receive consumed by a write with immediate
	OpAccumulate                    // rmago extension: element-wise accumulate of the SGL's operand into remote memory (see Accumulate)
)

var opNames = [...]string{"invalid", "write", "write-imm", "read", "fetch-add", "compare-swap", "send", "recv", "recv-imm", "accumulate"}

func (o Opcode) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("opcode(%d)", uint8(o))
}

// Status is the outcome carried by a work completion.
type Status uint8

// Completion statuses, as in ibv_wc_status (only those rmago distinguishes).
const (
	StatusSuccess      Status = iota // the request completed
	StatusLocalError                 // local protection or length error
	StatusRemoteAccess               // the responder refused: bad rkey, flags or bounds; target memory untouched
	StatusRemoteOp                   // the responder could not execute the request (malformed, misaligned)
	StatusTransport                  // retry exceeded / transport error: the peer is gone or unreachable
	StatusFlushed                    // the queue pair was in the error state; the request never ran
	StatusRNR                        // receiver not ready: no receive posted for a send or write with immediate
)

var statusNames = [...]string{"success", "local error", "remote access error", "remote operation error", "transport error", "flushed", "receiver not ready"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Completion errors: Status.Err maps a failed status to one of these, so
// callers above the verbs layer can use errors.Is whatever the provider.
var (
	ErrLocalCompletion = errors.New("verbs: local completion error")
	ErrRemoteAccess    = errors.New("verbs: remote access error")
	ErrRemoteOp        = errors.New("verbs: remote operation error")
	ErrTransport       = errors.New("verbs: transport error (retry exceeded, peer gone)")
	ErrFlushed         = errors.New("verbs: work request flushed")
	ErrRNR             = errors.New("verbs: receiver not ready")
)

// Err returns nil for StatusSuccess and the matching sentinel otherwise.
func (s Status) Err() error {
	switch s {
	case StatusSuccess:
		return nil
	case StatusLocalError:
		return ErrLocalCompletion
	case StatusRemoteAccess:
		return ErrRemoteAccess
	case StatusRemoteOp:
		return ErrRemoteOp
	case StatusTransport:
		return ErrTransport
	case StatusFlushed:
		return ErrFlushed
	case StatusRNR:
		return ErrRNR
	}
	return fmt.Errorf("verbs: unknown completion status %d", uint8(s))
}

// AtomicCap says how a device's atomics behave, as ibv_atomic_cap.
type AtomicCap uint8

// Atomic capabilities.
const (
	AtomicNone AtomicCap = iota // no remote atomics
	AtomicHCA                   // atomic among requests through this device (what RMA needs)
	AtomicGlob                  // also atomic against the CPU
)

// DeviceAttr describes a device, the subset of ibv_device_attr and
// ibv_port_attr that rmago uses.
type DeviceAttr struct {
	Name       string    // device name, "soft0" or "mlx5_0" / "rxe0"
	Provider   string    // provider name
	NetDev     string    // network interface the device sits on, when known
	MaxMRSize  uint64    // largest region the device registers
	MaxQPWR    int       // deepest work queue
	MaxSGE     int       // most scatter-gather entries per request
	MaxInline  int       // largest payload copied into the request at post time
	AtomicCap  AtomicCap // remote atomic support
	MTU        int       // active path MTU in bytes
	LinkLayer  string    // "InfiniBand", "Ethernet" (RoCE) or "TCP"
	PortActive bool      // the port is up
	// Accumulate: the provider executes OpAccumulate (an rmago
	// extension, see Accumulate), up to MaxFetchAccumulate bytes per
	// fetching request (soft and shm). NIC-only providers (ibv) leave it
	// false: callers then build accumulates from OpFetchAdd and
	// OpCompareSwap.
	Accumulate         bool
	MaxFetchAccumulate int
	// PostCopiesPayload: every write's and send's payload has been taken
	// when PostSend returns (the soft provider writes it to its socket,
	// or copies a small one into its send buffer; shm copies it to the
	// target),
	// so a request never needs its source buffer afterwards and is
	// locally complete once posted. Hardware takes only inline payloads
	// (MaxInline) at post time.
	PostCopiesPayload bool
	// CompletesAtPost: every request has executed when PostSend returns,
	// and its completion (a signalled one's, or a failure's) is in the
	// send CQ already (shm runs requests in PostSend). A flush then needs
	// no request of its own: polling the CQ finds any failure.
	CompletesAtPost bool
	// ReadsBeforeRecv: the responder delivers a receive completion (a
	// send, or a write with immediate data) only once every read and
	// atomic it executed before it has taken its data from registered
	// memory and made its change. The owner of the memory that learns
	// of an access epoch's end from a notification posted after the
	// epoch's reads may then change it at once, and the reader need not
	// wait for its reads before notifying (soft; shm, whose requests
	// complete at post). The requests the owner posts once it has the
	// notification reach the reader after the answers to those reads, so
	// the owner may also access the reader's memory, where their data
	// lands (soft keeps answers and later requests in order on the
	// stream). A NIC gives no such order: a read's data may
	// leave memory after a later request has executed (only the
	// requester's fence flag orders them).
	ReadsBeforeRecv bool
	// AtomicsInOrder: the responder executes atomics and accumulates in
	// the queue pair's order, taking their old values as it executes
	// them, so no later request of the queue pair takes effect before
	// them (soft; shm, whose requests complete at post). An origin may
	// then release a lock behind its accumulates without waiting for
	// them first. A NIC gives no such order: a later request may execute
	// before an earlier atomic (only the requester's fence flag orders
	// them).
	AtomicsInOrder bool
	// Guards: the provider takes the send flags GuardSet, GuardAnd and
	// Guarded (soft), for writes of at most MaxGuardedWrite bytes.
	Guards bool
	// CheapSignals: signalling a request costs only its completion, never
	// a message of its own on the wire (a NIC's reliable connection
	// acknowledges every request, signalled or not; ibv). The transport
	// then signals a request posted while nothing else to its peer is
	// outstanding, so that a flush right behind it waits for that request
	// instead of posting one of its own. Where a signalled request makes
	// the responder answer (soft), a burst of puts would cost answers
	// nobody waits for.
	CheapSignals bool
}

// MaxGuardedWrite bounds a guarded write's length: the responder reads a
// skipped write's payload off its stream whole.
const MaxGuardedWrite = 16 << 10

// Config carries what a provider may need to open a device. Providers
// ignore fields that do not apply to them.
type Config struct {
	// Addr is the IP address (no port) a provider that carries traffic over
	// IP listens on. The soft provider uses it; the default is 127.0.0.1,
	// never all interfaces.
	Addr string
	// Secret is the job's shared key. Peers of the soft provider prove they
	// know it before any request is served.
	Secret []byte
	// GIDIndex selects the RoCE GID (ibv provider); -1 picks automatically.
	GIDIndex int
	// Port is the device port (ibv provider); 0 picks 1.
	Port int
	// Timeout bounds how long a queue pair waits for a peer that stopped
	// taking data, or stopped in the middle of a frame (the soft
	// provider's analogue of the retry timeout and count of a hardware
	// queue pair). Past it, the queue pair enters the error state, its
	// requests complete with StatusTransport and its cause wraps
	// ErrTimeout. 0: no bound.
	Timeout time.Duration
	// NetDev (ibv provider) names a network interface: Open with no
	// device name opens the RDMA device on it. "": the first usable one.
	NetDev string
	// Spin (soft provider) is how long a waiting goroutine goes on
	// polling after the last frame it ran before it sleeps. 0: the
	// provider's default; negative: never poll.
	Spin time.Duration
	// TCPCongestion (soft provider) is the TCP congestion control its
	// connections use: "" the provider's default (verbs/soft's
	// DefaultCongestion where the host lets it be set, else the host's),
	// "system" the host's default, or an algorithm's name, which Open
	// checks.
	TCPCongestion string
	// SpinPolls (ibv provider) fixes how many times CQ.Wait polls before
	// it sleeps on the completion channel. 0: each CQ adapts it;
	// negative: sleep at once.
	SpinPolls int
	// ShmSpin (shm provider) is how long CQ.Wait polls before it sleeps
	// on its futex. 0: the provider's default (shorter with ShareCores);
	// negative: sleep at once.
	ShmSpin time.Duration
	// ShareCores: the node runs more ranks than it has cores, so a
	// waiting rank that spins gives its core to other processes between
	// polls (sched_yield); with a core per rank it keeps it, since a
	// yield can hand the core to an unrelated thread for a time slice
	// (shm provider).
	ShareCores bool
	// ShmNoCMA (shm provider): reach a peer's memory that is not shared
	// (a created window) through the peer's socket, not with
	// cross-memory attach (process_vm_readv/writev).
	ShmNoCMA bool
}

// Provider opens devices. Implementations call Register from an init function.
type Provider interface {
	// Devices lists the provider's usable devices; ErrNoDevice if none.
	Devices() ([]DeviceAttr, error)
	// Open opens the named device ("" for the first usable one).
	Open(device string, cfg Config) (Context, error)
}

// Context is an open device, as struct ibv_context.
type Context interface {
	// Attr describes the device.
	Attr() DeviceAttr
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue holding at least depth entries.
	CreateCQ(depth int) (CQ, error)
	// Close releases the device. Objects made from it must be closed first.
	Close() error
}

// MemorySyncer is implemented by contexts whose agent runs inside this
// process (the soft and shm providers): SyncMemory makes the responder's changes to
// registered memory happen before the caller's next reads, in the sense of
// Go's memory model. Hardware providers need nothing of the kind.
type MemorySyncer interface {
	SyncMemory()
}

// Progresser is implemented by contexts whose receive engine is software
// the caller can drive (the soft provider): Progress runs the requests and
// responses that have arrived and reports whether there were any. A
// goroutine polling words in its own registered memory calls it between
// polls, so that the peers' writes land without waking another goroutine.
// Hardware progresses by itself and needs nothing of the kind.
type Progresser interface {
	// Progress runs what has arrived and reports whether anything did.
	// The caller becomes the process's poller (other goroutines of the
	// provider stop polling, so that two do not fight for the cores) until
	// it calls EndProgress.
	Progress() bool
	// EndProgress says the caller stopped polling (it is about to sleep,
	// or its wait is over).
	EndProgress()
}

// ErrorReporter is implemented by queue pairs that know why they entered
// the error state (the soft and shm providers see their connection end). A
// completion carries only a status; Err says more: it wraps ErrPeerClosed
// (orderly close), ErrTimeout (the peer stopped taking or sending data),
// ErrTransport (the connection was lost) or the status's sentinel, and
// names the peer. It returns nil while the queue pair works. Hardware
// providers learn of a peer's failure only through a failed request.
type ErrorReporter interface {
	Err() error
}

// PeerRunner is implemented by queue pairs whose peer is a process that
// this one can see, without the peer's help (shm: a process of this node):
// PeerRunning reports whether it exists and runs (running, or sleeping in
// the kernel) rather than being stopped or gone; known is false when the
// queue pair cannot tell. A rank that waited out its timeout for a peer
// asks it before blaming the peer: a peer that runs is more likely stuck
// waiting for another rank that failed.
type PeerRunner interface {
	PeerRunning() (running, known bool)
}

// ErrorSetter is implemented by queue pairs that can be moved to the error
// state on demand, as ibv_modify_qp to IBV_QPS_ERR does: every outstanding
// request completes with an error and later posts fail; cause is what Err
// reports. The transport does it to a peer that did not complete a request
// within the timeout, as a NIC does once its retries are exhausted.
type ErrorSetter interface {
	SetError(cause error)
}

// PostCompleter is implemented by the queue pairs of devices whose
// requests complete in PostSend (DeviceAttr.CompletesAtPost).
// PostSendCompleted posts one work request (wr.Next must be nil) as
// PostSend does, but returns its completion status instead of queueing a
// work completion for it, signalled or not: the caller counts the request
// (and every request before it on the queue pair) done, and records a
// failure itself. A status other than success puts the queue pair in the
// error state, as the failure completion of PostSend would. The error is
// PostSend's: the request was not posted.
type PostCompleter interface {
	PostSendCompleted(wr *SendWR) (Status, error)
}

// InlineSizer is implemented by queue pairs that take payloads inline
// (SendFlags Inline): MaxInline is the most payload bytes one request may
// carry so, as granted when the queue pair was created (QPAttr.MaxInline
// asks; the device may grant less).
type InlineSizer interface {
	MaxInline() int
}

// ErrNotMappable means a peer's memory cannot be mapped into this process:
// the provider reaches the peer through a network, or the memory is not
// in shared memory (a created window's Go slice).
var ErrNotMappable = errors.New("verbs: peer memory cannot be mapped into this process")

// Mapper is implemented by queue pairs whose peer's registered memory can
// be mapped into this process (the shm provider: node-local peers), so
// that the program reaches it with plain loads and stores, as MPI's shared
// windows (MPI_Win_shared_query) need.
type Mapper interface {
	// MapRemote returns the peer's memory of the region rkey from addr
	// (the peer's address, as the region's requests name it) to the
	// region's end, mapped read and write. The check is the one a request
	// gets: a key that is not live, or lacks remote read and write access,
	// fails with ErrRemoteAccess; memory that cannot be mapped with
	// ErrNotMappable. The mapping stays until the queue pair is closed or
	// the peer deregisters the region (a later request on the queue pair
	// then unmaps it): the caller must not use the bytes after either.
	MapRemote(rkey uint32, addr uint64) ([]byte, error)
	// Unmap removes the mapping of the peer's region rkey, if there is
	// one, and those of regions the peer has deregistered since they were
	// mapped, whatever the queue pair's state: the owner of a window calls
	// it when the window is freed. The bytes MapRemote returned for them
	// must not be used after; requests map the region again if needed.
	Unmap(rkey uint32)
}

// ConnManager is implemented by contexts that connect queue pairs on
// demand, as the RDMA connection manager (rdma_cm) does: the context
// listens at one endpoint, which a job publishes once per rank instead of
// one endpoint per queue pair, and the passive side creates the queue pair
// that takes an incoming connection when the request arrives. A job then
// exchanges a constant amount of data per rank at start-up and connects
// only the pairs that communicate. The soft and shm providers implement
// it; the
// ibv provider does not (an RC queue pair needs the peer's QPN and PSN
// before it can leave INIT, which would take a connection manager or an
// out-of-band exchange per pair), so a job on it connects every pair at
// start-up.
type ConnManager interface {
	// ListenEndpoint is the endpoint peers pass to Dial.
	ListenEndpoint() Endpoint
	// Accept installs fn, which the context calls, in a goroutine of its
	// own, for each authenticated connection request; fn must answer it
	// with the request's Accept or Refuse. Until Accept is called,
	// requests are refused.
	Accept(fn func(ConnRequest))
	// Dial connects q, a new queue pair of this context, to the context
	// whose ListenEndpoint is remote, handing private to its acceptor. It
	// returns once q is ready to send: through its own connection or,
	// when the peer refused it with ErrCrossed (its own request to this
	// side wins), through the peer's, which this side's acceptor hands to
	// q with ConnRequest.Accept. A failure wraps ErrCrossed never,
	// ErrPeerClosed when the peer refused because it is leaving, and
	// ErrTimeout when the peer did not answer in time.
	Dial(q QP, remote Endpoint, private uint64) error
}

// ConnRequest is a peer's request to connect, handed to the acceptor
// installed with ConnManager.Accept.
type ConnRequest interface {
	// Private is what the dialer passed to Dial.
	Private() uint64
	// Accept connects q with the request's connection and returns once q
	// is ready to send. q is a new queue pair of this context, or one
	// this side is dialing the requester with (Dial, called or about to
	// be): that Dial then takes the connection and returns, and Accept
	// returns at once.
	Accept(q QP) error
	// Refuse turns the request down: with ErrCrossed when this side's own
	// request to the dialer wins (the dialer then waits for it), with
	// ErrPeerClosed when this side is leaving, otherwise plainly.
	Refuse(err error)
}

// ErrCrossed is the refusal of a connection request that crossed this
// side's own request to the same peer, which wins (see ConnManager).
var ErrCrossed = errors.New("verbs: connection requests crossed")

// PD is a protection domain: memory regions and queue pairs made in one
// domain can be used together, as struct ibv_pd.
type PD interface {
	// RegMR registers buf for the given access. The memory must not move or
	// be freed while registered: allocate it outside the Go heap or pin it
	// with runtime.Pinner, since a hardware provider hands its address to
	// the NIC.
	RegMR(buf []byte, access Access) (MR, error)
	// CreateQP creates a reliable-connected queue pair.
	CreateQP(attr QPAttr) (QP, error)
	// Close deallocates the domain.
	Close() error
}

// MR is a registered memory region, as struct ibv_mr.
type MR interface {
	Addr() uint64   // virtual address of the first byte
	Len() int       // length in bytes
	LKey() uint32   // local key, for scatter-gather entries
	RKey() uint32   // remote key, for peers' requests
	Access() Access // the access it was registered with
	// Dereg deregisters the region. Peers' later requests on its rkey fail
	// with a remote access error.
	Dereg() error
}

// CQ is a completion queue, as struct ibv_cq.
type CQ interface {
	// Poll moves up to len(wc) completions into wc without blocking and
	// returns how many.
	Poll(wc []WC) (int, error)
	// Wait blocks until at least one completion is available or the deadline
	// passes (zero: no deadline), then polls like Poll. It returns
	// ErrTimeout when the deadline passed with nothing to report.
	Wait(wc []WC, deadline time.Time) (int, error)
	// Close destroys the queue.
	Close() error
}

// Waiting on the completion queues of two providers at once (a mixed
// job) without polling them in turn: the waiter blocks in the CQ that
// can be woken (a Waker), and the others, each a CompletionNotifier,
// wake it as they add completions.

// A Waker is a CQ whose Wait another goroutine can end early.
type Waker interface {
	// Wake makes a Wait that is blocked return at once, with the
	// completions it has or none (and no error); if no Wait is blocked,
	// the next one returns at once. It does not block, and is safe to call
	// from any goroutine.
	Wake()
}

// A CompletionNotifier is a CQ that can call a function each time it adds
// a completion.
type CompletionNotifier interface {
	// NotifyCompletions makes the CQ call f (which must not block) after
	// each completion it adds, from the goroutine that adds it; nil
	// stops it. It is set before the CQ is used.
	NotifyCompletions(f func())
}

// QPAttr sizes a queue pair and names its completion queues.
type QPAttr struct {
	SendCQ    CQ
	RecvCQ    CQ
	MaxSendWR int // outstanding send requests
	MaxRecvWR int // posted receive requests
	MaxSGE    int // scatter-gather entries per request (0: 1)
	MaxInline int // inline payload wanted (the provider may give less)
}

// Endpoint is what one side of an RC connection tells the other out of
// band (through the transport's bootstrap) before Connect. It is plain data
// so that it travels as JSON.
type Endpoint struct {
	QPN      uint32 `json:"qpn"`            // queue pair number
	PSN      uint32 `json:"psn"`            // initial packet sequence number
	LID      uint16 `json:"lid,omitempty"`  // InfiniBand local identifier
	GID      []byte `json:"gid,omitempty"`  // RoCE v2 / global route identifier (16 bytes)
	GIDIndex int    `json:"gidx,omitempty"` // the GID's index on its port
	MTU      int    `json:"mtu,omitempty"`  // path MTU in bytes
	Addr     string `json:"addr,omitempty"` // IP:port, for providers that carry traffic over IP
	Device   string `json:"dev,omitempty"`  // device name, for diagnostics
}

// QP is a reliable-connected queue pair, as struct ibv_qp of type IBV_QPT_RC.
type QP interface {
	// Num is the queue pair number.
	Num() uint32
	// Endpoint is this side's connection info, to send to the peer.
	Endpoint() Endpoint
	// Connect takes the queue pair to ready-to-send against the peer's
	// endpoint (INIT → RTR → RTS on hardware). Both sides call it.
	Connect(remote Endpoint) error
	// PostSend posts a chain of send requests (linked by Next). Requests
	// run in order. On error, the returned request is the first not posted.
	// A provider may hold small unsignalled requests back to send them
	// together (soft), but no longer than until the next signalled request
	// on the queue pair, a poll or wait of a completion queue, a Progress
	// call, or a short bounded delay.
	PostSend(wr *SendWR) (*SendWR, error)
	// PostRecv posts a chain of receive requests.
	PostRecv(wr *RecvWR) (*RecvWR, error)
	// Close destroys the queue pair; outstanding requests are flushed.
	Close() error
}

// SGE is a scatter-gather entry, as struct ibv_sge.
type SGE struct {
	Addr   uint64 // virtual address inside a registered region
	Length uint32 // bytes
	LKey   uint32 // the region's local key
}

// SendFlags modify a send request, as ibv_send_flags.
type SendFlags uint8

// Send flags.
const (
	// Signaled asks for a completion on success. Failed requests always
	// complete, signalled or not.
	Signaled SendFlags = 1 << iota
	// Inline copies the payload into the request at post time, so the
	// local buffer may be reused at once and needs no lkey.
	Inline
	// Fence waits for earlier reads and atomics on the queue pair to
	// complete before this request starts.
	Fence
	// Coalesce lets the provider hold a request briefly, to send it with
	// the requests that follow: a zero-length write with immediate data
	// (a notification), a signalled write that nobody waits for yet
	// (transport signals one in so many so that the send queue drains),
	// or an atomic nobody waits for yet (a lock's release).
	// The soft provider keeps it in its cork until a request it sends at
	// once, a poll of or a wait on a completion queue of the context, or
	// its cork delay (200 µs, 20 µs for an atomic; Go timers, late once
	// the program computes). Notifications and atomics held so are sent
	// at once for a while after the program left one behind (verbs/soft,
	// hold.go). Others send it at once. For notifications whose sender
	// goes on to post more, such as PSCW's complete followed by the next
	// post.
	Coalesce
	// GuardSet, on a fetch-and-add or compare-and-swap, makes the queue
	// pair's guard at the responder the atomic's outcome: a
	// compare-and-swap holds if it swapped, a fetch-and-add if its old
	// value has no bit of the request's GuardMask set. GuardAnd makes it
	// the guard and the outcome. Guarded, on a write, has the responder
	// execute it only if the guard holds; otherwise it is skipped (memory
	// untouched) and completes as executed. A lock's atomics and the first
	// write of its epoch so travel together, the write landing only if the
	// lock was taken (sync/lock's lazy exclusive lock). Only providers
	// with DeviceAttr.Guards take them, and only in one chain: another
	// request between the atomics and the write could be another guard's.
	GuardSet
	GuardAnd
	Guarded
)

// SendWR is a send work request, as struct ibv_send_wr. Callers reuse their
// requests and SGE arrays; providers keep no reference after PostSend returns.
type SendWR struct {
	ID         uint64     // returned in the completion
	Next       *SendWR    // next request of a chain, or nil
	Op         Opcode     // operation
	Flags      SendFlags  // Signaled, Inline, Fence
	SGL        []SGE      // local memory: source of writes and sends, destination of reads and atomics (8 bytes)
	RemoteAddr uint64     // target address: writes, reads, atomics
	RKey       uint32     // target region's remote key
	Imm        uint32     // immediate data (OpWriteImm)
	CompareAdd uint64     // fetch-add: the addend; compare-swap: the value compared
	Swap       uint64     // compare-swap: the value stored when equal
	Acc        Accumulate // OpAccumulate: the reduction, element type and whether the old values come back
	GuardMask  uint64     // fetch-and-add with GuardSet or GuardAnd: it holds if the old value has none of these bits
}

// RecvWR is a receive work request, as struct ibv_recv_wr.
type RecvWR struct {
	ID   uint64
	Next *RecvWR
	SGL  []SGE
}

// WC is a work completion, as struct ibv_wc.
type WC struct {
	ID      uint64 // the request's ID
	Status  Status // outcome
	Op      Opcode // the request's opcode (OpRecv / OpRecvImm for receives)
	ByteLen uint32 // bytes received (receives) or transferred
	Imm     uint32 // immediate data, when HasImm
	HasImm  bool   // the completion carries immediate data
	QPN     uint32 // local queue pair number
}

// Err is the completion's status as an error (nil on success), wrapped
// with its opcode and ID.
func (wc *WC) Err() error {
	if wc.Status == StatusSuccess {
		return nil
	}
	return fmt.Errorf("%w (%s, wr %d, qp %d)", wc.Status.Err(), wc.Op, wc.ID, wc.QPN)
}

// Accumulate describes an OpAccumulate request, an rmago extension that
// libibverbs does not have: the request carries its operand like a write
// (the SGL, whole elements of Type, each SGE a whole number of them) and
// the target's provider combines it into the remote memory at (RemoteAddr,
// RKey) with Op, element by element, each element atomically with respect
// to every other atomic the target's provider runs on it (OpFetchAdd,
// OpCompareSwap, other accumulates). RemoteAddr must be a multiple of the
// element size, and the region must allow AccessRemoteAtomic and contain
// the 8-byte aligned words that hold the elements (the unit atomics work
// on); a refusal completes with StatusRemoteAccess (key, access, bounds)
// or StatusRemoteOp (alignment, an operation the type does not have), the
// target memory untouched. With Fetch, the elements' old values replace
// the operand in the SGL, which then needs AccessLocalWrite, and the
// request carries at most DeviceAttr.MaxFetchAccumulate bytes; with
// AccNoOp the operand is not sent (an atomic read).
//
// Requests execute in queue-pair order, so accumulates from one origin to
// one target apply in the order posted. Only providers whose agent is
// software (DeviceAttr.Accumulate: soft, whose target's responder runs it,
// and shm, whose origin runs it on the mapped memory or hands it to the
// owner's socket) execute it; on a NIC-only provider a caller does what
// MPI libraries do over hardware atomics: one OpFetchAdd per 8-byte
// integer sum, a compare-and-swap loop on each word otherwise.
type Accumulate struct {
	Op    AccOp
	Type  ElemType
	Fetch bool
}

// AccOp is the reduction of an OpAccumulate. The values match rma.Op.
type AccOp uint8

// Reductions. On floats, Min and Max return NaN if either side is NaN;
// BAnd, BOr and BXor are for integer types only.
const (
	AccSum     AccOp = iota + 1 // target + operand
	AccProd                     // target * operand
	AccMin                      // min(target, operand)
	AccMax                      // max(target, operand)
	AccBAnd                     // target & operand
	AccBOr                      // target | operand
	AccBXor                     // target ^ operand
	AccReplace                  // operand
	AccNoOp                     // target unchanged
)

// Valid reports whether op is one of the reductions, and allowed on t.
func (op AccOp) Valid(t ElemType) bool {
	if op < AccSum || op > AccNoOp || t.Size() == 0 {
		return false
	}
	return !t.Float() || op < AccBAnd || op > AccBXor
}

// ElemType is the element type of an OpAccumulate: little-endian two's
// complement integers or IEEE 754 floats.
type ElemType uint8

// Element types.
const (
	Int8 ElemType = iota + 1
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float32
	Float64
)

// Size is the element size in bytes, 0 for an invalid type.
func (t ElemType) Size() int {
	switch t {
	case Int8, Uint8:
		return 1
	case Int16, Uint16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// Float reports whether t is a floating-point type.
func (t ElemType) Float() bool { return t == Float32 || t == Float64 }
