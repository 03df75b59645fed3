//go:build !amd64 && !arm64

package shm

const (
	sysProcessVMReadv  = -1
	sysProcessVMWritev = -1
)
