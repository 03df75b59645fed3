package memfd

import (
	"errors"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// Lookup finds the allocation and offset of any range inside an
// allocation, and nothing outside; Free forgets it and unmaps it; a
// second mapping of the file sees the same bytes.
func TestAllocLookupMapFree(t *testing.T) {
	a, err := Alloc(10000, "rmago-memfd-test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Alloc(100, "rmago-memfd-test")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	start := uintptr(unsafe.Pointer(&a.Bytes()[0]))
	fd, off, err := Lookup(start+5000, 100)
	if err != nil || fd != a.FD() || off != 5000 {
		t.Fatalf("lookup inside: fd %d off %d %v", fd, off, err)
	}
	if _, _, err := Lookup(start+12000, 8192); !errors.Is(err, ErrNotMemfd) {
		t.Fatalf("a range past the mapping: %v", err)
	}
	x := make([]byte, 8)
	if _, _, err := Lookup(uintptr(unsafe.Pointer(&x[0])), 8); !errors.Is(err, ErrNotMemfd) {
		t.Fatalf("Go memory: %v", err)
	}
	m, err := Map(a.FD(), 4099, 100)
	if err != nil {
		t.Fatal(err)
	}
	a.Bytes()[4099] = 42
	if *(*byte)(m.Base()) != 42 {
		t.Fatal("the second mapping does not see the first's bytes")
	}
	m.Unmap()
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Lookup(start+5000, 100); !errors.Is(err, ErrNotMemfd) {
		t.Fatalf("lookup after Free: %v", err)
	}
	maps, _ := os.ReadFile("/proc/self/maps")
	if n := strings.Count(string(maps), "rmago-memfd-test"); n != 1 {
		t.Fatalf("%d mappings left, want 1 (b)", n)
	}
}
