package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfile is what -cpuprofile started: every rank profiles its own CPU
// into PATH.RANK, from the job's start to its end, for `go tool pprof`.
type cpuProfile struct{ f *os.File }

// startCPUProfile starts rank's profile; a nil result (path "") does nothing.
func startCPUProfile(path string, rank int) (*cpuProfile, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", path, rank))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return &cpuProfile{f: f}, nil
}

// stop ends the profile and closes its file.
func (p *cpuProfile) stop() error {
	if p == nil {
		return nil
	}
	pprof.StopCPUProfile()
	return p.f.Close()
}
