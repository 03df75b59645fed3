package shm

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// MapRemote maps a child process's memfd region: stores through the
// mapping are what the child's region holds (read back with an RDMA read),
// Unmap removes it from /proc/self/maps; Go memory is not mappable and a
// wrong key is refused.
func TestMapRemote(t *testing.T) {
	c := startServer(t)
	s := dialChild(t, c)
	m, ok := s.qp.(verbs.Mapper)
	if !ok {
		t.Fatal("the shm queue pair is not a verbs.Mapper")
	}
	b, err := m.MapRemote(c.rkey, c.memAddr+4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 1<<16-4096 {
		t.Fatalf("mapped %d bytes, want %d (to the region's end)", len(b), 1<<16-4096)
	}
	if n := mapsWith(t, "rmago-child"); n != 1 {
		t.Fatalf("%d mappings of the child's memory, want 1", n)
	}
	for i := range 256 {
		b[i] = byte(i + 3)
	}
	if wc := post(t, s, &verbs.SendWR{Op: verbs.OpRead, SGL: sge(s.mr, 0, 256), RemoteAddr: c.memAddr + 4096, RKey: c.rkey}); wc.Status != verbs.StatusSuccess {
		t.Fatal(wc.Err())
	}
	for i := range 256 {
		if s.buf[i] != byte(i+3) {
			t.Fatalf("byte %d read back %d, stored %d through the mapping", i, s.buf[i], byte(i+3))
		}
	}
	// A second call returns the same mapping.
	b2, err := m.MapRemote(c.rkey, c.memAddr)
	if err != nil || unsafe.Pointer(&b2[4096]) != unsafe.Pointer(&b[0]) {
		t.Fatalf("second MapRemote: %v, or another mapping", err)
	}
	m.Unmap(c.rkey)
	if n := mapsWith(t, "rmago-child"); n != 0 {
		t.Fatalf("%d mappings of the child's memory after Unmap", n)
	}
	if _, err := m.MapRemote(c.goRKey, c.goAddr); !errors.Is(err, verbs.ErrNotMappable) {
		t.Fatalf("MapRemote of Go memory: %v, want ErrNotMappable", err)
	}
	if _, err := m.MapRemote(c.rkey^0x10000, c.memAddr); !errors.Is(err, verbs.ErrRemoteAccess) {
		t.Fatalf("MapRemote with a wrong key: %v, want ErrRemoteAccess", err)
	}
	if _, err := m.MapRemote(c.rkey, c.memAddr+1<<16); !errors.Is(err, verbs.ErrRemoteAccess) {
		t.Fatalf("MapRemote past the region: %v, want ErrRemoteAccess", err)
	}
}
