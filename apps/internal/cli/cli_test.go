package cli

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestMain runs as an app when the tests start this binary as one.
func TestMain(m *testing.M) {
	if os.Getenv("CLI_TEST_APP") != "" {
		flag.Int("n", 1, "problem size")
		Parse("rmarun -n 2 ./app [-n N]")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// app runs this binary as an app with args, rank set in the environment
// ("" for none), and returns its output and exit status.
func app(t *testing.T, rank string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(rankEnv, name)
	})
	env = append(env, "CLI_TEST_APP=1")
	if rank != "" {
		env = append(env, "RMAGO_RANK="+rank)
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func TestHelpAndErrors(t *testing.T) {
	for _, c := range []struct {
		rank   string
		args   []string
		status int
		usage  int // times "usage:" is printed
		errMsg bool
	}{
		{"", []string{"-h"}, 0, 1, false},
		{"0", []string{"-h"}, 0, 1, false},
		{"1", []string{"-h"}, 0, 0, false},
		{"", []string{"-bogus"}, 2, 1, true},
		{"1", []string{"-bogus"}, 2, 0, false},
		{"3", []string{"-n", "5"}, 0, 0, false},
	} {
		out, status := app(t, c.rank, c.args...)
		if status != c.status || strings.Count(out, "usage: rmarun -n 2 ./app [-n N]") != c.usage ||
			strings.Contains(out, "-bogus") != c.errMsg {
			t.Errorf("rank %q, %v: exit %d, output:\n%s\nwant exit %d, usage %d times, error said: %v",
				c.rank, c.args, status, out, c.status, c.usage, c.errMsg)
		}
	}
}
