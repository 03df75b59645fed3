package launch

import (
	"encoding/hex"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
)

func TestNewSecret(t *testing.T) {
	a, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || len(raw) != SecretBytes || len(a) != 64 {
		t.Fatalf("secret %q: want %d hex-encoded bytes (err %v)", a, SecretBytes, err)
	}
	if a == b {
		t.Fatalf("two secrets are equal: %q", a)
	}
}

func TestNewJobID(t *testing.T) {
	id, err := NewJobID()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hex.DecodeString(id); err != nil || len(id) != 8 {
		t.Fatalf("job id %q: want 8 hex characters", id)
	}
}

func TestFreePort(t *testing.T) {
	port, err := FreePort(DefaultAddr)
	if err != nil {
		t.Fatal(err)
	}
	if port <= 0 || port > 65535 {
		t.Fatalf("port %d out of range", port)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(DefaultAddr, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d is not usable: %v", port, err)
	}
	ln.Close()

	if _, err := FreePort("192.0.2.1"); err == nil {
		t.Error("FreePort on a non-local address succeeded")
	}
}

func TestEnv(t *testing.T) {
	got := Env(2, 4, "127.0.0.1:5000", "abcd", "127.0.0.1")
	want := []string{
		"RMAGO_RANK=2",
		"RMAGO_SIZE=4",
		"RMAGO_RENDEZVOUS=127.0.0.1:5000",
		"RMAGO_SECRET=abcd",
		"RMAGO_ADDR=127.0.0.1",
	}
	if len(got) != len(want) {
		t.Fatalf("Env = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Env[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestCoreShare(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	os.Unsetenv("GOMAXPROCS")
	cpu := runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cpu))
	want := min(cpu, cpu/2+1)
	if want == cpu {
		want = 0 // already the share
	}
	if got := CoreShare(2); got != want {
		t.Fatalf("CoreShare(2) = %d, want %d", got, want)
	}
	if got := CoreShare(1); got != 0 {
		t.Fatalf("CoreShare(1) = %d, want 0 (every core)", got)
	}
	if got := CoreShare(cpu + 1); cpu > 1 && got != 1 {
		t.Fatalf("CoreShare(%d) = %d, want 1", cpu+1, got)
	}
	t.Setenv("GOMAXPROCS", "") // set but empty counts as unset, as for Go
	if got := CoreShare(cpu + 1); cpu > 1 && got != 1 {
		t.Fatalf("with GOMAXPROCS empty: %d", got)
	}
	t.Setenv("GOMAXPROCS", "7")
	if got := CoreShare(cpu + 1); got != 0 {
		t.Fatalf("with GOMAXPROCS set by the user: %d", got)
	}
	os.Unsetenv("GOMAXPROCS")
	if cpu > 1 {
		runtime.GOMAXPROCS(cpu - 1) // set by the program (or a CPU limit)
		if got := CoreShare(cpu + 1); got != 0 {
			t.Fatalf("with GOMAXPROCS set by the program: %d", got)
		}
	}
}

// A rank the launcher bound counts the ranks on its CPUs, not on its node.
func TestCoresShared(t *testing.T) {
	cpu := runtime.NumCPU()
	t.Setenv(EnvBound, "")
	if CoresShared(cpu) || !CoresShared(cpu+1) {
		t.Errorf("unbound: %d ranks share %d CPUs: %t; %d: %t", cpu, cpu, CoresShared(cpu), cpu+1, CoresShared(cpu+1))
	}
	t.Setenv(EnvBound, "1")
	if CoresShared(64 * cpu) {
		t.Error("bound alone, but said to share its CPUs")
	}
	t.Setenv(EnvBound, strconv.Itoa(cpu+1))
	if !CoresShared(1) {
		t.Errorf("bound with %d ranks on %d CPUs, but said not to share", cpu+1, cpu)
	}
}
