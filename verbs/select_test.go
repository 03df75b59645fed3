package verbs

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// testProvider is a provider of a given kind whose usability and opening
// the test controls. The registry is what is under test; the real
// providers are tested in their packages and through the transport.
type testProvider struct {
	kind     Kind
	usable   atomic.Bool
	openErr  atomic.Pointer[error]
	device   string // its one device
	lastOpen atomic.Pointer[string]
}

func (p *testProvider) Devices() ([]DeviceAttr, error) { return []DeviceAttr{{Name: p.device}}, nil }

func (p *testProvider) Open(device string, cfg Config) (Context, error) {
	p.lastOpen.Store(&device)
	if e := p.openErr.Load(); e != nil {
		return nil, *e
	}
	if device != "" && device != p.device {
		return nil, ErrNoDevice
	}
	return &testContext{attr: DeviceAttr{Name: p.device, LinkLayer: "Test"}}, nil
}

func (p *testProvider) Kind() Kind { return p.kind }

func (p *testProvider) Usable(device string) error {
	if !p.usable.Load() {
		return errors.New("test: switched off")
	}
	if device != "" && device != p.device {
		return ErrNoDevice
	}
	return nil
}

type testContext struct{ attr DeviceAttr }

func (c *testContext) Attr() DeviceAttr         { return c.attr }
func (c *testContext) AllocPD() (PD, error)     { return nil, ErrInvalid }
func (c *testContext) CreateCQ(int) (CQ, error) { return nil, ErrInvalid }
func (c *testContext) Close() error             { return nil }

// plainProvider is not a Discoverer: it is opened by name only.
type plainProvider struct{}

func (plainProvider) Devices() ([]DeviceAttr, error) { return nil, nil }
func (plainProvider) Open(string, Config) (Context, error) {
	return &testContext{attr: DeviceAttr{Name: "plain0"}}, nil
}

var (
	testHW    = &testProvider{kind: KindHardware, device: "hw0"}
	testSW    = &testProvider{kind: KindSoftware, device: "sw0"}
	testLocal = &testProvider{kind: KindNodeLocal, device: "local0"}
)

func init() {
	Register("test-hw", testHW)
	Register("test-sw", testSW)
	Register("test-local", testLocal)
	Register("test-plain", plainProvider{})
	RegisterMissing("test-missing", errors.New("test: left out of this build (build with -tags test)"))
	testSW.usable.Store(true)
	testLocal.usable.Store(true)
}

func names(cs []Candidate) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Name)
	}
	return strings.Join(s, ",")
}

// Discovery lists hardware before software and leaves out node-local
// providers and providers that are not Discoverers.
func TestDiscoverOrder(t *testing.T) {
	cs := Discover("")
	if got := names(cs); got != "test-hw,test-sw" {
		t.Fatalf("Discover: %s, want test-hw,test-sw", got)
	}
	if cs[0].Kind != KindHardware || cs[0].Err == nil || cs[1].Kind != KindSoftware || cs[1].Err != nil {
		t.Fatalf("Discover: %+v", cs)
	}
}

// Auto picks a usable hardware provider without a notice, and falls back
// to software, with a notice saying why, when the hardware is unusable or
// fails to open.
func TestSelectAuto(t *testing.T) {
	defer testHW.usable.Store(false)
	testHW.usable.Store(false)
	ch, err := Select("auto", "", Config{})
	if err != nil || ch.Provider != "test-sw" || ch.Kind != KindSoftware {
		t.Fatalf("hardware off: %+v, %v", ch, err)
	}
	if want := "no usable RDMA device (test-hw: test: switched off); using the test-sw (Test) provider"; ch.Notice != want {
		t.Fatalf("notice %q, want %q", ch.Notice, want)
	}

	testHW.usable.Store(true)
	ch, err = Select("", "", Config{})
	if err != nil || ch.Provider != "test-hw" || ch.Kind != KindHardware || ch.Notice != "" {
		t.Fatalf("hardware on: %+v, %v", ch, err)
	}

	// A device name goes to the hardware provider; the software fallback
	// opens its own device.
	ch, err = Select("auto", "hw0", Config{})
	if err != nil || ch.Provider != "test-hw" || *testHW.lastOpen.Load() != "hw0" {
		t.Fatalf("device hw0: %+v, %v", ch, err)
	}
	ch, err = Select("auto", "mlx9", Config{})
	if err != nil || ch.Provider != "test-sw" || *testSW.lastOpen.Load() != "" || !strings.Contains(ch.Notice, "test-hw: "+ErrNoDevice.Error()) {
		t.Fatalf("device mlx9: %+v, %v", ch, err)
	}

	openErr := errors.New("test: open failed")
	testHW.openErr.Store(&openErr)
	defer testHW.openErr.Store(nil)
	ch, err = Select("auto", "", Config{})
	if err != nil || ch.Provider != "test-sw" || !strings.Contains(ch.Notice, "test-hw: test: open failed") {
		t.Fatalf("hardware fails to open: %+v, %v", ch, err)
	}

	// Nothing opens: the error carries every provider's reason.
	testSW.openErr.Store(&openErr)
	defer testSW.openErr.Store(nil)
	if _, err := Select("auto", "", Config{}); !errors.Is(err, openErr) || !strings.Contains(err.Error(), "test-sw") {
		t.Fatalf("nothing opens: %v", err)
	}
}

// By name, any registered provider opens, discoverable or not, and each
// call opens a new context: a process may hold several at once.
func TestSelectByName(t *testing.T) {
	a, err := Select("test-local", "", Config{})
	if err != nil || a.Provider != "test-local" || a.Kind != KindNodeLocal || a.Notice != "" {
		t.Fatalf("test-local: %+v, %v", a, err)
	}
	b, err := Select("test-sw", "", Config{})
	if err != nil || b.Context == a.Context {
		t.Fatalf("test-sw beside test-local: %+v, %v", b, err)
	}
	c, err := Select("test-sw", "", Config{})
	if err != nil || c.Context == b.Context {
		t.Fatalf("a second test-sw context: %+v, %v", c, err)
	}
	p, err := Select("test-plain", "", Config{})
	if err != nil || p.Kind != 0 || p.Context.Attr().Name != "plain0" {
		t.Fatalf("test-plain: %+v, %v", p, err)
	}
	if _, err := Select("nonesuch", "", Config{}); !errors.Is(err, ErrUnknownProvider) {
		t.Fatalf("nonesuch: %v", err)
	}
}

// A provider left out of the build is unknown, but says how to build it.
func TestRegisterMissing(t *testing.T) {
	_, err := Select("test-missing", "", Config{})
	if !errors.Is(err, ErrUnknownProvider) || !strings.Contains(err.Error(), "-tags test") {
		t.Fatalf("test-missing: %v", err)
	}
	for _, n := range Providers() {
		if n == "test-missing" {
			t.Fatalf("Providers lists a missing provider: %v", Providers())
		}
	}
}
