// Package apptest runs an app of apps/ as a real job in a test: it builds
// rmarun and the app (the package in the test's working directory) into a
// temporary directory once per test binary, runs the app under rmarun on
// the soft provider, and checks the exit status and the "verified" line.
package apptest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	once     sync.Once
	dir      string
	buildErr error
)

// Binaries returns the paths of rmarun and of the app built from the
// current directory, building them on first use.
func Binaries(t testing.TB) (rmarun, app string) {
	t.Helper()
	once.Do(func() {
		dir, buildErr = os.MkdirTemp("", "rmago-app")
		if buildErr != nil {
			return
		}
		build := func(out, pkg string) {
			if buildErr != nil {
				return
			}
			cmd := exec.Command("go", "build", "-o", out, pkg)
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = &buildError{pkg: pkg, err: err, out: string(b)}
			}
		}
		build(filepath.Join(dir, "rmarun"), "github.com/rmago/rmago/cmd/rmarun")
		build(filepath.Join(dir, "app"), ".")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(dir, "rmarun"), filepath.Join(dir, "app")
}

type buildError struct {
	pkg, out string
	err      error
}

func (e *buildError) Error() string { return "go build " + e.pkg + ": " + e.err.Error() + "\n" + e.out }

// Cleanup removes the binaries; call it from TestMain after m.Run.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// Run runs the app with ranks processes and args on the soft provider and
// returns its output. The test fails if the job exits non-zero or if rank
// 0 did not print a line containing "verified" (and not "NOT VERIFIED").
func Run(t *testing.T, ranks int, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes; skipped in -short mode")
	}
	rmarun, app := Binaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmdArgs := append([]string{"-n", strconv.Itoa(ranks), "-provider", "soft", "-timeout", "50s", app}, args...)
	cmd := exec.CommandContext(ctx, rmarun, cmdArgs...)
	cmd.Env = append(os.Environ(), "RMAGO_TIMEOUT=30s")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	s := string(out)
	if err != nil {
		t.Fatalf("rmarun %s: %v\n%s", strings.Join(cmdArgs, " "), err, s)
	}
	if !strings.Contains(s, "[0] ") || !strings.Contains(s, "verified") || strings.Contains(s, "NOT VERIFIED") {
		t.Fatalf("rmarun %s: no verified result\n%s", strings.Join(cmdArgs, " "), s)
	}
	t.Logf("rmarun -n %d %s (%v):\n%s", ranks, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), s)
	return s
}
