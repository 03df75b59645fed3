package rma

import (
	"errors"

	"github.com/rmago/rmago/transport"
)

// Sentinel errors of rma's own checks (misuse of the API, ranks that
// disagree on a collective call). Test with errors.Is.
var (
	// ErrRank means a target rank is not in [0, Size()).
	ErrRank = errors.New("rma: target rank out of range")
	// ErrRange means [disp, disp+count) does not lie inside the target's window.
	ErrRange = errors.New("rma: displacement and count outside the target window")
	// ErrNoEpoch means an operation was issued with no access epoch open.
	ErrNoEpoch = errors.New("rma: operation outside an access epoch")
	// ErrEpochOpen means a window was freed with operations not yet
	// completed by a synchronization.
	ErrEpochOpen = errors.New("rma: epoch still open")
	// ErrFreed means the window was already freed.
	ErrFreed = errors.New("rma: window freed")
	// ErrClosed means the World was closed.
	ErrClosed = errors.New("rma: world closed")
	// ErrMismatch means ranks disagreed on a collective call (window
	// element type, creation order).
	ErrMismatch = errors.New("rma: ranks disagree on a collective call")
	// ErrSize means a size or length is invalid (negative, too large).
	ErrSize = errors.New("rma: invalid size")
	// ErrEpochConflict means a synchronization call does not fit the epochs
	// open on the window (a lock inside a fence epoch, a fence while locks
	// are held, start while an access epoch is open, ...).
	ErrEpochConflict = errors.New("rma: synchronization conflicts with the open epoch")
	// ErrNotLocked means Unlock of a rank this rank holds no lock on, or
	// UnlockAll without LockAll.
	ErrNotLocked = errors.New("rma: unlock without lock")
	// ErrNotStarted means Complete without Start.
	ErrNotStarted = errors.New("rma: complete without start")
	// ErrNotPosted means Wait or Test without Post.
	ErrNotPosted = errors.New("rma: wait without post")
	// ErrGroup means a group names a rank out of range, or one twice.
	ErrGroup = errors.New("rma: bad group")
)

// Errors from joining the job, from the peers and from the network,
// re-exported so that a program names only rma. They are the lower
// layers' sentinels themselves: test with errors.Is.
var (
	// ErrTimeout: a wait reached the timeout (RMAGO_TIMEOUT); the error
	// names the wait and the ranks not heard from.
	ErrTimeout = transport.ErrTimeout
	// ErrPeer: a peer failed (its process died, its connection broke,
	// another rank reported it failed). The error names the rank.
	ErrPeer = transport.ErrPeer
	// ErrPeerGone: a peer left the job in order (it closed its World)
	// while this rank still needed it. It also matches ErrPeer.
	ErrPeerGone = transport.ErrPeerGone
	// ErrBootstrap: Init could not join the job.
	ErrBootstrap = transport.ErrBootstrap
	// ErrLauncher: the program was started by a launcher rmago cannot
	// join; the error names the command that works. It comes with
	// ErrBootstrap.
	ErrLauncher = transport.ErrLauncher
	// ErrConfig: an RMAGO_* variable has a value that is not accepted
	// (docs/config.md); the error names the variable and the values it takes.
	ErrConfig = transport.ErrConfig
	// ErrProvider: no usable provider (RMAGO_PROVIDER names one that is
	// not compiled in, or its device cannot be opened).
	ErrProvider = transport.ErrProvider
	// ErrRemoteAccess: the target refused an access (outside its window,
	// window freed). Normally caught by rma's own checks first.
	ErrRemoteAccess = transport.ErrRemoteAccess
	// ErrTransport: the connection to the target failed.
	ErrTransport = transport.ErrTransport
)
