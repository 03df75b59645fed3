//go:build !amd64 && !arm64

package spin

// Pause tells the processor that the caller spins waiting for memory to
// change; on this architecture it does nothing.
func Pause() {}
