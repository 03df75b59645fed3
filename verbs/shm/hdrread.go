package shm

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hdrReader reads the connection's message headers, and the descriptors
// that come with some of them, without allocating: net.UnixConn's
// ReadMsgUnix allocates the sender's address and its result on every call,
// which was most of the garbage of an atomic on a created window (a
// request to the owner's responder, answered with a header).
type hdrReader struct {
	rc  syscall.RawConn
	oob []byte

	// recvmsg's arguments and results, fields so that fn (made once)
	// needs no closure per call.
	buf     []byte
	n, oobn int
	errno   syscall.Errno
	fn      func(fd uintptr) bool
	iov     syscall.Iovec
	hdr     syscall.Msghdr
}

func newHdrReader(conn *net.UnixConn) (*hdrReader, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &hdrReader{rc: rc, oob: make([]byte, syscall.CmsgSpace(4*4))}
	r.fn = r.recv
	return r, nil
}

// recv is one recvmsg of r.buf with its control data; false (try again
// when the socket is readable) if nothing is there yet.
func (r *hdrReader) recv(fd uintptr) bool {
	r.iov.Base = unsafe.SliceData(r.buf)
	r.iov.SetLen(len(r.buf))
	r.hdr = syscall.Msghdr{Iov: &r.iov, Iovlen: 1, Control: unsafe.SliceData(r.oob)}
	r.hdr.SetControllen(len(r.oob))
	n, _, e := syscall.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.hdr)), syscall.MSG_CMSG_CLOEXEC)
	if e == syscall.EAGAIN {
		return false
	}
	r.n, r.oobn, r.errno = int(n), int(r.hdr.Controllen), e
	if e != 0 {
		r.n, r.oobn = 0, 0
	}
	return true
}

// read reads one header into b, and returns the descriptor that came with
// it (-1: none; any others are closed).
func (r *hdrReader) read(b *[hdrLen]byte) (fd int, err error) {
	fd = -1
	got := 0
	for got < hdrLen {
		r.buf = b[got:]
		err := r.rc.Read(r.fn)
		if err == nil && r.errno != 0 {
			err = r.errno
		}
		if r.oobn > 0 {
			if fds := parseFDs(r.oob[:r.oobn]); len(fds) > 0 {
				if fd >= 0 {
					syscall.Close(fd)
				}
				fd = fds[0]
				for _, x := range fds[1:] {
					syscall.Close(x)
				}
			}
		}
		if r.n == 0 && err == nil {
			err = io.EOF
		}
		if err != nil {
			if fd >= 0 {
				syscall.Close(fd)
			}
			return -1, err
		}
		got += r.n
	}
	r.buf = nil
	return fd, nil
}
