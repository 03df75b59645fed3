package main

import "math"

// problem is one SOR run: an n×n grid whose outer rows and columns are a
// fixed boundary, relaxed for at most iters iterations, stopping early
// once the largest change of an iteration (the residual) is below tol.
// The residual is reduced over the ranks every check iterations (and after
// the last), so the parallel and sequential runs stop after the same one.
type problem struct {
	n     int
	iters int
	check int
	tol   float64
	omega float64
}

// optimalOmega is the best over-relaxation factor for the model problem
// on an n×n grid.
func optimalOmega(n int) float64 { return 2 / (1 + math.Sin(math.Pi/float64(n-1))) }

// initial is point (i, j) of the grid before the first iteration: a hot
// top edge, a left edge cooling linearly downwards, the other edges cold,
// the interior zero.
func initial(n, i, j int) float64 {
	switch {
	case i == 0:
		return 1
	case j == 0:
		return 1 - float64(i)/float64(n-1)
	}
	return 0
}

// relaxRow over-relaxes the interior points of colour c ((i+j)%2 == c) of
// row, which is row i of the grid, from its neighbours in the rows up and
// down, and returns the largest change. The parallel and the sequential
// solvers both call it, so they do the same floating-point operations in
// the same order: their results are bit-identical.
func relaxRow(up, row, down []float64, i, c int, omega float64) float64 {
	n := len(row)
	// Interior points as equal-length slices: no bounds checks in the loop.
	mid := row[1 : n-1]
	l, r := row[0 : n-2][:len(mid)], row[2:n][:len(mid)]
	u, d := up[1 : n-1][:len(mid)], down[1 : n-1][:len(mid)]
	var m float64
	for k := (i + 1 + c) & 1; k < len(mid); k += 2 { // point (i, k+1)
		old := mid[k]
		v := old + omega*((u[k]+d[k]+l[k]+r[k])*0.25-old)
		mid[k] = v
		m = max(m, math.Abs(v-old))
	}
	return m
}

// iterate is the SOR loop shared by the sequential and the parallel
// solvers. An iteration is two phases, red (colour 0) then black; phase k
// of the run is relaxed by phase(k), which returns the largest change it
// made on this rank; reduce turns a rank's largest change of an iteration
// into the global one. It returns the iterations done and the last
// global residual.
func iterate(p problem, phase func(k int) (float64, error), reduce func(float64) (float64, error)) (int, float64, error) {
	resid := math.Inf(1)
	local := 0.0
	for it := 0; it < p.iters; it++ {
		for c := range 2 {
			d, err := phase(2*it + c)
			if err != nil {
				return it, resid, err
			}
			local = max(local, d)
		}
		if (it+1)%p.check != 0 && it != p.iters-1 {
			continue
		}
		var err error
		if resid, err = reduce(local); err != nil {
			return it, resid, err
		}
		local = 0
		if resid < p.tol {
			return it + 1, resid, nil
		}
	}
	return p.iters, resid, nil
}

// initGrid fills the n×n grid g with the initial values.
func initGrid(g []float64, n int) {
	for i := range n {
		for j := range n {
			g[i*n+j] = initial(n, i, j)
		}
	}
}

// sequential solves p on the whole grid g (n×n, initialized), on one core.
func sequential(p problem, g []float64) (int, float64) {
	n := p.n
	row := func(i int) []float64 { return g[i*n : (i+1)*n] }
	phase := func(k int) (float64, error) {
		var m float64
		for i := 1; i < n-1; i++ {
			m = max(m, relaxRow(row(i-1), row(i), row(i+1), i, k%2, p.omega))
		}
		return m, nil
	}
	it, resid, _ := iterate(p, phase, func(v float64) (float64, error) { return v, nil })
	return it, resid
}
