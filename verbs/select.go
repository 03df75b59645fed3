package verbs

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Choosing a provider: by name, or by discovery among the registered
// providers that say what they are (Discoverer), hardware before software.

// Kind says what a provider's devices are, for discovery.
type Kind uint8

// Provider kinds.
const (
	// KindHardware is an RDMA NIC (InfiniBand, RoCE, Soft-RoCE): it
	// reaches every peer on its fabric. Discovery tries it first.
	KindHardware Kind = iota + 1
	// KindSoftware carries RDMA semantics in software over IP: it reaches
	// every peer, more slowly. Discovery falls back to it.
	KindSoftware
	// KindNodeLocal reaches only peers on the same node (shared memory).
	// Discovery never picks it: a job opens it by name beside a provider
	// for the other peers.
	KindNodeLocal
)

var kindNames = [...]string{"invalid", "hardware", "software", "node-local"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// discoveryOrder is the order in which discovery tries the kinds.
var discoveryOrder = [...]Kind{KindHardware, KindSoftware}

// Discoverer is implemented by providers that discovery (Select with name
// "" or "auto") may choose. A provider without it is opened by name only.
type Discoverer interface {
	Provider
	// Kind says what the provider's devices are.
	Kind() Kind
	// Usable reports whether Open(device, cfg) can be expected to succeed
	// in this process ("": the provider's default device): nil if so,
	// else why not, wrapping ErrNoDevice. It is cheap: it opens no
	// device, loads no library and prints nothing.
	Usable(device string) error
}

// Candidate is a provider discovery may choose, and whether it can.
type Candidate struct {
	Name string
	Kind Kind
	// Err is nil if the provider is usable with the device asked for, else
	// why not (Discoverer.Usable).
	Err error
}

// Discover lists the registered providers that discovery may choose, in
// the order it tries them (hardware before software, then by name), each
// with whether it is usable with device ("" for its default device).
func Discover(device string) []Candidate {
	regMu.RLock()
	var ds []Candidate
	var impls []Discoverer
	for name, p := range providers {
		d, ok := p.(Discoverer)
		if !ok || !slices.Contains(discoveryOrder[:], d.Kind()) {
			continue
		}
		ds = append(ds, Candidate{Name: name, Kind: d.Kind()})
		impls = append(impls, d)
	}
	regMu.RUnlock()
	for i := range ds {
		ds[i].Err = impls[i].Usable(device)
	}
	slices.SortFunc(ds, func(a, b Candidate) int {
		if a.Kind != b.Kind {
			return slices.Index(discoveryOrder[:], a.Kind) - slices.Index(discoveryOrder[:], b.Kind)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ds
}

// Choice is the provider Select opened.
type Choice struct {
	// Provider is the provider's registered name.
	Provider string
	// Kind is its kind (0 for a provider opened by name that is not a
	// Discoverer).
	Kind Kind
	// Context is the open device; the caller closes it.
	Context Context
	// Notice is non-empty when discovery fell back from the preferred kind
	// (no usable RDMA device): one line saying why and what it chose, for
	// the user (no prefix, no newline).
	Notice string
}

// Select opens a provider: the one named name, or, when name is "" or
// "auto", the best one discovery finds (Discover): the first hardware
// provider usable with device that opens, else the first software one. A
// hardware provider is tried only with device itself; a software provider
// that has no device of that name opens its default device, since a device
// name names an RDMA device. Each call opens a new context, so a process
// may select several providers at once.
//
// An error wraps ErrUnknownProvider (no provider of that name, or none
// that discovery may choose), or the provider's own error (ErrNoDevice, ...).
func Select(name, device string, cfg Config) (Choice, error) {
	if name != "" && name != "auto" {
		p, err := Lookup(name)
		if err != nil {
			return Choice{}, err
		}
		ctx, err := p.Open(device, cfg)
		if err != nil {
			return Choice{}, err
		}
		ch := Choice{Provider: name, Context: ctx}
		if d, ok := p.(Discoverer); ok {
			ch.Kind = d.Kind()
		}
		return ch, nil
	}
	cands := Discover(device)
	var why []string // why each preferred candidate was passed over
	var errs []error
	for _, c := range cands {
		dev := device
		if c.Err != nil && c.Kind == KindSoftware && device != "" {
			dev = ""
			c.Err = lookupDiscoverer(c.Name).Usable(dev)
		}
		if c.Err == nil {
			ctx, err := Open(c.Name, dev, cfg)
			if err == nil {
				ch := Choice{Provider: c.Name, Kind: c.Kind, Context: ctx}
				if c.Kind != discoveryOrder[0] {
					ch.Notice = fallbackNotice(c.Name, ctx, why)
				}
				return ch, nil
			}
			c.Err = err
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.Name, c.Err))
		if c.Kind == discoveryOrder[0] {
			why = append(why, fmt.Sprintf("%s: %v", c.Name, c.Err))
		}
	}
	if len(cands) == 0 {
		return Choice{}, fmt.Errorf("%w: none that discovery may choose (registered: %v)", ErrUnknownProvider, Providers())
	}
	return Choice{}, fmt.Errorf("verbs: no provider could be opened: %w", errors.Join(errs...))
}

// lookupDiscoverer returns the registered Discoverer name.
func lookupDiscoverer(name string) Discoverer {
	regMu.RLock()
	defer regMu.RUnlock()
	return providers[name].(Discoverer)
}

// fallbackNotice says that discovery found no usable RDMA device and what
// it uses instead: "no usable RDMA device (ibv: ...); using the soft (TCP)
// provider".
func fallbackNotice(name string, ctx Context, why []string) string {
	var b strings.Builder
	b.WriteString("no usable RDMA device")
	if len(why) > 0 {
		b.WriteString(" (" + strings.Join(why, "; ") + ")")
	}
	b.WriteString("; using the " + name)
	if ll := ctx.Attr().LinkLayer; ll != "" {
		b.WriteString(" (" + ll + ")")
	}
	b.WriteString(" provider")
	return b.String()
}
