package rma

import "github.com/rmago/rmago/transport"

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
