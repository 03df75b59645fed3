package wait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var flag atomic.Bool
	go func() {
		time.Sleep(5 * time.Millisecond) // well past the spinning polls
		flag.Store(true)
	}()
	if err := Until(flag.Load, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := Until(func() bool { return false }, 10*time.Millisecond); err != ErrTimeout {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
}

// Timeout reads RMAGO_TIMEOUT as rma does: 0 is no limit, unset is 2
// minutes.
func TestTimeout(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
	}{{"", 2 * time.Minute}, {"30s", 30 * time.Second}, {"0", 0}} {
		t.Setenv("RMAGO_TIMEOUT", c.env)
		if got := Timeout(); got != c.want {
			t.Errorf("RMAGO_TIMEOUT=%q: Timeout() = %v, want %v", c.env, got, c.want)
		}
	}
}
