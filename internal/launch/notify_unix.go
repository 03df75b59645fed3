//go:build unix

package launch

import "syscall"

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}

func closeOnExec(fd int) { syscall.CloseOnExec(fd) }
