// Package futex puts goroutines of different processes to sleep on a
// 32-bit word of shared memory until another process changes it
// (futex(2), not process-private: the word lives in a shared mapping).
// Waiters block their thread, as a system call does.
package futex

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const (
	opWait = 0
	opWake = 1
)

// Wait sleeps while *w == v, at most d (d <= 0: no bound). It may return
// early (a signal, a spurious wake-up): callers look at their condition
// again.
func Wait(w *atomic.Uint32, v uint32, d time.Duration) {
	var ts *syscall.Timespec
	if d > 0 {
		t := syscall.NsecToTimespec(d.Nanoseconds())
		ts = &t
	}
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opWait, uintptr(v), uintptr(unsafe.Pointer(ts)), 0, 0)
}

// Wake wakes every sleeper on w. It never blocks, so it is made without
// telling the Go scheduler (RawSyscall), which would otherwise be free to
// hand this goroutine's processor to another thread meanwhile.
func Wake(w *atomic.Uint32) {
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(w)), opWake, uintptr(1<<31-1), 0, 0, 0)
}
