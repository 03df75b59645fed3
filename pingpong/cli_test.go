package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// -h prints the usage once and exits 0, for the command and every
// subcommand, alone and under rmarun (where only rank 0 prints it).
func TestHelpOnceExitZero(t *testing.T) {
	_, pp := binaries(t)
	for _, args := range [][]string{
		{"-h"}, {"help"}, {"-mode", "fence2", "-h"}, {"oneone", "-h"}, {"onemany", "-h"}, {"osu", "-h"},
		{"lat", "-h"}, {"plot", "-h"}, {"import", "-h"}, {"table", "-h"}, {"table", "--help"},
	} {
		cmd := exec.Command(pp, args...)
		cmd.Env = withoutRankEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("pingpong %v: %v, want exit status 0\n%s", args, err, out)
		}
		if n := strings.Count(string(out), "usage:"); n != 1 {
			t.Errorf("pingpong %v printed the usage %d times, want once:\n%s", args, n, out)
		}
		if strings.Contains(string(out), "help requested") {
			t.Errorf("pingpong %v reports -h as an error:\n%s", args, out)
		}
	}
	for _, args := range [][]string{{"-h"}, {"oneone", "-h"}} {
		out, err := runJob(t, 2, nil, args...)
		if err != nil {
			t.Errorf("rmarun -n 2 pingpong %v: %v, want exit status 0\n%s", args, err, out)
		}
		if n := strings.Count(out, "usage:"); n != 1 || !strings.Contains(out, "[0] usage:") {
			t.Errorf("rmarun -n 2 pingpong %v printed the usage %d times, want once from rank 0:\n%s", args, n, out)
		}
	}
}

// A bad flag or value is a usage error: exit status 2, said once.
func TestUsageErrorExitTwo(t *testing.T) {
	_, pp := binaries(t)
	for _, args := range [][]string{{"-bogus"}, {"table", "-bogus"}, {"import"}, {"-reps", "1"}, {"lat", "-ops", "put,bogus"}, {"-settle", "-1ms"}} {
		cmd := exec.Command(pp, args...)
		cmd.Env = withoutRankEnv()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("pingpong %v: %v, want exit status 2\n%s", args, err, out)
		}
		if n := strings.Count(string(out), "pingpong: "); n != 1 {
			t.Errorf("pingpong %v: the error said %d times, want once:\n%s", args, n, out)
		}
	}
}

// withoutRankEnv is the environment without the launchers' rank variables
// (a test run under a launcher must still see the usage).
func withoutRankEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(rankEnv, name)
	})
}

// The CSV starts with a header row naming every column, and every row has
// the header's number of columns.
func TestCSVHeader(t *testing.T) {
	results := []Result{
		{Bench: "oneone", Sync: "fence3", Ranks: 2, Elements: 1, Bytes: 8, Metric: MetricRTT, Samples: []float64{1.5, 2, 3}},
		{Bench: "oneone", Sync: "fence3", Ranks: 2, Elements: 2, Bytes: 16, Metric: MetricRTT, Samples: []float64{4, 5}},
	}
	var b bytes.Buffer
	if err := csvTo(&b, results); err != nil {
		t.Fatal(err)
	}
	want := "elements,ranks,rep1,rep2,rep3,bench,sync,bytes,metric\n" +
		"1,2,1.500000,2.000000,3.000000,oneone,fence3,8,rtt_us\n" +
		"2,2,4.000000,5.000000,,oneone,fence3,16,rtt_us\n"
	if b.String() != want {
		t.Errorf("CSV:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	osu := []Result{{Bench: "put_bw", Sync: "flush", Ranks: 2, Bytes: 64, Metric: MetricBW, Samples: []float64{11.5}}}
	if err := csvTo(&b, osu); err != nil {
		t.Fatal(err)
	}
	if want := "size,ranks,rep1,bench,sync,bytes,metric\n64,2,11.500000,put_bw,flush,64,bandwidth_MBps\n"; b.String() != want {
		t.Errorf("OSU CSV:\n%s\nwant:\n%s", b.String(), want)
	}

	// The file a real run writes.
	path := filepath.Join(t.TempDir(), "out.csv")
	rep := runJSON(t, 2, "-quick", "-mode", "fence2", "-csv", path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if lines[0] != "elements,ranks,rep1,rep2,rep3,bench,sync,bytes,metric" || len(lines) != 1+len(rep.Results) {
		t.Fatalf("CSV of a run (%d results):\n%s", len(rep.Results), data)
	}
	for _, l := range lines[1:] {
		if f := strings.Split(l, ","); len(f) != 9 || f[0] == "" || f[5] != "oneone" || f[6] != "fence2" || f[8] != MetricRTT {
			t.Errorf("CSV row %q", l)
		}
	}
}

// One repetition (the OSU-style default) prints one value column, not
// mean, min, median and max all equal; several print all four.
func TestOSUColumns(t *testing.T) {
	var b bytes.Buffer
	var last string
	printRow(&b, &Result{Bench: "put_latency", Sync: "flush", Window: "allocate", Ranks: 2, Bytes: 8, Metric: MetricLatency,
		Iters: 20, Reps: 1, Mean: 21.5, Min: 21.5, Median: 21.5, Max: 21.5}, &last)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[1]), " ") != "bytes latency_us iters" ||
		strings.Join(strings.Fields(lines[2]), " ") != "8 21.50 20" {
		t.Errorf("one repetition:\n%s", b.String())
	}

	b.Reset()
	last = ""
	printRow(&b, &Result{Bench: "put_bw", Sync: "flush", Window: "allocate", Ranks: 2, Bytes: 8, Metric: MetricBW,
		Iters: 20, Reps: 3, Mean: 2, Min: 1, Median: 2, Max: 3}, &last)
	lines = strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[1]), " ") != "bytes mean_MB/s min_MB/s median_MB/s max_MB/s iters" ||
		strings.Join(strings.Fields(lines[2]), " ") != "8 2.00 1.00 2.00 3.00 20" {
		t.Errorf("three repetitions:\n%s", b.String())
	}
}
