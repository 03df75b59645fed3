package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// records builds what rank 0's window holds after every rank of a job of
// size ranks put its record, rank r on host ips[r].
func records(size int, ips []uint32) []uint64 {
	recs := make([]uint64, fields*size)
	for r := range size {
		recs[fields*r+fRank] = uint64(r)
		recs[fields*r+fSize] = uint64(size)
		recs[fields*r+fAddr] = uint64(ips[r])
		recs[fields*r+fInitMicros] = uint64(1000 * (r + 1))
	}
	return recs
}

func TestReport(t *testing.T) {
	const h1, h2, h3 = 0x0a4d0001, 0x0a4d0002, 0x0a4d0003 // 10.77.0.1..3
	three := []uint32{h1, h2, h3}
	cases := []struct {
		name       string
		recs       []uint64
		size       int
		wantSize   int
		wantHosts  int
		wantErrSub string // or, on success, the output
	}{
		{"ok", records(3, three), 3, 3, 3,
			"joincheck: ok size=3 hosts=10.77.0.1,10.77.0.2,10.77.0.3\njoincheck: init slowest 3ms (rank 2)\n"},
		{"any size and hosts", records(3, []uint32{h1, h1, h2}), 3, 0, 0,
			"joincheck: ok size=3 hosts=10.77.0.1,10.77.0.2\njoincheck: init slowest 3ms (rank 2)\n"},
		{"too few hosts", records(3, []uint32{h1, h1, h2}), 3, 0, 3, "the ranks run on 2 hosts (10.77.0.1,10.77.0.2), want 3"},
		{"wrong size", records(3, three), 3, 4, 0, "the job has 3 ranks, want 4"},
		{"slot not written", append(records(2, three), 0, 0, 0, 0), 3, 0, 0, "slot 0 holds rank 0 of size 2, want rank 0 of size 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			err := report(&out, c.recs, c.size, c.wantSize, c.wantHosts)
			if strings.HasPrefix(c.wantErrSub, "joincheck: ok") {
				if err != nil || out.String() != c.wantErrSub {
					t.Fatalf("report: %v, printed %q, want %q", err, out.String(), c.wantErrSub)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErrSub) {
				t.Fatalf("report: error %v, want one containing %q", err, c.wantErrSub)
			}
		})
	}
}

// TestRun: three ranks in one process (on one host) put their records
// into rank 0's window; rank 0 finds them all and prints the result.
func TestRun(t *testing.T) {
	var out strings.Builder
	errs := rmatest.Start(3, func(w *rma.World) error {
		return run(w, &out, time.Millisecond, 3, 1)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "joincheck: ok size=3 hosts=") || strings.Contains(lines[0], ",") ||
		!strings.HasPrefix(lines[1], "joincheck: init slowest 1ms (rank ") {
		t.Fatalf("printed %q", out.String())
	}
}
