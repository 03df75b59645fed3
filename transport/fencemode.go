package transport

import "github.com/rmago/rmago/internal/config"

// How the ranks agree on the form of a fence's first round (sync/fence:
// all-to-all, or gathered through rank 0). Both sides of every exchange
// must run the same form, so each rank says in its hello what it knows
// (RMAGO_FENCE, whether its node runs more ranks than cores, whether it
// reaches a peer through a provider that completes at post, whose fence
// notes are direct) and every rank decides the same from all the hellos.

// fenceHello fills this rank's part of the decision into h.
func (f *Fabric) fenceHello(h *hello, s config.Settings) {
	h.Fence = s.Fence
	h.Crowd = f.shareCores
	for r, ci := range f.via {
		if r != f.rank && f.ctxs[ci].atPost {
			h.AtPost = true
		}
	}
}

// decideFence decides from every rank's hello: never gathered where a rank
// reaches a peer at post (its notes are direct stores: sync/fence's
// direct.go); otherwise all if any rank asks for it, gather if any rank
// asks for it, and in auto gathered when some node runs more ranks than
// cores.
func (f *Fabric) decideFence(hellos []hello) {
	var all, gather, crowd, atPost bool
	for i := range hellos {
		h := &hellos[i]
		all = all || h.Fence == "all"
		gather = gather || h.Fence == "gather"
		crowd = crowd || h.Crowd
		atPost = atPost || h.AtPost
	}
	f.gatherFences = !atPost && !all && (gather || crowd)
	f.directAnywhere = atPost
}

// DirectNotesAnywhere reports whether some rank of the job reaches a peer
// through a provider that completes at post (shm), whose fence notes are
// then direct stores (sync/fence's direct.go): the same answer on every
// rank, decided in Open. From 8 ranks such a job keeps the fence's round
// one: a rank learns that a node-local peer left only through a queue
// pair to it, which a barrier's direct notes never open.
func (f *Fabric) DirectNotesAnywhere() bool { return f.directAnywhere }

// GatherFences reports whether the job's fences gather their first round
// through rank 0 (sync/fence's gather.go) rather than run it all-to-all:
// the same answer on every rank, decided in Open (RMAGO_FENCE).
func (f *Fabric) GatherFences() bool { return f.gatherFences }
