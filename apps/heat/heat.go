package main

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rmago/rmago/apps/internal/coll"
	"github.com/rmago/rmago/apps/internal/decomp"
	"github.com/rmago/rmago/apps/internal/strided"
	"github.com/rmago/rmago/rma"
)

// config is one run: steps explicit heat steps on an n×n grid whose outer
// ring is a fixed boundary.
type config struct {
	n     int
	steps int
	cols  string // "pack" or "vector": how columns travel
	reps  int    // runs from the initial grid; the best time counts
}

// kappa is the diffusion number of the explicit step (stable up to 1/4).
const kappa = 0.2

// initial is point (i, j) at time 0: the top edge held at 100, the rest 0.
func initial(n, i, j int) float64 {
	if i == 0 {
		return 100
	}
	return 0
}

// stepRow computes out[j] for j in [j0, j1) from the row mid and its
// neighbours up and down: one explicit step of the heat equation (a
// Jacobi sweep of the 5-point stencil). The parallel and sequential
// versions share it, so their results are bit-identical.
func stepRow(out, up, mid, down []float64, j0, j1 int) {
	// Slices of equal length let the compiler drop the bounds checks.
	o := out[j0:j1]
	u, d := up[j0:j1][:len(o)], down[j0:j1][:len(o)]
	l, c, r := mid[j0-1 : j1-1][:len(o)], mid[j0:j1][:len(o)], mid[j0+1 : j1+1][:len(o)]
	for j := range o {
		o[j] = c[j] + kappa*(u[j]+d[j]+l[j]+r[j]-4*c[j])
	}
}

// sequential runs the whole grid on one core; g (n×n) is initialized.
func sequential(cfg config, g []float64) {
	n := cfg.n
	h := make([]float64, len(g))
	copy(h, g)
	for range cfg.steps {
		for i := 1; i < n-1; i++ {
			stepRow(h[i*n:(i+1)*n], g[(i-1)*n:i*n], g[i*n:(i+1)*n], g[(i+1)*n:(i+2)*n], 1, n-1)
		}
		g, h = h, g
	}
	if cfg.steps%2 == 1 {
		copy(h, g) // the caller's slice gets the result
	}
}

// block is a rank's part of the grid: rows [r0, r1) and columns [c0, c1),
// with a halo of one point all round, in two copies (the step reads one
// and writes the other), all in one window laid out as
//
//	grid[0] | grid[1] | inLeft | inRight | outLeft | outRight
//
// Each grid is (bh+2) × (bw+2), row-major. A halo row is contiguous and is
// put straight into the neighbour's grid; a halo column is not: the
// sender packs it into outLeft/outRight, puts it into the neighbour's
// inRight/inLeft landing area, and the neighbour unpacks it after Wait
// (-cols pack); or it is put element by element (-cols vector).
type block struct {
	n              int
	r0, r1, c0, c1 int
	px, py         int // the rank grid
	up, down       int // neighbour ranks, -1 at the grid's edge
	left, right    int
	me             shape
	win            *rma.Window[float64]
	grid           [2][]float64
	in, out        [2][]float64 // [0] left, [1] right
	group          []int
	vector         bool
}

func (b *block) bh() int { return b.r1 - b.r0 }
func (b *block) bw() int { return b.c1 - b.c0 }

// stride is the length of a grid row, halos included.
func (b *block) stride() int { return b.bw() + 2 }

// shape is the size of a rank's block, which fixes its window's layout.
type shape struct{ bh, bw int }

func (d shape) gridLen() int         { return (d.bh + 2) * (d.bw + 2) }
func (d shape) gridDisp(p int) int   { return p * d.gridLen() }
func (d shape) inDisp(side int) int  { return 2*d.gridLen() + side*d.bh }
func (d shape) outDisp(side int) int { return 2*d.gridLen() + (2+side)*d.bh }
func (d shape) winLen() int          { return 2*d.gridLen() + 4*d.bh }

// shapeOf is rank r's block shape.
func (b *block) shapeOf(r int) shape {
	r0, r1 := decomp.Block(b.n, b.py, r/b.px)
	c0, c1 := decomp.Block(b.n, b.px, r%b.px)
	return shape{r1 - r0, c1 - c0}
}

func newBlock(w *rma.World, cfg config) (*block, error) {
	n := cfg.n
	px, py := decomp.Dims2(w.Size())
	cx, cy := w.Rank()%px, w.Rank()/px
	b := &block{n: n, px: px, py: py, up: -1, down: -1, left: -1, right: -1, vector: cfg.cols == "vector"}
	b.r0, b.r1 = decomp.Block(n, py, cy)
	b.c0, b.c1 = decomp.Block(n, px, cx)
	b.me = shape{b.bh(), b.bw()}
	if cy > 0 {
		b.up = w.Rank() - px
	}
	if cy < py-1 {
		b.down = w.Rank() + px
	}
	if cx > 0 {
		b.left = w.Rank() - 1
	}
	if cx < px-1 {
		b.right = w.Rank() + 1
	}
	for _, r := range []int{b.up, b.down, b.left, b.right} {
		if r >= 0 {
			b.group = append(b.group, r)
		}
	}
	win, err := rma.Allocate[float64](w, b.me.winLen())
	if err != nil {
		return nil, err
	}
	b.win = win
	mem, d := win.Local(), b.me
	for p := range 2 {
		b.grid[p] = mem[d.gridDisp(p) : d.gridDisp(p)+d.gridLen()]
		b.in[p] = mem[d.inDisp(p) : d.inDisp(p)+d.bh]
		b.out[p] = mem[d.outDisp(p) : d.outDisp(p)+d.bh]
	}
	b.reset()
	return b, nil
}

// reset sets both grid copies to the initial values, halos included
// where they are the grid's fixed boundary.
func (b *block) reset() {
	for p := range 2 {
		for i := b.r0 - 1; i <= b.r1; i++ {
			for j := b.c0 - 1; j <= b.c1; j++ {
				if i >= 0 && i < b.n && j >= 0 && j < b.n {
					b.grid[p][b.at(i, j)] = initial(b.n, i, j)
				}
			}
		}
	}
}

// at is the index of global point (i, j) in a grid copy.
func (b *block) at(i, j int) int { return (i-b.r0+1)*b.stride() + j - b.c0 + 1 }

// exchange fills the halos of grid copy p from the neighbours.
func (b *block) exchange(p int) error {
	if len(b.group) == 0 {
		return nil
	}
	win, g, s, bh, bw := b.win, b.grid[p], b.stride(), b.bh(), b.bw()
	if err := win.Post(b.group, 0); err != nil {
		return err
	}
	if err := win.Start(b.group, 0); err != nil {
		return err
	}
	if b.up >= 0 { // my first row becomes its bottom halo row
		first := g[b.at(b.r0, b.c0) : b.at(b.r0, b.c0)+bw]
		t := b.shapeOf(b.up)
		if err := win.Put(first, b.up, t.gridDisp(p)+(t.bh+1)*s+1); err != nil {
			return err
		}
	}
	if b.down >= 0 { // my last row becomes its top halo row
		last := g[b.at(b.r1-1, b.c0) : b.at(b.r1-1, b.c0)+bw]
		if err := win.Put(last, b.down, b.shapeOf(b.down).gridDisp(p)+1); err != nil {
			return err
		}
	}
	for side, t := range []int{b.left, b.right} {
		if t < 0 {
			continue
		}
		col := b.c0 // my first column becomes the left neighbour's right halo
		if side == 1 {
			col = b.c1 - 1
		}
		ts := b.shapeOf(t)
		if b.vector {
			tcol := ts.bw + 1 // the left neighbour's right halo column
			if side == 1 {
				tcol = 0
			}
			if err := strided.PutVector(win, g, b.at(b.r0, col), s, bh, t, ts.gridDisp(p)+(ts.bw+2)+tcol, ts.bw+2); err != nil {
				return err
			}
			continue
		}
		strided.Pack(b.out[side], g, b.at(b.r0, col), s, bh)
		if err := win.Put(b.out[side], t, ts.inDisp(1-side)); err != nil {
			return err
		}
	}
	if err := win.Complete(); err != nil {
		return err
	}
	if err := win.Wait(); err != nil {
		return err
	}
	if !b.vector {
		if b.left >= 0 {
			strided.Unpack(g, b.at(b.r0, b.c0-1), s, b.in[0])
		}
		if b.right >= 0 {
			strided.Unpack(g, b.at(b.r0, b.c1), s, b.in[1])
		}
	}
	return nil
}

// step computes copy 1-p from copy p on the block's interior points (the
// grid's boundary stays fixed).
func (b *block) step(p int) {
	src, dst, s := b.grid[p], b.grid[1-p], b.stride()
	j0, j1 := max(b.c0, 1), min(b.c1, b.n-1)
	if j0 >= j1 {
		return
	}
	for i := max(b.r0, 1); i < min(b.r1, b.n-1); i++ {
		k := b.at(i, b.c0-1) // start of the row, halo included
		row := func(g []float64, d int) []float64 { return g[k+d*s : k+d*s+s] }
		stepRow(row(dst, 0), row(src, -1), row(src, 0), row(src, 1), j0-b.c0+1, j1-b.c0+1)
	}
}

// outcome is what a rank learns from a run.
type outcome struct {
	elapsed, seq time.Duration
	verified     bool
	why          string
}

// run does cfg.steps steps on every rank of w and verifies the result bit
// for bit against the sequential run on rank 0. It is collective.
func run(w *rma.World, cfg config) (outcome, error) {
	var out outcome
	if cfg.cols != "pack" && cfg.cols != "vector" {
		return out, fmt.Errorf("-cols %q: pack or vector", cfg.cols)
	}
	px, py := decomp.Dims2(w.Size())
	if cfg.n < 3 || cfg.n < px || cfg.n < py || cfg.steps < 0 {
		return out, fmt.Errorf("n = %d too small for a %d×%d rank grid", cfg.n, px, py)
	}
	red, err := coll.NewReducer[float64](w, 2)
	if err != nil {
		return out, err
	}
	defer red.Free()
	b, err := newBlock(w, cfg)
	if err != nil {
		return out, err
	}
	for rep := range max(cfg.reps, 1) {
		if rep > 0 {
			b.reset()
		}
		if err := w.Barrier(); err != nil {
			return out, err
		}
		start := time.Now()
		for t := range cfg.steps {
			if err := b.exchange(t % 2); err != nil {
				return out, err
			}
			b.step(t % 2)
		}
		slowest, err := red.Max(time.Since(start).Seconds())
		if err != nil {
			return out, err
		}
		if d := time.Duration(slowest * float64(time.Second)); rep == 0 || d < out.elapsed {
			out.elapsed = d
		}
	}
	if err := b.verify(w, cfg, red, &out); err != nil {
		return out, err
	}
	return out, b.win.Free()
}

// verify runs the sequential version on rank 0 in a window of the whole
// grid; every rank gets its block's rows from it and compares.
func (b *block) verify(w *rma.World, cfg config, red *coll.Reducer[float64], out *outcome) error {
	n := cfg.n
	whole := 0
	if w.Rank() == 0 {
		whole = n * n
	}
	ref, err := rma.Allocate[float64](w, whole)
	if err != nil {
		return err
	}
	var seq float64
	if w.Rank() == 0 {
		g := ref.Local()
		for rep := range max(cfg.reps, 1) {
			for i := range n {
				for j := range n {
					g[i*n+j] = initial(n, i, j)
				}
			}
			start := time.Now()
			sequential(cfg, g)
			if d := time.Since(start).Seconds(); rep == 0 || d < seq {
				seq = d
			}
		}
	}
	if err := ref.Fence(0); err != nil {
		return err
	}
	mine := make([]float64, b.bh()*b.bw())
	for i := b.r0; i < b.r1; i++ {
		k := (i - b.r0) * b.bw()
		if err := ref.Get(mine[k:k+b.bw()], 0, i*n+b.c0); err != nil {
			return err
		}
	}
	if err := ref.Fence(rma.NoSucceed); err != nil {
		return err
	}
	final := b.grid[cfg.steps%2]
	bad := 0
	for i := b.r0; i < b.r1; i++ {
		for j := b.c0; j < b.c1; j++ {
			got, want := final[b.at(i, j)], mine[(i-b.r0)*b.bw()+j-b.c0]
			if math.Float64bits(got) != math.Float64bits(want) {
				if bad == 0 {
					out.why = fmt.Sprintf("rank %d: point (%d, %d) = %v, sequential %v", w.Rank(), i, j, got, want)
				}
				bad++
			}
		}
	}
	sums, err := red.Allreduce([]float64{float64(bad), seq}, coll.Sum[float64])
	if err != nil {
		return err
	}
	out.seq = time.Duration(sums[1] * float64(time.Second))
	if sums[0] > 0 && out.why == "" {
		out.why = fmt.Sprintf("%v points differ on other ranks", sums[0])
	}
	out.verified = sums[0] == 0
	return errors.Join(ref.Free())
}
