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

// A peer's memfd region is mapped through /proc without asking its owner
// (the tag carries the owner's descriptor): the mapping is the owner's
// memory. With the shortcut off (as after a refusal of /proc), mapping
// asks the owner and gets the same memory.
func TestMapFromProc(t *testing.T) {
	a, b := connected(t, 1<<16)
	q := a.qp.(*qp)
	key, addr := b.mr.RKey(), b.mr.(*region).addr
	e, ok := q.peerTab.check(key, addr, 0, 0)
	if !ok {
		t.Fatal("the region's entry refused the check")
	}
	tag := e.tag.Load()
	fd := int(tag >> 16 & 0xffff)
	mp := q.mapFromProc(fd, e)
	e.done()
	if fd == 0 || mp == nil {
		t.Fatalf("no mapping through /proc (descriptor %d in the tag %#x)", fd, tag)
	}
	defer mp.Unmap()
	m := unsafe.Slice((*byte)(mp.Base()), 1<<16)
	m[100], m[1<<16-1] = 7, 9
	if b.buf[100] != 7 || b.buf[1<<16-1] != 9 {
		t.Fatal("stores through the /proc mapping are not in the owner's region")
	}

	q.ctx.noProcFD.Store(true)
	mapper := a.qp.(verbs.Mapper)
	got, err := mapper.MapRemote(key, addr)
	if err != nil {
		t.Fatal(err)
	}
	got[200] = 5
	if b.buf[200] != 5 {
		t.Fatal("stores through the owner's mapping are not in its region")
	}
	mapper.Unmap(key)

	// A descriptor that is not the region's memfd (too small: a socket, say) is no mapping.
	q.ctx.noProcFD.Store(false)
	e, _ = q.peerTab.check(key, addr, 0, 0)
	if mp := q.mapFromProc(3, e); mp != nil {
		mp.Unmap()
		t.Error("descriptor 3 was taken for the region's memfd")
	}
	e.done()
}
