package transport

// The verbs providers linked into every program that uses the transport.
// Each registers itself with verbs from its init function, as database/sql
// drivers do, and the fabric opens one through verbs.Select, by name
// (Options.Provider, RMAGO_PROVIDER) or by discovery (auto: a usable
// hardware provider, else soft; shm, which reaches node-local peers
// only, is opened by name). This is the only place the transport
// names provider packages; a new provider is one more blank import here.
import (
	_ "github.com/rmago/rmago/verbs/ibv"  // libibverbs (InfiniBand, RoCE); registers only when built with -tags ibv
	_ "github.com/rmago/rmago/verbs/shm"  // shared memory between the ranks of one node (Linux)
	_ "github.com/rmago/rmago/verbs/soft" // TCP software RDMA, the embedded default
)
