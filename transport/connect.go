package transport

import (
	"fmt"
	"sync/atomic"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// Lazy connections. With a provider that connects on demand
// (verbs.ConnManager: the soft provider), Open publishes one listening
// endpoint per rank through the bootstrap's allgather and connects only the
// rank to itself; the first operation to a peer connects it (peerOf), and
// a peer's first request to this rank creates this side's queue pair
// (accept). Start-up then costs one connection per rank and a constant
// amount of exchanged data per rank, whatever the job's size
// (docs/launch.md, "Start-up cost"); pairs that never communicate are never
// connected.
//
// A pair is connected once, by either side. When both sides ask at the
// same time, the lower rank's request wins: the lower rank refuses the
// higher rank's request (verbs.ErrCrossed), and the higher rank's acceptor
// hands the lower rank's connection to the queue pair it is dialing with,
// whose Dial returns with it.
//
// The data path pays two atomic loads (the peer and its ready flag) for
// a connected peer. A wait for notifications from ranks not connected yet
// starts connecting them in the background (kick), so that a rank that
// failed before it ever reached this one still fails the wait at once
// (its connection is refused) rather than at the timeout.

// connStats counts how this rank's peers were connected: by its own
// request (dialed), by a peer's new request (accepted), or by a peer's
// request that won a crossing and went to this rank's dialing queue pair
// (handed; that Dial counts as dialed too, as it returned with it). Across
// a job, Σaccepted + Σhanded is the number of pairs connected (one
// connection each) and Σdialed = Σaccepted + 2·Σhanded.
type connStats struct {
	dialed, accepted, handed atomic.Int32
}

// lazyConnect decides whether the peers context c serves are connected on
// first use: when the provider can (verbs.ConnManager) and neither
// Options.Connect nor RMAGO_CONNECT says eager (s.Connect; settings
// checked the value).
func (f *Fabric) lazyConnect(s config.Settings, c *pctx) bool {
	if s.Connect == "eager" {
		return false
	}
	cm, ok := c.ctx.(verbs.ConnManager)
	if !ok || f.size == 1 {
		return false
	}
	c.cm = cm
	return true
}

// peerOf returns rank r's peer, connected: connecting it first if this is
// the first contact. A connected peer costs two atomic loads.
func (f *Fabric) peerOf(r int) (*peer, error) {
	p := f.peers[r].Load()
	if p == nil || !p.ready.Load() {
		return f.connectPeer(r)
	}
	return p, nil
}

// connectPeer connects rank r, or waits until the connection that another
// goroutine, or the peer itself, started is made. Concurrent callers share
// one connection attempt; a failed one is rank r's sticky error.
func (f *Fabric) connectPeer(r int) (*peer, error) {
	if r < 0 || r >= f.size {
		return nil, fmt.Errorf("transport: rank %d out of range [0,%d)", r, f.size)
	}
	c := f.ctxs[f.via[r]]
	f.connMu.Lock()
	p := f.peers[r].Load()
	if p == nil {
		if f.disconnected.Load() || c.cm == nil {
			f.connMu.Unlock()
			return nil, ErrClosed
		}
		var err error
		if p, err = f.newPeer(c, r); err != nil {
			f.connMu.Unlock()
			return nil, fmt.Errorf("transport: connecting to rank %d: %w", r, err)
		}
		p.outbound = true
		f.peers[r].Store(p)
		f.connMu.Unlock()
		err = c.cm.Dial(p.qp, c.listen[r], uint64(f.rank))
		if err == nil {
			f.conns.dialed.Add(1)
		}
		f.connMu.Lock()
		failed := f.connected(p, err)
		f.connMu.Unlock()
		if failed != nil {
			failed.Close()
		}
	} else {
		f.connMu.Unlock()
	}
	if !p.ready.Load() && p.connDone != nil {
		<-p.connDone // bounded: Dial and Accept are
	}
	if p.ready.Load() {
		return p, nil
	}
	if e := p.err.Load(); e != nil {
		return nil, *e
	}
	return nil, ErrClosed
}

// newPeer makes rank r's peer with a new queue pair of context c whose
// receives are posted (a peer may notify as soon as it is connected);
// f.connMu held.
func (f *Fabric) newPeer(c *pctx, r int) (*peer, error) {
	p := &peer{rank: r, c: c, ci: c.idx, connDone: make(chan struct{})}
	qp, err := f.newQP(c)
	if err != nil {
		return nil, err
	}
	p.qp = qp
	p.inlineMax = inlineSize(qp)
	p.errRep, _ = qp.(verbs.ErrorReporter)
	if pc, ok := qp.(verbs.PostCompleter); ok && c.atPost {
		p.inline = pc
	}
	if err := f.postRecvs(p, qp, recvDepth); err != nil {
		qp.Close()
		return nil, err
	}
	f.mu.Lock()
	c.byQPN[qp.Num()] = p
	f.mu.Unlock()
	return p, nil
}

// connected ends p's connection attempt: ready, or failed with err. It
// returns the queue pair to close (outside f.connMu) after a failure, whose
// flushed receives wake the waits that need the peer. f.connMu held.
func (f *Fabric) connected(p *peer, err error) verbs.QP {
	defer close(p.connDone)
	if err == nil {
		p.ready.Store(true)
		return nil
	}
	var e error
	if f.closed.Load() {
		e = fmt.Errorf("%w: connecting to rank %d: %w", ErrClosed, p.rank, err)
	} else {
		e = rankErr(p.rank, fmt.Errorf("connecting: %w", err))
	}
	if p.err.CompareAndSwap(nil, &e) && !f.closed.Load() {
		launch.NotifyPeerLost(p.rank)
	}
	return p.qp
}

// accept answers a peer's connection request (the provider's acceptor,
// run in a goroutine of its own): a new queue pair for a peer not yet
// contacted; the queue pair this rank is dialing the peer with when the
// peer's request wins the crossing (the peer is the lower rank); a
// refusal with verbs.ErrCrossed when this rank's own request wins. A
// request through a context (c) that does not serve the peer is refused.
func (f *Fabric) accept(c *pctx, req verbs.ConnRequest) {
	pr := req.Private()
	if pr >= uint64(f.size) || int(pr) == f.rank || f.via[pr] != c.idx {
		req.Refuse(nil)
		return
	}
	r := int(pr)
	f.connMu.Lock()
	if f.disconnected.Load() {
		f.connMu.Unlock()
		req.Refuse(verbs.ErrPeerClosed)
		return
	}
	p := f.peers[r].Load()
	switch {
	case p == nil:
		p, err := f.newPeer(c, r)
		if err != nil {
			f.connMu.Unlock()
			req.Refuse(nil)
			return
		}
		f.peers[r].Store(p)
		f.connMu.Unlock()
		err = req.Accept(p.qp)
		if err == nil {
			f.conns.accepted.Add(1)
		}
		f.connMu.Lock()
		failed := f.connected(p, err)
		f.connMu.Unlock()
		if failed != nil {
			failed.Close()
		}
	case p.outbound && p.err.Load() == nil && r > f.rank:
		f.connMu.Unlock()
		req.Refuse(verbs.ErrCrossed)
	case p.outbound && p.err.Load() == nil && !p.ready.Load():
		f.connMu.Unlock()
		if req.Accept(p.qp) == nil { // this rank's Dial takes it
			f.conns.handed.Add(1)
		}
	default:
		f.connMu.Unlock()
		req.Refuse(nil)
	}
}

// kick starts connecting rank r in the background, once; f.mu held.
func (f *Fabric) kick(r int) {
	if f.ctxs[f.via[r]].cm == nil || r == f.rank || f.kicked[r] || f.closed.Load() {
		return
	}
	f.kicked[r] = true
	go f.connectPeer(r)
}
