package main

// cycles reads the CPU's time-stamp counter: a clock for timing one
// operation that costs a few nanoseconds even where a clock read is a
// system call (under an emulator the guest kernel trusts no TSC for its
// clocksource, and time.Now is then a trap, 2-7 µs). perftest times its
// iterations the same way. Its unit is calibrated against time.Now over
// a whole repetition (lat.go), so no frequency is assumed.
func cycles() uint64
