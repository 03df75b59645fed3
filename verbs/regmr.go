package verbs

import "fmt"

// CheckRegMR applies the contract's rule for PD.RegMR arguments, the same
// for every provider: the region is not empty, access holds only known
// flags, and remote write or remote atomic access comes with local write
// (as ibv_reg_mr demands). It returns nil or an error wrapping ErrInvalid.
func CheckRegMR(buf []byte, access Access) error {
	if len(buf) == 0 {
		return fmt.Errorf("%w: empty memory region", ErrInvalid)
	}
	if access&^AccessAll != 0 {
		return fmt.Errorf("%w: access flags %#x", ErrInvalid, uint32(access))
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return fmt.Errorf("%w: remote write or atomic access needs local write", ErrInvalid)
	}
	return nil
}
