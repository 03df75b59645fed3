package transport

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// Mixed jobs. A fabric holds one provider context per way it reaches
// peers: with RMAGO_PROVIDER=soft|ibv|shm one context serves every peer;
// with auto (the default) node-local peers go through the shm provider and
// the others through the best network provider verbs.Select finds, each
// context with its own protection domain, completion queue and connection
// manager. A job on one node opens only shm; a job whose ranks are all on
// different nodes opens shm all the same (the rank's loopback pair uses
// it). Which context serves a peer (f.via) follows from the job's topology
// (the bootstrap's node identities, RMAGO_NODE for pretend nodes), the
// same on both sides of every pair. Regions register on every context;
// Local keys are fabric handles translated per context when posting
// (keys.go); Remote keys are those of the context serving the peer.
//
// Atomics stay atomic when a word is hit both by node-local peers (CPU
// atomics on the shared mapping) and by remote peers through the network
// only if the network provider's atomics are CPU atomics too: soft's
// responder runs sync/atomic on the word; ibv only where the device
// reports AtomicGlob. Otherwise node-local peers go through the network
// provider as well (as Open MPI's osc/rdma routes every atomic through
// the NIC), with a notice.

// MaxContexts is the most provider contexts a fabric holds (a network
// provider and shm).
const MaxContexts = 2

// pctx is one open provider context and what the fabric made on it.
type pctx struct {
	idx    uint8
	name   string // registered provider name
	ctx    verbs.Context
	pd     verbs.PD
	cq     verbs.CQ
	cm     verbs.ConnManager // nil: every peer it serves is connected at Open
	prog   verbs.Progresser  // the context, if software drives it
	listen []verbs.Endpoint  // lazy: every rank's listening endpoint on it
	byQPN  map[uint32]*peer  // receiving queue pairs; under f.mu
	wcs    []verbs.WC        // polled completions, owned by the poller
	got    int               // completions in wcs not dispatched yet
	// atPost: the provider completes every request inside PostSend
	// (verbs.DeviceAttr.CompletesAtPost: shm).
	atPost bool
	// readsFirst: its responder delivers a notification only after the
	// reads and atomics before it (verbs.DeviceAttr.ReadsBeforeRecv).
	readsFirst bool
	// atomsInOrder: its responder executes atomics and accumulates in
	// order and at once (verbs.DeviceAttr.AtomicsInOrder).
	atomsInOrder bool
	// guards: it takes guarded writes (verbs.DeviceAttr.Guards).
	guards bool
	// copies: PostSend has taken a write's payload when it returns
	// (verbs.DeviceAttr.PostCopiesPayload).
	copies bool
	// cheapSignals: a signalled request costs no message of its own
	// (verbs.DeviceAttr.CheapSignals): a request posted to an idle peer
	// is signalled, so that the Flush behind it posts nothing.
	cheapSignals bool
}

// shmName is the node-local provider's registered name.
const shmName = "shm"

// selectProvider opens providers; tests replace it to make one fail.
var selectProvider = verbs.Select

// cpuAtomics reports whether a context's remote atomics act on the word
// with the CPU's atomic instructions, so that they are atomic against
// node-local peers' CPU atomics on the same word.
func cpuAtomics(c verbs.Context) bool {
	a := c.Attr()
	// soft's responder runs sync/atomic on the word in the target process.
	return a.AtomicCap == verbs.AtomicGlob || a.Provider == "soft"
}

// openContexts opens the provider contexts (forced: the one named; auto:
// shm for node-local peers and the best network provider for the rest)
// and decides which serves each rank (f.via). Notices (fallbacks) go to
// notice on rank 0.
func (f *Fabric) openContexts(b Bootstrap, s config.Settings, notice func(string)) error {
	if notice == nil {
		notice = func(s string) { fmt.Fprintln(os.Stderr, s) }
	}
	say := func(msg string) {
		if b.Rank() == 0 {
			notice("rmago: " + msg)
		}
	}
	topo, err := TopologyOf(b)
	if err != nil {
		return err
	}
	ranks, cpus := launch.CPUShare(topo.NodeSize())
	f.shareCores = ranks > cpus
	f.crowded = ranks > 2*cpus
	f.procs = runtime.GOMAXPROCS(0)
	cfg := providerConfig(b, s, f.timeout, ranks, cpus)
	f.via = make([]uint8, f.size)
	if s.Provider != "" && s.Provider != "auto" {
		ch, err := selectProvider(s.Provider, s.Device, cfg)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrProvider, s.Provider, err)
		}
		f.addContext(ch.Provider, ch.Context)
		return nil
	}
	allLocal := topo.NumNodes() == 1
	shm, shmErr := selectProvider(shmName, "", cfg)
	if shmErr == nil && allLocal {
		f.addContext(shmName, shm.Context)
		return nil
	}
	network, err := selectProvider("auto", s.Device, cfg)
	if err != nil {
		if shmErr == nil {
			shm.Context.Close()
		}
		return fmt.Errorf("%w: auto: %w", ErrProvider, err)
	}
	if network.Notice != "" {
		say(network.Notice)
	}
	f.addContext(network.Provider, network.Context)
	switch {
	case shmErr != nil:
		say(fmt.Sprintf("shm provider unavailable (%v); node-local peers use the %s provider", shmErr, network.Provider))
		return nil
	case !cpuAtomics(network.Context):
		shm.Context.Close()
		say(fmt.Sprintf("the %s provider's atomics are not atomic against the CPU's; node-local peers use it too", network.Provider))
		return nil
	}
	c := f.addContext(shmName, shm.Context)
	for r := range f.via {
		if topo.SameNode(r) {
			f.via[r] = c.idx
		}
	}
	return nil
}

// addContext adds an open context to the fabric.
func (f *Fabric) addContext(name string, ctx verbs.Context) *pctx {
	c := &pctx{idx: uint8(len(f.ctxs)), name: name, ctx: ctx, byQPN: map[uint32]*peer{}, wcs: make([]verbs.WC, 64)}
	c.prog, _ = ctx.(verbs.Progresser)
	c.atPost = ctx.Attr().CompletesAtPost
	c.readsFirst = ctx.Attr().ReadsBeforeRecv
	c.atomsInOrder = ctx.Attr().AtomicsInOrder
	c.guards = ctx.Attr().Guards
	c.copies = ctx.Attr().PostCopiesPayload
	c.cheapSignals = ctx.Attr().CheapSignals
	f.ctxs = append(f.ctxs, c)
	f.multi = len(f.ctxs) > 1
	if c.prog != nil {
		f.progs = append(f.progs, c.prog)
	}
	if !c.atPost {
		f.engines = true
	}
	return c
}

// providerNames lists the fabric's contexts' providers, in order.
func (f *Fabric) providerNames() string {
	names := make([]string, len(f.ctxs))
	for i, c := range f.ctxs {
		names[i] = c.name
	}
	return strings.Join(names, "+")
}

// ProviderOf names the provider that carries this rank's traffic to rank
// r ("shm", "soft", "ibv"; r may be the rank itself).
func (f *Fabric) ProviderOf(r int) string { return f.ctxs[f.via[r]].name }

// ContextOf is the provider context that serves rank r, for code that
// reaches a peer's memory in a provider-specific way.
func (f *Fabric) ContextOf(r int) verbs.Context { return f.ctxs[f.via[r]].ctx }

// Providers lists the providers the fabric opened, the network one first.
func (f *Fabric) Providers() []string {
	names := make([]string, len(f.ctxs))
	for i, c := range f.ctxs {
		names[i] = c.name
	}
	return names
}

// PretendNodes splits a job of size ranks into k pretend nodes of
// consecutive ranks: node identities for RendezvousConfig.Nodes (or
// RMAGO_NODE per rank), so that one machine runs a mixed job, shm inside
// each pretend node and the network provider between them. k < 2 gives
// nil (every rank keeps the machine's identity).
func PretendNodes(size, k int) []string {
	if k < 2 || size < 1 {
		return nil
	}
	ids := make([]string, size)
	for r := range ids {
		ids[r] = fmt.Sprintf("pretend-node-%d", r*k/size)
	}
	return ids
}
