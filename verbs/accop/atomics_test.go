package accop

import "sync/atomic"

func loadWord(w *uint64) uint64           { return atomic.LoadUint64(w) }
func casWord(w *uint64, o, n uint64) bool { return atomic.CompareAndSwapUint64(w, o, n) }
func addWord(w *uint64, d uint64) uint64  { return atomic.AddUint64(w, d) }
