package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/rmago/rmago/apps/internal/coll"
	"github.com/rmago/rmago/apps/internal/decomp"
	"github.com/rmago/rmago/rma"
)

// config is one run: transpose an n×n matrix reps times.
type config struct {
	n    int
	reps int
	mode string // "blocks" or "rows"
}

// elem is A[i][j]: distinct and exact in a float64 for n up to 2^26.
func elem(n, i, j int) float64 { return float64(i*n + j) }

// outcome is what a rank learns from a run.
type outcome struct {
	elapsed  time.Duration // all repetitions, the slowest rank's
	seq      time.Duration // all repetitions, sequential on rank 0
	verified bool
	why      string
}

// part is a rank's share: rows [lo, hi) of A, and the same rows of B = Aᵀ.
type part struct {
	n, size, me int
	lo, hi      int
	a, b        []float64 // h×n each
}

func (p *part) h() int { return p.hi - p.lo }

// block returns rank r's rows [lo, hi).
func (p *part) block(r int) (int, int) { return decomp.Block(p.n, p.size, r) }

// transposer moves the data of one transpose: after run, p.b = (Aᵀ)'s rows.
type transposer interface {
	run() error
	free() error
}

// blocks: the all-to-all of a distributed FFT. Each rank packs, for every
// destination r, the block A[lo:hi][lo_r:hi_r] transposed (so it is a
// contiguous h_r × h piece of B's rows), into its send window at offset
// h*lo_r; one fence; each rank gets its piece from every other rank with
// one Get (into registered memory: no copy) and copies its own; a second
// fence completes the gets; each rank unpacks the pieces into B's rows.
type blocks struct {
	p          *part
	send, recv *rma.Window[float64]
}

func newBlocks(w *rma.World, p *part) (transposer, error) {
	send, err := rma.Allocate[float64](w, p.h()*p.n)
	if err != nil {
		return nil, err
	}
	// recv is never accessed remotely: it is a window only to be
	// registered memory, which Get fills without a bounce buffer.
	recv, err := rma.Allocate[float64](w, p.h()*p.n)
	if err != nil {
		return nil, err
	}
	return &blocks{p: p, send: send, recv: recv}, nil
}

func (t *blocks) run() error {
	p, n, h := t.p, t.p.n, t.p.h()
	buf := t.send.Local()
	for r := range p.size {
		lo, hi := p.block(r)
		// piece = A[:, lo:hi]ᵀ: (hi-lo) rows of h
		transposeTiles(buf[h*lo:h*hi], h, p.a[lo:], n, h, hi-lo)
	}
	// The packing (local stores) precedes every rank's gets.
	if err := t.send.Fence(rma.NoPrecede); err != nil {
		return err
	}
	in := t.recv.Local()
	for s := range p.size {
		lo, hi := p.block(s)
		if s == p.me {
			// My own piece needs no fabric (a get from oneself would go
			// through the provider's loopback connection).
			copy(in[h*lo:h*hi], buf[h*p.lo:h*p.hi])
			continue
		}
		if err := t.send.Get(in[h*lo:h*hi], s, (hi-lo)*p.lo); err != nil {
			return err
		}
	}
	if err := t.send.Fence(rma.NoSucceed); err != nil {
		return err
	}
	for s := range p.size {
		lo, hi := p.block(s)
		hs := hi - lo
		piece := in[h*lo : h*hi] // h rows of hs
		for i := range h {
			copy(p.b[i*n+lo:i*n+hi], piece[i*hs:(i+1)*hs])
		}
	}
	return nil
}

func (t *blocks) free() error { return errors.Join(t.send.Free(), t.recv.Free()) }

// rows: no packing. A itself is the window; each rank gets the part
// A[j][lo:hi] of every row j of the matrix, n gets of h elements (a
// column block of A, i.e. h rows of B, transposed locally after the
// fence). Many small transfers instead of size large ones.
type rows struct {
	p    *part
	a    *rma.Window[float64]
	recv *rma.Window[float64]
}

func newRows(w *rma.World, p *part) (transposer, error) {
	a, err := rma.Allocate[float64](w, p.h()*p.n)
	if err != nil {
		return nil, err
	}
	copy(a.Local(), p.a)
	p.a = a.Local()
	recv, err := rma.Allocate[float64](w, p.h()*p.n)
	if err != nil {
		return nil, err
	}
	return &rows{p: p, a: a, recv: recv}, nil
}

func (t *rows) run() error {
	p, n, h := t.p, t.p.n, t.p.h()
	if err := t.a.Fence(rma.NoPrecede); err != nil {
		return err
	}
	in := t.recv.Local() // n rows of h: A[:, lo:hi]
	for s := range p.size {
		lo, hi := p.block(s)
		for j := lo; j < hi; j++ {
			if err := t.a.Get(in[j*h:(j+1)*h], s, (j-lo)*n+p.lo); err != nil {
				return err
			}
		}
	}
	if err := t.a.Fence(rma.NoSucceed); err != nil {
		return err
	}
	transposeTiles(p.b, n, in, h, n, h)
	return nil
}

func (t *rows) free() error { return errors.Join(t.a.Free(), t.recv.Free()) }

var modes = map[string]func(*rma.World, *part) (transposer, error){"blocks": newBlocks, "rows": newRows}

// run transposes cfg.reps times on every rank of w and verifies B against
// the definition and the sequential transpose's time. It is collective.
func run(w *rma.World, cfg config) (outcome, error) {
	var out outcome
	mk, ok := modes[cfg.mode]
	if !ok {
		return out, fmt.Errorf("unknown mode %q (blocks or rows)", cfg.mode)
	}
	if cfg.n < w.Size() || cfg.reps < 1 {
		return out, fmt.Errorf("need n >= ranks and reps >= 1")
	}
	red, err := coll.NewReducer[float64](w, 2)
	if err != nil {
		return out, err
	}
	defer red.Free()
	p := &part{n: cfg.n, size: w.Size(), me: w.Rank()}
	p.lo, p.hi = decomp.Block(p.n, p.size, p.me)
	p.a = make([]float64, p.h()*p.n)
	p.b = make([]float64, p.h()*p.n)
	for i := p.lo; i < p.hi; i++ {
		for j := range p.n {
			p.a[(i-p.lo)*p.n+j] = elem(p.n, i, j)
		}
	}
	t, err := mk(w, p)
	if err != nil {
		return out, err
	}
	if err := w.Barrier(); err != nil {
		return out, err
	}
	start := time.Now()
	for range cfg.reps {
		if err := t.run(); err != nil {
			return out, err
		}
	}
	slowest, err := red.Max(time.Since(start).Seconds())
	if err != nil {
		return out, err
	}
	out.elapsed = time.Duration(slowest * float64(time.Second))

	bad, first := 0, -1
	for k, v := range p.b {
		i, j := p.lo+k/p.n, k%p.n
		if v != elem(p.n, j, i) {
			if first < 0 {
				first = k
			}
			bad++
		}
	}
	if bad > 0 {
		i, j := p.lo+first/p.n, first%p.n
		out.why = fmt.Sprintf("rank %d: %d elements wrong, first B[%d][%d] = %v, want %v", p.me, bad, i, j, p.b[first], elem(p.n, j, i))
	}
	var seq float64
	if p.me == 0 {
		seq = sequential(cfg).Seconds()
	}
	sums, err := red.Allreduce([]float64{float64(bad), seq}, coll.Sum[float64])
	if err != nil {
		return out, err
	}
	out.seq = time.Duration(sums[1] * float64(time.Second))
	if sums[0] > 0 && out.why == "" {
		out.why = fmt.Sprintf("%v elements wrong on other ranks", sums[0])
	}
	out.verified = sums[0] == 0
	return out, t.free()
}

// sequential times the transpose of the whole matrix on one core, reps
// times, and checks it.
func sequential(cfg config) time.Duration {
	n := cfg.n
	a := make([]float64, n*n)
	b := make([]float64, n*n)
	for i := range n {
		for j := range n {
			a[i*n+j] = elem(n, i, j)
		}
	}
	start := time.Now()
	for range cfg.reps {
		transposeSeq(b, a, n)
	}
	d := time.Since(start)
	if b[n-1] != elem(n, n-1, 0) {
		panic("sequential transpose is wrong")
	}
	return d
}

// transposeSeq sets b = aᵀ (n×n).
func transposeSeq(b, a []float64, n int) { transposeTiles(b, n, a, n, n, n) }

// transposeTiles sets dst[i][j] = src[j][i] for i < rows, j < cols, where
// dst's rows are dstStride apart and src's srcStride apart. It goes in
// 32×32 tiles, so that both matrices are walked in cache-sized pieces.
func transposeTiles(dst []float64, dstStride int, src []float64, srcStride, cols, rows int) {
	const tile = 32
	for ii := 0; ii < rows; ii += tile {
		for jj := 0; jj < cols; jj += tile {
			for i := ii; i < min(ii+tile, rows); i++ {
				out := dst[i*dstStride:]
				for j := jj; j < min(jj+tile, cols); j++ {
					out[j] = src[j*srcStride+i]
				}
			}
		}
	}
}
