package soft

import (
	"bufio"
	"bytes"
	"io"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// FuzzResponder feeds arbitrary bytes to the responder as if a peer sent
// them: it must never panic, and memory outside the registered region must
// stay untouched whatever the frames say.
func FuzzResponder(f *testing.F) {
	var hb [hdrLen]byte
	add := func(fr frame, payload []byte) {
		fr.encode(&hb)
		f.Add(append(append([]byte{}, hb[:]...), payload...))
	}
	add(frame{kind: kReqWrite, len: 4}, []byte{1, 2, 3, 4})
	add(frame{kind: kReqRead, len: 8}, nil)
	add(frame{kind: kReqFAA, len: 8, arg0: 1}, nil)
	add(frame{kind: kReqCAS, len: 8, arg0: 0, arg1: 9}, nil)
	add(frame{kind: kReqAcc, len: 8, rkey: 1, addr: 40, arg0: uint64(verbs.AccSum) | uint64(verbs.Int64)<<8}, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	add(frame{kind: kReqAcc, len: 3, rkey: 1, addr: 127, arg0: uint64(verbs.AccMax) | uint64(verbs.Uint8)<<8}, []byte{9, 9, 9})
	add(frame{kind: kReqAccFetch, len: 8, rkey: 1, addr: 36, arg0: uint64(verbs.AccReplace) | uint64(verbs.Float32)<<8}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	add(frame{kind: kReqAccFetch, len: 16, rkey: 1, addr: 32, arg0: uint64(verbs.AccNoOp) | uint64(verbs.Int16)<<8}, nil)
	add(frame{kind: kReqAcc, len: 16, rkey: 1, addr: 32, arg0: uint64(verbs.AccNoOp) | uint64(verbs.Int64)<<8}, nil)
	add(frame{kind: kRespAck, seq: 1}, nil)
	f.Add([]byte("garbage"))

	// One device, region and queue pair for the whole run: each input is
	// fed to the responder as a fresh request stream.
	ctx, err := provider{}.Open("", verbs.Config{Secret: []byte("k")})
	if err != nil {
		f.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	mem := make([]byte, 192)
	const guard = 64 // bytes before and after the region must never change
	mr, _ := pd.RegMR(mem[guard:2*guard], verbs.AccessAll)
	cq, _ := ctx.CreateCQ(1 << 16)
	v, _ := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 8, MaxRecvWR: 8})
	q := v.(*qp)
	q.respCh = make(chan response, 1<<16)

	f.Fuzz(func(t *testing.T, data []byte) {
		q.nakSent.Store(false)
		// Patch the fuzz input's addresses and keys to hit the region
		// sometimes: frames with rkey 1 are given the real key and an
		// address relative to the region.
		buf := append([]byte{}, data...)
		for off := 0; off+hdrLen <= len(buf); off += hdrLen {
			var fr frame
			copy(hb[:], buf[off:])
			if fr.decode(&hb) == nil && fr.rkey == 1 {
				fr.rkey = mr.RKey()
				fr.addr = mr.Addr() + fr.addr%128 - 32
				fr.encode(&hb)
				copy(buf[off:], hb[:])
			}
		}
		br := bufio.NewReader(bytes.NewReader(buf))
		var fr frame
		for {
			if _, err := io.ReadFull(br, hb[:]); err != nil {
				break
			}
			if fr.decode(&hb) != nil {
				break
			}
			if fr.kind >= kRespAck {
				break // responses to requests never made are rejected by complete()
			}
			if err := q.execute(br, &fr); err != nil {
				break
			}
		}
		for len(q.respCh) > 0 {
			r := <-q.respCh
			r.sent(q)
		}
		if !bytes.Equal(mem[:guard], make([]byte, guard)) || !bytes.Equal(mem[2*guard:], make([]byte, guard)) {
			t.Fatalf("memory outside the region changed")
		}
	})
}
