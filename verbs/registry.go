package verbs

import (
	"fmt"
	"sort"
	"sync"
)

// The registry of providers, as database/sql keeps its drivers: each
// provider package registers itself from an init function (behind its
// build tag, if it has one), and a program picks the providers it links in
// with blank imports. The registry holds factories, not open devices: a
// process may open several providers, and several contexts of one, at once
// (a job can reach node-local peers through one provider and the others
// through another).

var (
	regMu     sync.RWMutex
	providers = map[string]Provider{}
	missing   = map[string]error{} // providers left out of this build, and why
)

// Register makes a provider available under name. It panics if the name is
// taken, as database/sql.Register does.
func Register(name string, p Provider) {
	regMu.Lock()
	defer regMu.Unlock()
	if p == nil {
		panic("verbs: Register provider is nil")
	}
	if _, dup := providers[name]; dup {
		panic("verbs: Register called twice for provider " + name)
	}
	providers[name] = p
}

// RegisterMissing records that the provider name exists but was left out
// of this build (a build tag, cgo or the platform), and why: asking for it
// by name then fails with an error that wraps ErrUnknownProvider and
// reason, so that the user learns how to build it. It registers no
// provider: Providers does not list it and discovery does not try it. A
// later Register of the name wins over it.
func RegisterMissing(name string, reason error) {
	regMu.Lock()
	defer regMu.Unlock()
	missing[name] = reason
}

// Lookup returns the provider registered under name. The error wraps
// ErrUnknownProvider and, for a provider left out of the build
// (RegisterMissing), the reason it gave.
func Lookup(name string) (Provider, error) {
	regMu.RLock()
	p, ok := providers[name]
	why := missing[name]
	regMu.RUnlock()
	if ok {
		return p, nil
	}
	if why != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrUnknownProvider, name, why)
	}
	return nil, fmt.Errorf("%w %q (registered: %v)", ErrUnknownProvider, name, Providers())
}

// Providers lists the registered provider names, sorted.
func Providers() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Known lists the names of the registered providers and of those left
// out of this build (RegisterMissing), sorted: every name a user may ask
// for and get either a provider or a reason.
func Known() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(providers)+len(missing))
	for n := range providers {
		names = append(names, n)
	}
	for n := range missing {
		if _, ok := providers[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Open opens device (or the first usable one if device is "") of the named
// provider. Each call opens a new context.
func Open(provider, device string, cfg Config) (Context, error) {
	p, err := Lookup(provider)
	if err != nil {
		return nil, err
	}
	return p.Open(device, cfg)
}
