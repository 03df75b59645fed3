package transport

import (
	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// Completion errors of the provider, re-exported so that the layers above
// name only transport (and users only rma). They are the verbs sentinels
// themselves: errors.Is matches either name.
var (
	// ErrRemoteAccess: the target refused the request (rkey unknown or
	// deregistered, address outside the region, access not granted).
	ErrRemoteAccess = verbs.ErrRemoteAccess
	// ErrRemoteOp: the target could not execute the request.
	ErrRemoteOp = verbs.ErrRemoteOp
	// ErrTransport: the connection to the target failed (retries
	// exceeded, peer gone).
	ErrTransport = verbs.ErrTransport
	// ErrLocalAccess: local memory of the request is not registered for
	// the access it needs.
	ErrLocalAccess = verbs.ErrLocalAccess
	// ErrUnknownProvider: no provider is registered under the name asked for.
	ErrUnknownProvider = verbs.ErrUnknownProvider
	// ErrLauncher: the process was started by a launcher rmago cannot
	// join (it names the launcher and the command that works).
	ErrLauncher = launch.ErrLauncher
)
