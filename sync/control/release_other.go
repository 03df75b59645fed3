//go:build !amd64

package control

import "sync/atomic"

// storeRelease stores v into *p with release ordering (on arm64 Go's
// atomic store is a store-release, STLR, which does not wait either).
func storeRelease(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
