package rma

import (
	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/sync/lock"
	"github.com/rmago/rmago/sync/pscw"
	"github.com/rmago/rmago/transport"
)

// lockProtocol is the passive-target protocol (sync/lock).
type lockProtocol interface {
	Lock(target int, exclusive bool) error
	Unlock(target int, exclusive bool) error
	// One CPU atomic on a mapped Lock word, under win.mu (sync/lock's
	// direct.go); false: nothing done, use Lock or Unlock.
	TryDirect(target int, exclusive bool) bool
	UnlockDirect(target int, exclusive bool) bool
	LockAll() error
	UnlockAll() error
	Close() error

	// Lazy exclusive locks (lazy.go).
	Lazy(target int, exclusive bool) bool
	Begin(target int, exclusive bool) lock.Pending
	WithWrite(p *lock.Pending, local transport.Local, remote transport.Remote, n uint32) (bool, error)
	WithRead(p *lock.Pending, local transport.Local, remote transport.Remote, n uint32) (bool, error)
	Confirm(p *lock.Pending) (skipped bool, err error)
}

// pscwProtocol is the post-start-complete-wait protocol (sync/pscw).
type pscwProtocol interface {
	Post(group []int) error
	PostNoCheck(group []int) error
	Start(group []int) error
	StartNoCheck(group []int) error
	CompleteFlushing(after []int) error
	Wait() error
	Test() (bool, error)
	Close() error
}

// newProtocols builds a window's lock and PSCW protocols over its control region.
func newProtocols(c *control.Region, id uint16) (lockProtocol, pscwProtocol) {
	return lock.New(c), pscw.New(c, id)
}
