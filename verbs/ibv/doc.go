// Package ibv is rmago's hardware verbs provider: it implements the
// verbs contract on libibverbs (InfiniBand, RoCE, and Soft-RoCE rdma_rxe),
// through cgo, and registers itself as "ibv":
//
//	import _ "github.com/rmago/rmago/verbs/ibv"
//	ctx, err := verbs.Open("ibv", "", verbs.Config{GIDIndex: -1})
//
// The cgo implementation is built only with the build tag ibv on Linux with
// cgo enabled, and needs the libibverbs headers and library (Debian:
// libibverbs-dev; at run time libibverbs1 and ibverbs-providers):
//
//	go build -tags ibv ./...
//
// Without the tag the package registers no provider: asking for "ibv" by
// name fails with an error wrapping verbs.ErrUnknownProvider and
// verbs.ErrNoDevice that says how to build it (verbs.RegisterMissing), and
// discovery (verbs.Select with "auto") does not try it. With the tag the
// provider is a verbs.Discoverer of kind verbs.KindHardware, which
// discovery prefers to the software provider when its device is usable.
// Device discovery (SysDevices, DefaultDevice, Available) reads sysfs in
// pure Go and works in every build.
//
// The C side (flat request and completion descriptors, the post, poll and
// CQ-wait helpers, queue pair setup) lives in shim.h, post.c, cqwait.c and
// setup.c, which cgo compiles in builds with the tag; the Go side is one
// file per object: ibv.go (opening), context.go, mr.go, cq.go, qp.go and
// post.go.
//
// Device selection for verbs.Open("ibv", device, cfg): the named device;
// else, with device "", the RDMA device on network interface cfg.NetDev;
// else the first device with an active port. The provider reads no
// environment: transport passes RMAGO_DEVICE and RMAGO_NETDEV on.
//
// CQ.Wait polls the CQ for a few microseconds, then sleeps on the CQ's
// completion channel until the device signals a completion; the number of
// polls adapts to what a sleep costs on the machine, or is fixed by
// cfg.SpinPolls (RMAGO_IBV_SPIN through transport; negative: sleep at
// once). docs/rdma.md describes the provider in full.
//
// Memory handed to PD.RegMR must stay put while registered: the NIC reads
// and writes it by virtual address behind the Go runtime's back. Allocate
// it outside the Go heap (mmap) or pin it with runtime.Pinner.
package ibv
