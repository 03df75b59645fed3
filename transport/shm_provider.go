package transport

// The shared-memory provider for node-local peers (RMAGO_PROVIDER=shm).
import _ "github.com/rmago/rmago/verbs/shm"
