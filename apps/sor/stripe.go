package main

import "github.com/rmago/rmago/apps/internal/decomp"

// stripe is one rank's part of the grid: the rows [lo, hi), plus halo
// copies of the row above (lo-1) and below (hi) owned by the neighbours.
//
// The halos are double-buffered by phase parity: phase k reads top[k%2]
// and bot[k%2], which the neighbours fill with their boundary rows as they
// were at the end of phase k-1. A neighbour that runs ahead and already
// sends phase k+1's row writes the other buffer, so a fence variant needs
// one synchronization per phase, not two, and no rank ever writes a halo
// its owner is reading.
//
// Every variant but split keeps the whole stripe in one window, laid out
//
//	top[0] top[1] | rows lo..hi-1 | bot[0] bot[1]     ((h+4) rows of n)
//
// and split uses the same layout in one Go slice.
type stripe struct {
	n, lo, hi  int
	up, down   int // neighbour ranks; -1 at the grid's edges
	hUp, hDown int // the neighbours' heights, to address their windows
	omega      float64

	rows     []float64 // h rows of n
	top, bot [2][]float64
}

func newStripe(n, size, rank int, omega float64) *stripe {
	s := &stripe{n: n, up: -1, down: -1, omega: omega}
	s.lo, s.hi = decomp.Block(n, size, rank)
	if rank > 0 {
		s.up = rank - 1
		lo, hi := decomp.Block(n, size, s.up)
		s.hUp = hi - lo
	}
	if rank < size-1 {
		s.down = rank + 1
		lo, hi := decomp.Block(n, size, s.down)
		s.hDown = hi - lo
	}
	return s
}

// h is the stripe's height in rows.
func (s *stripe) h() int { return s.hi - s.lo }

// memLen is the length of the stripe's memory (halos included).
func (s *stripe) memLen() int { return (s.h() + 4) * s.n }

// Displacements, in elements, in a stripe's memory of height h.
func topDisp(n, p int) int    { return p * n }
func rowsDisp(n int) int      { return 2 * n }
func botDisp(n, h, p int) int { return (2 + h + p) * n }

// attach lays the stripe out in mem (memLen elements) and initializes its
// rows.
func (s *stripe) attach(mem []float64) {
	n, h := s.n, s.h()
	for p := range 2 {
		s.top[p] = mem[topDisp(n, p) : topDisp(n, p)+n]
		s.bot[p] = mem[botDisp(n, h, p) : botDisp(n, h, p)+n]
	}
	s.rows = mem[rowsDisp(n) : rowsDisp(n)+h*n]
	s.reset()
}

// reset sets the rows to the initial values (the halos are filled by the
// first exchange).
func (s *stripe) reset() {
	n := s.n
	for i := s.lo; i < s.hi; i++ {
		r := s.row(i)
		for j := range r {
			r[j] = initial(n, i, j)
		}
	}
}

// row is global row i, lo <= i < hi.
func (s *stripe) row(i int) []float64 { return s.rows[(i-s.lo)*s.n : (i-s.lo+1)*s.n] }

// first and last are the rows the neighbours need.
func (s *stripe) first() []float64 { return s.row(s.lo) }
func (s *stripe) last() []float64  { return s.row(s.hi - 1) }

// neighbours lists the neighbour ranks (0, 1 or 2 of them).
func (s *stripe) neighbours() []int {
	var g []int
	if s.up >= 0 {
		g = append(g, s.up)
	}
	if s.down >= 0 {
		g = append(g, s.down)
	}
	return g
}

// relax runs phase k on the stripe, its halos in place, and returns the
// largest change.
func (s *stripe) relax(k int) float64 {
	c, p := k%2, k%2
	var m float64
	for i := max(s.lo, 1); i < min(s.hi, s.n-1); i++ {
		up, down := s.top[p], s.bot[p]
		if i > s.lo {
			up = s.row(i - 1)
		}
		if i < s.hi-1 {
			down = s.row(i + 1)
		}
		m = max(m, relaxRow(up, s.row(i), down, i, c, s.omega))
	}
	return m
}
