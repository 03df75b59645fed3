//go:build unix

package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseHostList(t *testing.T) {
	got, err := parseHostList("a:2,b, a ,c:3")
	if err != nil {
		t.Fatal(err)
	}
	want := []hostSpec{{name: "a", slots: 3}, {name: "b", slots: 1}, {name: "c", slots: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "a,,b", "a:0", "a:x", "-oProxyCommand=x", "a;b", "a:-1"} {
		if _, err := parseHostList(bad); err == nil {
			t.Errorf("parseHostList(%q): no error", bad)
		}
	}
}

func TestParseHostfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	text := `# the cluster
n1 slots=2 max_slots=4   # Open MPI style
n2:3
n3
n4 addr=10.1.2.3 slots=1

n1
`
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := parseHostfile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []hostSpec{{name: "n1", slots: 3}, {name: "n2", slots: 3}, {name: "n3", slots: 1}, {name: "n4", slots: 1, addr: "10.1.2.3"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}

	for text, msg := range map[string]string{
		"n1 slots=0\n":     ":1: bad slots",
		"n1\nn2 cpus=4\n":  ":2: unknown setting",
		"n1 addr=n2\n":     ":1: addr=\"n2\" is not an IP address",
		"n1 slots\n":       ":1: \"slots\" is not key=value",
		"# nothing\n\n":    "no hosts",
		"-n1\n":            ":1: host name \"-n1\" starts with '-'",
		"n1:2:3\n":         ":1: bad slot count",
		"n1 max_slots=x\n": ":1: bad max_slots",
	} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := parseHostfile(path); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("hostfile %q: error %v, want one containing %q", text, err, msg)
		}
	}
}

func TestMapRanks(t *testing.T) {
	hosts := []hostSpec{{name: "a", slots: 2}, {name: "b", slots: 1}, {name: "c", slots: 2}}
	for _, tc := range []struct {
		n    int
		over bool
		want [][]int
	}{
		{1, false, [][]int{{0}, nil, nil}},
		{3, false, [][]int{{0, 1}, {2}, nil}},
		{5, false, [][]int{{0, 1}, {2}, {3, 4}}},
		{8, true, [][]int{{0, 1, 5}, {2, 6}, {3, 4, 7}}},
	} {
		got, err := mapRanks(hosts, tc.n, tc.over)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("mapRanks(%d, %v) = %v, %v; want %v", tc.n, tc.over, got, err, tc.want)
		}
	}
	if _, err := mapRanks(hosts, 6, false); err == nil || !strings.Contains(err.Error(), "6 ranks do not fit in the 5 slots") {
		t.Errorf("6 ranks in 5 slots: %v", err)
	}
	if _, err := mapRanks([]hostSpec{{name: "a", slots: 1}}, maxRanksPerHost+1, true); err == nil {
		t.Errorf("%d ranks on one host: no error", maxRanksPerHost+1)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/rmarun":    "/usr/bin/rmarun",
		"/tmp/a b/rmarun":    "'/tmp/a b/rmarun'",
		"/tmp/it's/rmarun":   `'/tmp/it'\''s/rmarun'`,
		"":                   "''",
		"/x/$(reboot)/;rm":   "'/x/$(reboot)/;rm'",
		"/opt/rmago-1.0/bin": "/opt/rmago-1.0/bin",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestExitMessageRoundTrip(t *testing.T) {
	for _, e := range []exitInfo{
		{When: 123456789, Code: 3, Init: initJoined},
		{When: 1, Code: -1, Signal: 9, Stopped: true},
		{When: 2, Code: -1, StartErr: "exec: \"x\": not found\nreally"},
		{When: 3, Code: -1, Lost: "gone"},
	} {
		line := encodeExit(7, e)
		rank, got, err := decodeExit(strings.TrimSuffix(strings.TrimPrefix(line, "X "), "\n"))
		want := e
		want.StartErr = strings.ReplaceAll(want.StartErr, "\n", " ")
		if err != nil || rank != 7 || got != want {
			t.Errorf("%q: decoded rank %d %+v, %v; want %+v", line, rank, got, err, want)
		}
	}
}
