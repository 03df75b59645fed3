package shm

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// allowPtrace lets any process of this user attach to this one's memory
// with process_vm_readv/writev under Yama's ptrace_scope 1 (which allows it
// otherwise only to ancestors). Without Yama it fails harmlessly.
func allowPtrace() {
	unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0)
}

// vmCopy copies between local segments and [raddr, raddr+total) of process
// pid (process_vm_writev when write, else process_vm_readv), all of it or
// an error.
func vmCopy(pid int, write bool, segs [][]byte, raddr uint64) error {
	var local [1]unix.Iovec
	var remote [1]unix.RemoteIovec
	for _, s := range segs {
		for len(s) > 0 {
			local[0].Base = &s[0]
			local[0].SetLen(len(s))
			remote[0] = unix.RemoteIovec{Base: uintptr(raddr), Len: len(s)}
			var r int
			var err error
			if write {
				r, err = unix.ProcessVMWritev(pid, local[:], remote[:], 0)
			} else {
				r, err = unix.ProcessVMReadv(pid, local[:], remote[:], 0)
			}
			if err != nil {
				return err
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
