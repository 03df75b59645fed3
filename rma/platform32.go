//go:build 386 || arm || mips || mipsle

package rma

// rmago runs on 64-bit platforms only (README): window sizes,
// displacements and the verbs contract's 8-byte atomics assume 64-bit
// integers and addresses. On a 32-bit one the build stops here, with the
// reason as the error.
var _ = rmago_needs_a_64_bit_platform
