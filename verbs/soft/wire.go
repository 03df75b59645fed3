package soft

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rmago/rmago/verbs"
)

// Wire format. Every frame on a queue pair's TCP connection is a fixed
// 64-byte little-endian header, followed by Len payload bytes for the kinds
// that carry data (write, write-imm, send and accumulate requests, except
// an accumulate with AccNoOp; read responses, which also carry a fetching
// accumulate's old values).
//
//	off size field
//	  0    1 kind      frame kind (below)
//	  1    1 status    responses: a verbs.Status; requests: 0
//	  2    1 flags     requests: bit 0 asks for an acknowledgement
//	  3    1 reserved  must be 0
//	  4    4 len       payload length (read requests: bytes asked for)
//	  8    8 seq       requester's sequence number (responses echo it)
//	 16    8 addr      remote virtual address
//	 24    4 rkey      remote key
//	 28    4 imm       immediate data
//	 32    8 arg0      fetch-add addend / compare-swap compare; atomic responses: the old value;
//	                   accumulates: byte 0 the verbs.AccOp, byte 1 the verbs.ElemType
//	 40    8 arg1      compare-swap swap value
//	 48   16 reserved  must be 0
//
// The header is a cache line long so that a payload starts where the
// frame does, modulo 64, in the kernel's buffers: the sender's kernel
// copies a write into pages it fills from their start, and the receiver's
// kernel copies from there into the target's memory, which is usually
// line-aligned. With the 48-byte header of before, every payload sat 48
// bytes off a line in those pages and both copies ran slower: 8 MiB
// round trips on loopback, 4 alternating rounds, fence2 3.56-3.64 ms ->
// 3.11-3.22, fence3 3.34-3.60 -> 3.08-3.27, get 3.23-3.97 -> 3.08-3.20
// (docs/benchmarks.md, 2026-11-29). A frame whose payload is not a
// multiple of 64 bytes shifts the frames written after it into the same
// page, until the peer has taken them and the kernel starts the page
// again from its beginning; between the legs of a ping-pong it does, and
// padding every payload to a multiple of 64 bytes (tried) changed nothing.
const hdrLen = 64

// maxPayload bounds one frame's payload; larger requests are rejected.
const maxPayload = 1 << 30

// Frame kinds.
const (
	kReqWrite    = 1
	kReqWriteImm = 2
	kReqRead     = 3
	kReqFAA      = 4
	kReqCAS      = 5
	kReqSend     = 6
	kReqAcc      = 7  // accumulate (accumulate.go)
	kReqAccFetch = 8  // accumulate whose old values come back in a kRespRead
	kRespAck     = 16 // cumulative: completes every request up to seq
	kRespRead    = 17 // read data follows
	kRespAtomic  = 18 // arg0 holds the old value
	kRespNak     = 19 // status says why; the connection is torn down after it
	kGoodbye     = 20 // orderly close: seq is the last request of the peer's that was executed
)

// flagAck asks the responder to acknowledge a write or send.
const flagAck = 1

// frame is a decoded header.
type frame struct {
	kind   uint8
	status uint8
	flags  uint8
	len    uint32
	seq    uint64
	addr   uint64
	rkey   uint32
	imm    uint32
	arg0   uint64
	arg1   uint64
}

var errFrame = errors.New("soft: malformed frame")

func (f *frame) encode(b *[hdrLen]byte) {
	b[0] = f.kind
	b[1] = f.status
	b[2], b[3] = f.flags, 0
	binary.LittleEndian.PutUint32(b[4:], f.len)
	binary.LittleEndian.PutUint64(b[8:], f.seq)
	binary.LittleEndian.PutUint64(b[16:], f.addr)
	binary.LittleEndian.PutUint32(b[24:], f.rkey)
	binary.LittleEndian.PutUint32(b[28:], f.imm)
	binary.LittleEndian.PutUint64(b[32:], f.arg0)
	binary.LittleEndian.PutUint64(b[40:], f.arg1)
	clear(b[48:])
}

// decode parses and validates a header. A frame it rejects means the peer
// is broken or hostile: the caller drops the connection.
func (f *frame) decode(b *[hdrLen]byte) error {
	f.kind = b[0]
	f.status = b[1]
	f.flags = b[2]
	if b[3] != 0 || f.flags&^flagsKnown != 0 {
		return fmt.Errorf("%w: reserved bits set", errFrame)
	}
	f.len = binary.LittleEndian.Uint32(b[4:])
	f.seq = binary.LittleEndian.Uint64(b[8:])
	f.addr = binary.LittleEndian.Uint64(b[16:])
	f.rkey = binary.LittleEndian.Uint32(b[24:])
	f.imm = binary.LittleEndian.Uint32(b[28:])
	f.arg0 = binary.LittleEndian.Uint64(b[32:])
	f.arg1 = binary.LittleEndian.Uint64(b[40:])
	if binary.LittleEndian.Uint64(b[48:]) != 0 || binary.LittleEndian.Uint64(b[56:]) != 0 {
		return fmt.Errorf("%w: reserved bytes set", errFrame)
	}
	if f.len > maxPayload {
		return fmt.Errorf("%w: length %d over %d", errFrame, f.len, maxPayload)
	}
	if err := checkGuardFlags(f); err != nil {
		return err
	}
	switch f.kind {
	case kReqWrite, kReqWriteImm, kReqRead, kReqSend:
		if f.status != 0 {
			return fmt.Errorf("%w: status on a request", errFrame)
		}
	case kReqFAA, kReqCAS:
		if f.status != 0 || f.len != 8 {
			return fmt.Errorf("%w: atomic of %d bytes", errFrame, f.len)
		}
	case kReqAcc, kReqAccFetch:
		op, t := accOf(f)
		if f.status != 0 || f.imm != 0 || f.arg1 != 0 || f.arg0>>16 != 0 || !op.Valid(t) {
			return fmt.Errorf("%w: accumulate with bad operation, type or fields", errFrame)
		}
		if f.kind == kReqAccFetch && f.len > maxFetchAcc {
			return fmt.Errorf("%w: fetching accumulate of %d bytes", errFrame, f.len)
		}
	case kRespAck, kRespAtomic, kGoodbye:
		if f.len != 0 || f.status != 0 || f.flags != 0 {
			return fmt.Errorf("%w: response kind %d with length or status", errFrame, f.kind)
		}
	case kRespRead:
		if f.status != 0 {
			return fmt.Errorf("%w: read response with status", errFrame)
		}
	case kRespNak:
		if f.len != 0 || f.status == 0 || f.status > 6 {
			return fmt.Errorf("%w: bad NAK", errFrame)
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", errFrame, f.kind)
	}
	if f.flags&flagAck != 0 && f.kind != kReqWrite && f.kind != kReqWriteImm && f.kind != kReqSend && f.kind != kReqAcc {
		return fmt.Errorf("%w: flags on kind %d", errFrame, f.kind)
	}
	if f.flags&^flagAck != 0 && f.kind != kReqWrite && f.kind != kReqFAA && f.kind != kReqCAS {
		return fmt.Errorf("%w: guard flags on kind %d", errFrame, f.kind)
	}
	return nil
}

// hasPayload reports whether len payload bytes follow the header.
func (f *frame) hasPayload() bool {
	switch f.kind {
	case kReqWrite, kReqWriteImm, kReqSend, kRespRead:
		return true
	case kReqAcc, kReqAccFetch:
		return verbs.AccOp(f.arg0) != verbs.AccNoOp
	}
	return false
}
