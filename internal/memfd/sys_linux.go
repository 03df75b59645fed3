package memfd

import (
	"syscall"
	"unsafe"
)

const (
	mfdCloexec = 0x1
)

// create makes an anonymous memory file (memfd_create(2), close-on-exec).
func create(name string) (int, error) {
	if sysMemfdCreate < 0 {
		return -1, syscall.ENOSYS
	}
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	fd, _, e := syscall.Syscall(uintptr(sysMemfdCreate), uintptr(unsafe.Pointer(p)), mfdCloexec, 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}
