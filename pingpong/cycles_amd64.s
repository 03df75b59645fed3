#include "textflag.h"

// func cycles() uint64
TEXT ·cycles(SB), NOSPLIT, $0-8
	RDTSC
	SHLQ $32, DX
	ORQ  DX, AX
	MOVQ AX, ret+0(FP)
	RET
