package rma

import (
	"slices"
	"sync/atomic"

	"github.com/rmago/rmago/transport"
)

// stageSize is the registered bounce buffer for origin slices that lie
// outside every window: Put copies them in, Get lands in it and is copied
// out once complete. Larger transfers go through it in pieces.
const stageSize = 4 << 20

// stager is a ring allocator over the bounce buffer. Pieces are released in
// the order they were taken, each once its request has completed.
type stager struct {
	w    *World
	reg  *transport.Region
	head int // next free byte
	used int // bytes in flight
	fifo []staged
	// pieces is len(fifo), for a look without World.stageMu
	// (World.drainStage: nothing to drain, the common case).
	pieces atomic.Int32
}

// staged is a piece of the bounce buffer in flight.
type staged struct {
	off, n int
	rank   int
	seq    uint64
	dst    []byte // Get: where the data goes once it has landed
	pad    int    // bytes skipped at the ring's end before this piece
	taken  bool   // a put whose payload the provider took at post: no wait
}

func newStager(w *World) (*stager, error) {
	reg, err := w.f.AllocRegion(stageSize, transport.AllAccess)
	if err != nil {
		return nil, err
	}
	return &stager{w: w, reg: reg, fifo: make([]staged, 0, 64)}, nil
}

func (s *stager) free() {
	s.reg.Close()
}

// take reserves n contiguous bytes (n <= stageSize/2), completing the
// oldest pieces as needed. The stager's methods run under World.stageMu.
func (s *stager) take(n int) (off int, pad int, err error) {
	for {
		pad, off = 0, s.head
		if s.head+n > stageSize { // wrap: skip the ring's tail end
			pad, off = stageSize-s.head, 0
		}
		if s.used+pad+n <= stageSize {
			s.head = off + n
			s.used += pad + n
			return off, pad, nil
		}
		if err := s.retire(); err != nil {
			return 0, 0, err
		}
	}
}

// retire completes the oldest piece: waits for its request and copies Get
// data out.
func (s *stager) retire() error {
	p := s.fifo[0]
	var err error
	if !p.taken {
		err = s.w.f.Await(p.rank, p.seq)
	}
	if err == nil && p.dst != nil {
		copy(p.dst, s.reg.Bytes()[p.off:p.off+p.n])
	}
	s.used -= p.pad + p.n
	copy(s.fifo, s.fifo[1:])
	s.fifo = s.fifo[:len(s.fifo)-1]
	s.pieces.Store(int32(len(s.fifo)))
	if len(s.fifo) == 0 {
		s.head, s.used = 0, 0
	}
	return err
}

// push records a piece in flight.
func (s *stager) push(p staged) {
	s.fifo = append(s.fifo, p)
	s.pieces.Store(int32(len(s.fifo)))
}

// drain completes every piece in flight.
func (s *stager) drain() error {
	var first error
	for len(s.fifo) > 0 {
		if err := s.retire(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// put sends b to remote at rank r through the bounce buffer and returns
// the last request's sequence number.
func (s *stager) put(r int, b []byte, remote transport.Remote) (last uint64, err error) {
	for len(b) > 0 {
		n := min(len(b), stageSize/2)
		off, pad, err := s.take(n)
		if err != nil {
			return 0, err
		}
		copy(s.reg.Bytes()[off:off+n], b[:n])
		seq, err := s.w.f.Write(r, s.local(off), remote, uint32(n))
		if err != nil {
			s.used -= pad + n
			return 0, err
		}
		switch {
		case !s.w.f.CopiesPayload(r):
			s.push(staged{off: off, n: n, rank: r, seq: seq, pad: pad})
		case len(s.fifo) == 0:
			// The provider took the bytes at post and nothing else is in
			// flight: the ring is empty again.
			s.head, s.used = 0, 0
		default:
			// Taken at post, but pieces are released in order: this one
			// goes with the older ones, without a wait of its own.
			s.push(staged{off: off, n: n, rank: r, seq: seq, pad: pad, taken: true})
		}
		b = b[n:]
		remote.Addr += uint64(n)
		last = seq
	}
	return last, nil
}

// get reads remote at rank r into b through the bounce buffer; b is
// filled when the pieces retire (at the latest, at the next synchronization).
func (s *stager) get(r int, b []byte, remote transport.Remote) (last uint64, err error) {
	for len(b) > 0 {
		n := min(len(b), stageSize/2)
		off, pad, err := s.take(n)
		if err != nil {
			return 0, err
		}
		seq, err := s.w.f.Read(r, s.local(off), remote, uint32(n))
		if err != nil {
			s.used -= pad + n
			return 0, err
		}
		s.push(staged{off: off, n: n, rank: r, seq: seq, dst: b[:n], pad: pad})
		b = b[n:]
		remote.Addr += uint64(n)
		last = seq
	}
	return last, nil
}

// retireThrough retires pieces in order until the one of request (r, seq)
// has been retired (Get data copied out).
func (s *stager) retireThrough(r int, seq uint64) error {
	for {
		i := slices.IndexFunc(s.fifo, func(p staged) bool { return p.rank == r && p.seq >= seq })
		if i < 0 {
			return nil // already retired
		}
		if err := s.retire(); err != nil {
			return err
		}
	}
}

func (s *stager) local(off int) transport.Local {
	return s.reg.Local(off)
}

// postStaged posts a put or get of b, which lies outside registered memory,
// through the bounce buffers, recording its sequence number in req (and,
// for a get, that the data still has to be copied out of the stage).
func (w *World) postStaged(put bool, req *Request, b []byte, remote transport.Remote) error {
	w.stageMu.Lock()
	defer w.stageMu.Unlock()
	var err error
	if put {
		req.seq, err = w.stage.put(req.rank, b, remote)
	} else {
		req.seq, err = w.stage.get(req.rank, b, remote)
		req.staged = true
	}
	return err
}
