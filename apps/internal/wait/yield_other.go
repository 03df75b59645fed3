//go:build !linux

package wait

import "runtime"

func yieldThread() { runtime.Gosched() }
