package shm

const (
	sysProcessVMReadv  = 310
	sysProcessVMWritev = 311
)
