package verbs

import (
	"errors"
	"testing"
)

func TestCheckRegMR(t *testing.T) {
	buf := make([]byte, 8)
	for _, c := range []struct {
		buf    []byte
		access Access
		ok     bool
	}{
		{buf, AccessAll, true},
		{buf, AccessRemoteRead, true},
		{buf, 0, true},
		{nil, AccessAll, false},
		{buf, AccessAll << 1, false},
		{buf, AccessRemoteWrite, false},
		{buf, AccessRemoteAtomic | AccessRemoteRead, false},
	} {
		err := CheckRegMR(c.buf, c.access)
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckRegMR(%d bytes, %#x) = %v, want ok %v", len(c.buf), uint32(c.access), err, c.ok)
		}
	}
}

func TestCheckAccumulate(t *testing.T) {
	sum64 := Accumulate{Op: AccSum, Type: Int64}
	for i, c := range []struct {
		wr SendWR
		ok bool
	}{
		{SendWR{SGL: []SGE{{Length: 16}, {Length: 8}}, RemoteAddr: 8, Acc: sum64}, true},
		{SendWR{SGL: []SGE{{Length: 0}}, RemoteAddr: 0, Acc: sum64}, true},
		{SendWR{SGL: []SGE{{Length: 64}}, RemoteAddr: 0, Acc: Accumulate{Op: AccSum, Type: Int64, Fetch: true}}, true},
		{SendWR{SGL: []SGE{{Length: 3}}, RemoteAddr: 1, Acc: Accumulate{Op: AccBXor, Type: Uint8}}, true},
		{SendWR{SGL: []SGE{{Length: 8}}, Acc: Accumulate{Op: AccBAnd, Type: Float64}}, false},                         // no such reduction
		{SendWR{SGL: []SGE{{Length: 8}}, Acc: Accumulate{Op: AccNoOp + 1, Type: Int64}}, false},                       // unknown reduction
		{SendWR{SGL: []SGE{{Length: 8}}, Acc: Accumulate{Op: AccSum}}, false},                                         // unknown type
		{SendWR{SGL: []SGE{{Length: 8}}, RemoteAddr: 4, Acc: sum64}, false},                                           // misaligned
		{SendWR{SGL: []SGE{{Length: 8}, {Length: 6}}, Acc: sum64}, false},                                             // not whole elements
		{SendWR{SGL: []SGE{{Length: 64}, {Length: 8}}, Acc: Accumulate{Op: AccSum, Type: Int64, Fetch: true}}, false}, // over the fetch limit
	} {
		err := CheckAccumulate(&c.wr, 64)
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: CheckAccumulate = %v, want ok %v", i, err, c.ok)
		}
	}
}

func TestCheckQPAttr(t *testing.T) {
	dev := DeviceAttr{Provider: "test", MaxQPWR: 16, MaxSGE: 4}
	for _, c := range []struct {
		send, recv, sge int
		ok              bool
	}{
		{1, 0, 1, true},
		{16, 16, 4, true},
		{0, 0, 1, false},
		{17, 0, 1, false},
		{1, -1, 1, false},
		{1, 17, 1, false},
		{1, 0, 5, false},
	} {
		err := CheckQPAttr(QPAttr{MaxSendWR: c.send, MaxRecvWR: c.recv, MaxSGE: c.sge}, dev)
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckQPAttr(send %d, recv %d, sge %d) = %v, want ok %v", c.send, c.recv, c.sge, err, c.ok)
		}
	}
}
