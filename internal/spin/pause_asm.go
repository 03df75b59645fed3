//go:build amd64 || arm64

package spin

// Pause tells the processor that the caller spins waiting for memory to
// change (PAUSE on amd64, YIELD on arm64). Call it between two reads of
// the polled word.
func Pause()
