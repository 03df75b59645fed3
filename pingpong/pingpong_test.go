package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	json "github.com/goccy/go-json"
)

// The tests build rmarun and pingpong and run every subcommand as separate
// processes on the soft provider in -quick mode; they check the output's
// structure and that the data was verified, never timings.

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) (rmarun, pingpong string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "pingpong-test")
		if buildErr != nil {
			return
		}
		gobin := "go" // go test puts its own toolchain first in PATH
		for pkg, name := range map[string]string{"../cmd/rmarun": "rmarun", ".": "pingpong"} {
			cmd := exec.Command(gobin, "build", "-o", filepath.Join(binDir, name), pkg)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = &buildError{pkg, err, out}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "rmarun"), filepath.Join(binDir, "pingpong")
}

type buildError struct {
	pkg string
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build " + e.pkg + ": " + e.err.Error() + "\n" + string(e.out)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// runJob runs pingpong under rmarun with n ranks and returns its output.
func runJob(t *testing.T, n int, env []string, args ...string) (string, error) {
	t.Helper()
	rmarun, pp := binaries(t)
	cmd := exec.Command(rmarun, append([]string{"-n", itoa(n), "-provider", "soft", "-timeout", "2m", pp}, args...)...)
	cmd.Env = append(os.Environ(), "RMAGO_TIMEOUT=60s")
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func itoa(n int) string { return strconv.Itoa(n) }

// runJSON runs a job that must succeed and returns its parsed JSON report.
func runJSON(t *testing.T, n int, args ...string) *Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out.json")
	out, err := runJob(t, n, nil, append(args, "-json", path)...)
	if err != nil {
		t.Fatalf("pingpong %v: %v\n%s", args, err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("JSON does not parse: %v\n%s", err, b)
	}
	m := rep.Meta
	if m.System == "" || m.Library != "rmago" || m.Provider != "soft" || m.Device == "" || m.Ranks != n ||
		m.Host == "" || m.GoVersion == "" || m.Time == "" {
		t.Errorf("metadata incomplete: %+v", m)
	}
	if len(m.PeerProviders) != n || slices.ContainsFunc(m.PeerProviders, func(p string) bool { return p != "soft" }) {
		t.Errorf("peer providers %q, want soft for each of %d ranks", m.PeerProviders, n)
	}
	for _, r := range rep.Results {
		if !r.Verified {
			t.Errorf("%s %s %d bytes: not verified", r.Bench, r.Sync, r.Bytes)
		}
		if r.Reps != len(r.Samples) || r.Reps == 0 || r.Mean <= 0 || r.Min > r.Median || r.Median > r.Max {
			t.Errorf("%s %s %d bytes: bad statistics %+v", r.Bench, r.Sync, r.Bytes, r)
		}
	}
	if !strings.Contains(out, "[0] #") {
		t.Errorf("no table on stdout:\n%s", out)
	}
	return &rep
}

// checkSweep checks that a ping-pong report has every mode at every
// requested size (-quick: 2^0 … 2^3 elements).
func checkSweep(t *testing.T, rep *Report, bench string, modes []string, ranks int) {
	t.Helper()
	var got []string
	for _, r := range rep.Results {
		if r.Bench != bench || r.Ranks != ranks || r.Metric != MetricRTT || r.Bytes != 8*r.Elements || r.Reps != 3 {
			t.Errorf("unexpected result %+v", r)
		}
		got = append(got, r.Sync+"/"+itoa(r.Elements))
	}
	var want []string
	for _, m := range modes {
		for _, n := range []int{1, 2, 4, 8} {
			want = append(want, m+"/"+itoa(n))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
}

func TestOneOne(t *testing.T) {
	rep := runJSON(t, 2, "oneone", "-quick", "-mode", "all")
	checkSweep(t, rep, "oneone", oneOneModes, 2)
	if rep.Meta.SettleMS != 25 {
		t.Errorf("settle_ms %v, want the default 25", rep.Meta.SettleMS)
	}
}

// -single is the reference method: no warm-up of any kind, one round trip
// per repetition.
func TestSingleDoesNotSettle(t *testing.T) {
	rep := runJSON(t, 2, "oneone", "-single", "-max", "0", "-reps", "3")
	if rep.Meta.SettleMS != 0 {
		t.Errorf("settle_ms %v, want 0 with -single", rep.Meta.SettleMS)
	}
	if len(rep.Results) != 1 || rep.Results[0].Iters != 1 {
		t.Errorf("results %+v, want one size of one round trip per repetition", rep.Results)
	}
}

func TestDefaultIsOneOneFence(t *testing.T) {
	rep := runJSON(t, 2, "-quick", "-w", "create")
	checkSweep(t, rep, "oneone", []string{"fence3"}, 2)
	if rep.Results[0].Window != "create" {
		t.Errorf("window %q, want create", rep.Results[0].Window)
	}
}

func TestOneMany(t *testing.T) {
	rep := runJSON(t, 3, "onemany", "-quick", "-mode", "all")
	checkSweep(t, rep, "onemany", oneManyModes, 3)
}

func TestOSU(t *testing.T) {
	rep := runJSON(t, 2, "osu", "-quick", "-b", "all", "-s", "all")
	seen := map[string]bool{}
	for _, r := range rep.Results {
		seen[r.Bench+"/"+r.Sync] = true
		want := MetricLatency
		if strings.HasSuffix(r.Bench, "bw") {
			want = MetricBW
		}
		if r.Metric != want || r.Bytes < 1 || r.Bytes > 64 || r.Iters != 20 {
			t.Errorf("unexpected result %+v", r)
		}
	}
	for _, b := range osuBenches {
		syncs := osuSyncs
		if b == "put_bibw" {
			syncs = []string{"fence", "pscw"}
		}
		for _, s := range syncs {
			if !seen[b+"/"+s] {
				t.Errorf("no result for %s -s %s", b, s)
			}
		}
	}
}

func TestLat(t *testing.T) {
	rep := runJSON(t, 2, "lat", "-quick")
	if len(rep.Results) != 7 {
		t.Errorf("%d results, want 7 (3 put, 3 get, fetch-add)", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Typical <= 0 || r.Typical > r.Max*float64(r.Iters) {
			t.Errorf("%s %d B: typical %v µs, want a single operation's latency (max repetition mean %v)", r.Sync, r.Bytes, r.Typical, r.Max)
		}
	}
	// -ops picks operations; a get without puts before it checks rank 1's
	// own pattern.
	rep = runJSON(t, 2, "lat", "-quick", "-ops", "get,fetch-add")
	syncs := map[string]int{}
	for _, r := range rep.Results {
		syncs[r.Sync]++
	}
	if len(rep.Results) != 4 || syncs["get+flush"] != 3 || syncs["fetch-add"] != 1 {
		t.Errorf("-ops get,fetch-add: results %v, want 3 get+flush and 1 fetch-add", syncs)
	}
}

// A run that moves wrong data must fail loudly.
func TestCorruptionFails(t *testing.T) {
	out, err := runJob(t, 2, []string{"PINGPONG_TEST_CORRUPT=1"}, "-quick", "-mode", "fence2")
	if err == nil || !strings.Contains(out, "DATA VERIFICATION FAILED") {
		t.Fatalf("corrupted run: err %v, output:\n%s", err, out)
	}
}

func TestPlotImportTable(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	if out, err := runJob(t, 2, nil, "-quick", "-json", a, "-label", "rmago test"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	csv := filepath.Join(dir, "mpi.csv")
	lines := "lib,bench,mode,ranks,n_doubles,bytes,iters,reps,ok\n" +
		"Open MPI v4.1.4,oneone,fence3,2,1,8,200,3,ok,60.1,61.2,59.3\n" +
		"Open MPI v4.1.4,oneone,fence3,2,2,16,200,3,ok,60.1,61.2,59.3\n"
	if err := os.WriteFile(csv, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	_, pp := binaries(t)
	b := filepath.Join(dir, "b.json")
	if out, err := exec.Command(pp, "import", "-o", b, "-system", "Open MPI tcp", "-provider", "tcp", csv, csv).CombinedOutput(); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	rep, err := readJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Meta.System != "Open MPI tcp" || len(rep.Results) != 2 || rep.Results[0].Reps != 6 || rep.Results[0].Elements != 1 {
		t.Errorf("imported (two files merged): %+v", rep)
	}
	out, err := exec.Command(pp, "plot", "-o", filepath.Join(dir, "p.svg"), a, b).CombinedOutput()
	if err != nil {
		t.Fatalf("plot: %v\n%s", err, out)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "p.svg"))
	png, _ := os.ReadFile(filepath.Join(dir, "p.png"))
	if !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("Open MPI tcp")) || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("plot output: svg %d bytes, png %d bytes", len(svg), len(png))
	}
	out, err = exec.Command(pp, "table", a, b).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "| 8 | ") || !strings.Contains(string(out), "ratio vs Open MPI tcp") {
		t.Errorf("table: %v\n%s", err, out)
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("Open MPI v4.1.4,oneone,fence3,2,1,8,200,3,BAD,60.1,61.2,59.3\n"), 0o644)
	if out, err := exec.Command(pp, "import", "-o", filepath.Join(dir, "c.json"), bad).CombinedOutput(); err == nil {
		t.Errorf("import of a BAD line succeeded:\n%s", out)
	}
}

func TestSummarize(t *testing.T) {
	var r Result
	r.summarize([]float64{5, 1, 3, 100})
	if r.Mean != 4 || r.Min != 1 || r.Max != 100 || r.Median != 4 || r.Reps != 4 {
		t.Errorf("summarize: %+v", r)
	}
}

// TestPeerProvidersMixed: a job on two pretend nodes (RMAGO_NODE per
// rank, auto provider) reports which provider carried each peer: shm for
// rank 0 itself, the network provider (soft without an RDMA device) for
// rank 1 on the other node.
func TestPeerProvidersMixed(t *testing.T) {
	rmarun, pp := binaries(t)
	path := filepath.Join(t.TempDir(), "out.json")
	cmd := exec.Command(rmarun, "-n", "2", "-provider", "auto", "-timeout", "2m", "sh", "-c",
		`RMAGO_NODE=pretend$RMAGO_RANK exec "$0" "$@"`, pp, "oneone", "-quick", "-json", path)
	cmd.Env = append(os.Environ(), "RMAGO_TIMEOUT=60s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	m := rep.Meta
	// Provider names the providers of rank 0's peers, itself left out.
	if len(m.PeerProviders) != 2 || m.PeerProviders[0] != "shm" || (m.PeerProviders[1] != "soft" && m.PeerProviders[1] != "ibv") || m.Provider != m.PeerProviders[1] {
		t.Fatalf("provider %q, peer providers %q; want soft, [shm soft] (or ibv)", m.Provider, m.PeerProviders)
	}
	if !strings.Contains(string(out), "rank 0 reaches rank 0 through shm, rank 1 through "+m.PeerProviders[1]) {
		t.Errorf("the header does not say which provider carried each peer:\n%s", out)
	}
}

// Each operation's latency is its share of the cycles between the
// stamps, in the unit the repetition's clock time gives them.
func TestOpLatencies(t *testing.T) {
	each := opLatencies(nil, []uint64{100, 110, 130, 160}, 6) // 60 cycles in 6 µs
	want := []float64{1, 2, 3}
	if len(each) != len(want) {
		t.Fatalf("opLatencies: %v, want %v", each, want)
	}
	for i := range want {
		if math.Abs(each[i]-want[i]) > 1e-12 {
			t.Fatalf("opLatencies: %v, want %v", each, want)
		}
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3, 1, 2: %v, want 2", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4, 1, 3, 2: %v, want 2.5", m)
	}
	if m := median(nil); m != 0 {
		t.Errorf("median of nothing: %v, want 0", m)
	}
	if each := opLatencies(nil, []uint64{5, 5}, 1); len(each) != 0 {
		t.Errorf("no cycles counted: %v, want nothing", each)
	}
	if each := opLatencies(nil, []uint64{50, 40}, 1); len(each) != 0 {
		t.Errorf("a counter that went back over the repetition: %v, want nothing", each)
	}
	if each := opLatencies(nil, []uint64{100, 90, 120}, 2); len(each) != 1 || each[0] != 3 {
		t.Errorf("a counter that went back for one operation: %v, want only the other's 30 cycles, 3 µs", each)
	}
}
