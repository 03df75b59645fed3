package verbs

import "fmt"

// CheckQPAttr applies the contract's rule for CreateQP's work queues
// against a device's limits: a send queue of 1 to dev.MaxQPWR requests, a
// receive queue of 0 to dev.MaxQPWR, and at most dev.MaxSGE
// scatter-gather entries a request. It returns nil or an error wrapping
// ErrInvalid that names dev.Provider.
func CheckQPAttr(attr QPAttr, dev DeviceAttr) error {
	if attr.MaxSendWR <= 0 || attr.MaxRecvWR < 0 || attr.MaxSendWR > dev.MaxQPWR || attr.MaxRecvWR > dev.MaxQPWR {
		return fmt.Errorf("%w: queue depths %d/%d", ErrInvalid, attr.MaxSendWR, attr.MaxRecvWR)
	}
	if attr.MaxSGE > dev.MaxSGE {
		return fmt.Errorf("%w: %d SGEs, %s supports %d", ErrInvalid, attr.MaxSGE, dev.Provider, dev.MaxSGE)
	}
	return nil
}
