package poll

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
