package main

import "syscall"

// sysProcAttr puts a rank in its own process group and has the kernel kill it
// if rmarun dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
