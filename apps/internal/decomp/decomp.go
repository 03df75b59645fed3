// Package decomp splits index ranges and process grids among ranks, the
// data decompositions every app of apps/ uses.
package decomp

// Block returns the part [lo, hi) of n items that rank r of p owns: p
// contiguous blocks in rank order, the first n%p of them one item longer,
// so heights differ by at most one.
func Block(n, p, r int) (lo, hi int) {
	q, rem := n/p, n%p
	lo = r*q + min(r, rem)
	hi = lo + q
	if r < rem {
		hi++
	}
	return lo, hi
}

// Owner returns the rank that owns item i under Block(n, p, ·).
func Owner(n, p, i int) int {
	q, rem := n/p, n%p
	if i < rem*(q+1) {
		return i / (q + 1)
	}
	return rem + (i-rem*(q+1))/q
}

// Dims2 factors p ranks into a px × py grid (px*py == p) as close to square
// as possible, px >= py: 4 → 2×2, 6 → 3×2, 2 → 2×1, a prime → p×1.
func Dims2(p int) (px, py int) {
	py = 1
	for d := 1; d*d <= p; d++ {
		if p%d == 0 {
			py = d
		}
	}
	return p / py, py
}
