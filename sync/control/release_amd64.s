#include "textflag.h"

// func storeRelease(p *uint64, v uint64)
TEXT ·storeRelease(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET
