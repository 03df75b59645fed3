package shm

const (
	sysProcessVMReadv  = 270
	sysProcessVMWritev = 271
)
