package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// README's program (the go block under "## A program") is this file's
// program, byte for byte from the package clause on, so the two cannot
// drift apart.
func TestREADMEProgramIsThisOne(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## A program\n")
	if !ok {
		t.Fatal(`README.md has no "## A program" section`)
	}
	_, block, ok := strings.Cut(section, "```go\n")
	if ok {
		block, _, ok = strings.Cut(block, "```\n")
	}
	if !ok {
		t.Fatal(`README.md's "## A program" has no go code block`)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(src, []byte("package main\n"))
	if i < 0 {
		t.Fatal("main.go: no package clause")
	}
	if got := string(src[i:]); got != block {
		t.Errorf("README.md's program differs from examples/hello/main.go (from the package clause on); make them the same.\nREADME:\n%s\nmain.go:\n%s", block, got)
	}
}

// The program runs as README says (two ranks under rmarun) and prints
// exactly what README says: rank 1's "999".
func TestRunsUnderRmarun(t *testing.T) {
	dir := t.TempDir()
	gobin := "go" // go test puts its own toolchain first in PATH
	for pkg, name := range map[string]string{"../../cmd/rmarun": "rmarun", ".": "hello"} {
		if out, err := exec.Command(gobin, "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	cmd := exec.Command(filepath.Join(dir, "rmarun"), "-n", "2", "-provider", "soft", "-timeout", "1m", filepath.Join(dir, "hello"))
	cmd.Env = append(os.Environ(), "RMAGO_TIMEOUT=30s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rmarun -n 2 hello: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if got := stdout.String(); got != "[1] 999\n" {
		t.Errorf("stdout %q, want %q (stderr:\n%s)", got, "[1] 999\n", stderr.String())
	}

	// Alone (a job of one rank) it says what it needs instead of failing
	// in a Put.
	out, err := exec.Command(filepath.Join(dir, "hello")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "needs two ranks") {
		t.Errorf("hello alone: %v, output:\n%s", err, out)
	}
}
