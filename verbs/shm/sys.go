package shm

import (
	"net"
	"syscall"
	"unsafe"
)

// Linux system calls the provider needs beyond package syscall.

const (
	prSetPtracer    = 0x59616d61
	prSetPtracerAny = ^uintptr(0)
)

// allowPtrace lets any process of this user attach to this one's memory
// with process_vm_readv/writev under Yama's ptrace_scope 1 (which allows it
// otherwise only to ancestors). Without Yama it fails harmlessly.
func allowPtrace() {
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetPtracer, prSetPtracerAny, 0)
}

// remoteIovec is a struct iovec naming memory of another process.
type remoteIovec struct {
	base uintptr
	len  uint64
}

// vmCopy copies between local segments and [raddr, raddr+total) of process
// pid (process_vm_writev when write, else process_vm_readv), all of it or
// an error.
func vmCopy(pid int, write bool, segs [][]byte, raddr uint64) error {
	nr := uintptr(sysProcessVMReadv)
	if write {
		nr = uintptr(sysProcessVMWritev)
	}
	if sysProcessVMReadv < 0 {
		return syscall.ENOSYS
	}
	for _, s := range segs {
		for len(s) > 0 {
			var local syscall.Iovec
			local.Base = &s[0]
			local.SetLen(len(s))
			remote := remoteIovec{base: uintptr(raddr), len: uint64(len(s))}
			r, _, e := syscall.Syscall6(nr, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
			if e != 0 {
				return e
			}
			if r == 0 {
				return syscall.EFAULT
			}
			s = s[r:]
			raddr += uint64(r)
		}
	}
	return nil
}

// peerCred returns the uid and pid of the process at the other end of a
// unix socket (SO_PEERCRED), as the kernel recorded them at connect.
func peerCred(c *net.UnixConn) (uid, pid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if gerr != nil {
		return 0, 0, gerr
	}
	return int(cred.Uid), int(cred.Pid), nil
}
