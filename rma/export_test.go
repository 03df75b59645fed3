package rma

// SetBulkAccumulate turns bulk accumulates off (or back on, where the
// provider executes them) for w, so that tests and benchmarks compare them
// with the per-word atomics in one process.
func SetBulkAccumulate(w *World, on bool) {
	w.bulkAcc = on && w.maxFetch > 0
}
