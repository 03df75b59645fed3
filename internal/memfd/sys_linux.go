package memfd

import "golang.org/x/sys/unix"

// create makes an anonymous memory file (memfd_create(2), close-on-exec).
// golang.org/x/sys/unix knows the system call's number on every Linux
// architecture, so the package builds wherever Go does.
func create(name string) (int, error) {
	return unix.MemfdCreate(name, unix.MFD_CLOEXEC)
}
