package shm

import "encoding/binary"

// Messages on a queue pair's socket, after the handshake. Data moves
// through shared memory; the socket carries only what needs the owner:
// a region's memfd (on first use of its key), atomics and copies on
// memory the origin cannot reach directly, and goodbye. Every message is
// a fixed 48-byte little-endian header, followed by the payload of a
// write request or a read response:
//
//	0 kind  1 status (responses; goodbye: 0 orderly, else 0x80|status)
//	4 length  8 address  16 rkey  24 arg0  32 arg1  40 arg2
//
// A get-fd response carries the memfd in SCM_RIGHTS, arg0 its offset
// (^0: not in a memfd), arg1 the region's address, arg2 its length. An
// atomic response carries the old value in arg0. An accumulate request
// (accumulate.go) carries the reduction and element type in arg0
// (op | type<<8), 1 in arg1 when the old values come back, the bytes of
// elements in arg2, and its operand as payload (none for AccNoOp); a
// fetching accumulate's response carries the old values as payload.
const hdrLen = 48

const (
	mGetFD   = 1
	mFAA     = 2
	mCAS     = 3
	mWrite   = 4
	mRead    = 5
	mGoodbye = 6
	mAcc     = 7
	mResp    = 16
)

type msg struct {
	kind   uint8
	status uint8
	len    uint32
	addr   uint64
	rkey   uint32
	arg0   uint64
	arg1   uint64
	arg2   uint64
}

func (m *msg) encode(b *[hdrLen]byte) {
	*b = [hdrLen]byte{}
	b[0], b[1] = m.kind, m.status
	binary.LittleEndian.PutUint32(b[4:], m.len)
	binary.LittleEndian.PutUint64(b[8:], m.addr)
	binary.LittleEndian.PutUint32(b[16:], m.rkey)
	binary.LittleEndian.PutUint64(b[24:], m.arg0)
	binary.LittleEndian.PutUint64(b[32:], m.arg1)
	binary.LittleEndian.PutUint64(b[40:], m.arg2)
}

func (m *msg) decode(b *[hdrLen]byte) {
	m.kind, m.status = b[0], b[1]
	m.len = binary.LittleEndian.Uint32(b[4:])
	m.addr = binary.LittleEndian.Uint64(b[8:])
	m.rkey = binary.LittleEndian.Uint32(b[16:])
	m.arg0 = binary.LittleEndian.Uint64(b[24:])
	m.arg1 = binary.LittleEndian.Uint64(b[32:])
	m.arg2 = binary.LittleEndian.Uint64(b[40:])
}

// response is a response handed from the reader goroutine to the poster.
type response struct {
	h      msg
	fd     int  // a get-fd response's memfd, -1 if none
	failed bool // the queue pair failed instead
}
