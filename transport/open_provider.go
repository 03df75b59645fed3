package transport

import (
	"fmt"
	"os"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
)

// openProvider picks and opens the provider: the one named (s.Provider),
// or auto (the best usable one verbs.Select discovers: hardware, else soft
// with a one-line notice on rank 0). The providers linked in are those
// providers.go imports.
func (f *Fabric) openProvider(b Bootstrap, s config.Settings, notice func(string)) (string, error) {
	ch, err := verbs.Select(s.Provider, s.Device, providerConfig(b, s, f.timeout))
	if err != nil {
		name := s.Provider
		if name == "" {
			name = "auto"
		}
		return "", fmt.Errorf("%w: %s: %w", ErrProvider, name, err)
	}
	f.ctx = ch.Context
	if ch.Notice != "" && b.Rank() == 0 {
		if notice == nil {
			notice = func(s string) { fmt.Fprintln(os.Stderr, s) }
		}
		notice("rmago: " + ch.Notice)
	}
	return ch.Provider, nil
}
