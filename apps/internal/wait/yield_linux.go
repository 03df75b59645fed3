package wait

import "syscall"

// yieldThread gives the core to another runnable thread, of this process
// or another (sched_yield).
func yieldThread() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
