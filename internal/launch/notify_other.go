//go:build !unix

package launch

func isPipe(fd int) bool { return false }

func closeOnExec(fd int) {}
