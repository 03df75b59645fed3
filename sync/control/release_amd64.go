package control

// storeRelease stores v into *p (8-byte aligned) with release ordering:
// every earlier store of this goroutine is visible before it. On amd64 a
// plain MOV is one (total store order), and unlike sync/atomic's Store
// (an XCHG, a full barrier) it does not wait for the line: the core goes
// on while its store buffer takes the line from the reader's cache.
//
//go:noescape
func storeRelease(p *uint64, v uint64)
