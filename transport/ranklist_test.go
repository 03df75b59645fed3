package transport

import "testing"

// TestRankList: one rank, several, and a long list cut short.
func TestRankList(t *testing.T) {
	long := make([]int, 20)
	for i := range long {
		long[i] = i
	}
	for _, c := range []struct {
		ranks []int
		want  string
	}{
		{[]int{3}, "rank 3"},
		{[]int{1, 5}, "ranks [1 5]"},
		{long, "ranks [0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15] (+4 more)"},
	} {
		if got := RankList(c.ranks); got != c.want {
			t.Errorf("RankList(%v) = %q, want %q", c.ranks, got, c.want)
		}
	}
}
