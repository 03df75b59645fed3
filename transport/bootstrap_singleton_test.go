package transport

import (
	"bytes"
	"testing"

	"github.com/rmago/rmago/internal/launch"
)

// A program started without a launcher is a job of one rank with a fresh
// random key: its fabric listens, and a fixed key would let any local
// process in.
func TestSingletonSecret(t *testing.T) {
	for _, name := range []string{launch.EnvRank, launch.EnvSize, launch.EnvSecret, launch.EnvRendezvous} {
		t.Setenv(name, "")
	}
	var keys [][]byte
	for range 2 {
		b, err := BootstrapFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		if b.Size() != 1 || b.Rank() != 0 || len(b.Secret()) != launch.SecretBytes {
			t.Fatalf("rank %d of %d, %d-byte key", b.Rank(), b.Size(), len(b.Secret()))
		}
		keys = append(keys, b.Secret())
		b.Close()
	}
	if bytes.Equal(keys[0], keys[1]) {
		t.Errorf("two single-rank jobs have the same key %x", keys[0])
	}
}
