//go:build ibv && linux && cgo

package ibv

/*
#cgo LDFLAGS: -libverbs
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/rmago/rmago/verbs"
)

// providerBuilt says whether the cgo libibverbs provider is compiled in.
const providerBuilt = true

const (
	postBatch   = 64 // requests converted and posted per cgo call
	pollBatch   = 64 // completions fetched per cgo call
	maxRdAtomic = 16 // outstanding reads/atomics per QP (initiator and responder)
	minRnrTimer = 12 // 0.64 ms
	ackTimeout  = 14 // 4.096 µs * 2^14 ≈ 67 ms per transport retry
	retryCount  = 7
	rnrRetry    = 7 // 7 = retry forever

	// maxBlock bounds one sleep on the completion channel, so that no OS
	// thread sits in a cgo call for a whole long deadline; Wait sleeps again.
	maxBlock = time.Second
)

// CQ.Wait's busy phase, in polls of the CQ with runtime.Gosched between
// them: at least minSpin, at most maxSpin. One poll is about 200 ns on a
// current server (minSpin: 5-8 µs, the order of an interrupt and a
// wake-up; maxSpin: about 50 µs) and about 4 µs under QEMU TCG, where a
// wake-up by a completion event costs 0.1-1 ms. Counting polls rather
// than time scales the bounds with the machine.
const (
	minSpin = 32
	maxSpin = 256
)

// fixedSpin fixes the busy phase's length in polls for the CQs of contexts
// whose verbs.Config.SpinPolls is 0; -1 (the default) adapts it. Tests
// change it.
var fixedSpin = -1

// The provider registers itself only in builds with the tag (stub.go
// records why it is missing in the others).
func init() { verbs.Register(Name, provider{}) }

// provider is the libibverbs verbs.Provider.
type provider struct{}

// Kind is verbs.KindHardware: discovery tries it before software providers.
func (provider) Kind() verbs.Kind { return verbs.KindHardware }

// Usable reports, from sysfs alone, whether device ("": the one
// DefaultDevice picks) exists and is usable (verbs.Discoverer).
func (provider) Usable(device string) error { return usable(device, "") }

// The provider implements the verbs contract.
var (
	_ verbs.Discoverer = provider{}
	_ verbs.Context    = (*devContext)(nil)
	_ verbs.PD         = (*pd)(nil)
	_ verbs.MR         = (*mr)(nil)
	_ verbs.CQ         = (*cq)(nil)
	_ verbs.QP         = (*qp)(nil)
)

// errnoErr turns a libibverbs return code or errno into an error, wrapping
// the verbs sentinel that best fits it.
func errnoErr(what string, e error) error {
	var en syscall.Errno
	if !errors.As(e, &en) || en == 0 {
		return fmt.Errorf("ibv: %s failed", what)
	}
	switch en {
	case syscall.EINVAL, syscall.EOPNOTSUPP:
		return fmt.Errorf("%w: %s: %v", verbs.ErrInvalid, what, en)
	case syscall.ENOMEM:
		return fmt.Errorf("%w: %s: %v", verbs.ErrQueueFull, what, en)
	}
	return fmt.Errorf("ibv: %s: %w", what, en)
}

func rcErr(what string, rc C.int) error {
	if rc < 0 {
		rc = -rc
	}
	return errnoErr(what, syscall.Errno(rc))
}

// hasDevices is a cheap check run before libibverbs is touched, so that a
// host without RDMA gets verbs.ErrNoDevice without library warnings.
func hasDevices() bool {
	devs, _ := SysDevices()
	return len(devs) > 0
}

// deviceList returns the libibverbs device list; the caller frees it.
func deviceList() (**C.struct_ibv_device, []string, error) {
	if !hasDevices() {
		return nil, nil, fmt.Errorf("%w: none in /sys/class/infiniband (no RDMA hardware or rdma_rxe/siw link)", verbs.ErrNoDevice)
	}
	var n C.int
	l, err := C.ibv_get_device_list(&n)
	if l == nil {
		return nil, nil, fmt.Errorf("%w: ibv_get_device_list: %v", verbs.ErrNoDevice, err)
	}
	names := make([]string, int(n))
	for i := range names {
		names[i] = C.GoString(C.rg_dev_name(l, C.int(i)))
	}
	if len(names) == 0 {
		C.ibv_free_device_list(l)
		return nil, nil, fmt.Errorf("%w: libibverbs lists no devices (is the provider library, e.g. ibverbs-providers, installed?)", verbs.ErrNoDevice)
	}
	return l, names, nil
}

// Devices lists the devices libibverbs can open, describing port 1 of each.
func (provider) Devices() ([]verbs.DeviceAttr, error) {
	l, names, err := deviceList()
	if err != nil {
		return nil, err
	}
	defer C.ibv_free_device_list(l)
	var out []verbs.DeviceAttr
	var firstErr error
	for i, name := range names {
		c, err := openAt(l, i, name, 1)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out = append(out, c.attr)
		c.Close()
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %v", verbs.ErrNoDevice, firstErr)
	}
	return out, nil
}

// Open opens the named device, or DefaultDevice(cfg.NetDev)'s choice when
// device is "". cfg.Port selects the port (0: 1), cfg.GIDIndex the GID (-1:
// the RoCE v2 GID of an IPv4 address, else the best other one) and
// cfg.SpinPolls CQ.Wait's busy phase.
func (provider) Open(device string, cfg verbs.Config) (verbs.Context, error) {
	l, names, err := deviceList()
	if err != nil {
		return nil, err
	}
	defer C.ibv_free_device_list(l)
	if device == "" {
		if device, err = DefaultDevice(cfg.NetDev); err != nil {
			return nil, err
		}
	}
	idx := -1
	for i, n := range names {
		if n == device {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("%w: %q not found (libibverbs lists %v)", verbs.ErrNoDevice, device, names)
	}
	port := cfg.Port
	if port == 0 {
		port = 1
	}
	c, err := openAt(l, idx, device, port)
	if err != nil {
		return nil, err
	}
	if err := c.pickGID(cfg.GIDIndex); err != nil {
		c.Close()
		return nil, err
	}
	c.spinPolls = cfg.SpinPolls
	return c, nil
}
