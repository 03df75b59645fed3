package decomp

import "testing"

func TestBlock(t *testing.T) {
	for n := 0; n < 40; n++ {
		for p := 1; p < 9; p++ {
			next := 0
			for r := range p {
				lo, hi := Block(n, p, r)
				if lo != next || hi < lo || hi-lo > n/p+1 || hi-lo < n/p {
					t.Fatalf("Block(%d, %d, %d) = [%d, %d), want start %d", n, p, r, lo, hi, next)
				}
				for i := lo; i < hi; i++ {
					if o := Owner(n, p, i); o != r {
						t.Fatalf("Owner(%d, %d, %d) = %d, want %d", n, p, i, o, r)
					}
				}
				next = hi
			}
			if next != n {
				t.Fatalf("Block(%d, %d, ·) covers [0, %d)", n, p, next)
			}
		}
	}
}

func TestDims2(t *testing.T) {
	for p, want := range map[int][2]int{1: {1, 1}, 2: {2, 1}, 3: {3, 1}, 4: {2, 2}, 6: {3, 2}, 8: {4, 2}, 9: {3, 3}, 12: {4, 3}} {
		if px, py := Dims2(p); px != want[0] || py != want[1] {
			t.Errorf("Dims2(%d) = %d×%d, want %d×%d", p, px, py, want[0], want[1])
		}
	}
}
