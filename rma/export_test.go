package rma

// SetEpochHook makes fn see every transition of win's epoch state machine
// (epochs.hook), as the call's name, its target (locks; else 0) and the
// part's state before and after. For tests in package rma_test.
func SetEpochHook[T Number](win *Window[T], fn func(call string, target int, from, to string)) {
	win.mu.Lock()
	defer win.mu.Unlock()
	if fn == nil {
		win.ep.hook = nil
		return
	}
	win.ep.hook = func(k kind, target int, from, to state) {
		fn(kinds[k].name, target, from.String(), to.String())
	}
}

// SetBulkAccumulate turns bulk accumulates off (or back on, where the
// provider executes them) for w, so that tests and benchmarks compare them
// with the per-word atomics in one process.
func SetBulkAccumulate(w *World, on bool) {
	w.bulkAcc = on && w.maxFetch > 0
}

// BulkAccumulate reports whether w sends accumulates of many elements as
// bulk requests (every provider of the job executes them).
func BulkAccumulate(w *World) bool { return w.bulkAcc }
