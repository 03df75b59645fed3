package verbs

import "fmt"

// CheckAccumulate applies the contract's post-time rule for an
// OpAccumulate work request, the checks a provider makes before it looks
// at keys: a reduction the element type has (AccOp.Valid), a remote
// address aligned to the element size, whole elements in every SGE, and
// for a fetching accumulate at most maxFetch bytes in all (the provider's
// DeviceAttr.MaxFetchAccumulate). It returns nil or an error wrapping
// ErrInvalid, and allocates only when it fails.
func CheckAccumulate(wr *SendWR, maxFetch uint64) error {
	a := wr.Acc
	if !a.Op.Valid(a.Type) {
		return fmt.Errorf("%w: accumulate %d on element type %d", ErrInvalid, a.Op, a.Type)
	}
	es := uint64(a.Type.Size())
	if wr.RemoteAddr%es != 0 {
		return fmt.Errorf("%w: accumulate of %d-byte elements at remote address %#x", ErrInvalid, es, wr.RemoteAddr)
	}
	var total uint64
	for _, s := range wr.SGL {
		if uint64(s.Length)%es != 0 {
			return fmt.Errorf("%w: accumulate SGE of %d bytes, not whole %d-byte elements", ErrInvalid, s.Length, es)
		}
		total += uint64(s.Length)
	}
	if a.Fetch && total > maxFetch {
		return fmt.Errorf("%w: fetching accumulate of %d bytes (max %d)", ErrInvalid, total, maxFetch)
	}
	return nil
}
