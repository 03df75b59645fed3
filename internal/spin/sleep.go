package spin

import (
	"syscall"
	"time"
)

// Sleep blocks the calling goroutine's thread for about d in the kernel
// (nanosleep), releasing its processor to the process's other goroutines
// as any system call does.
func Sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}
