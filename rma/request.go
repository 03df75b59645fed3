package rma

// Request is a request-based operation in flight (MPI_Rput and friends).
// Until Wait or Test reports it complete, the origin buffer belongs to the
// library: do not modify it (RPut, RAccumulate) or read it (RGet,
// RGetAccumulate). A completed RPut or RAccumulate is complete at the
// target; a completed RGet has its data in the origin slice. The zero
// Request is complete.
type Request struct {
	w      *World
	rank   int
	seq    uint64 // the operation's last work request; 0: nothing pending
	staged bool   // Get data still to be copied out of the bounce buffer
	err    error
}

// Wait blocks until the operation has completed and returns its error.
func (r *Request) Wait() error {
	if r.seq == 0 || r.err != nil {
		return r.err
	}
	r.err = r.w.f.Wait(r.rank, r.seq)
	if r.err == nil && r.staged {
		r.w.stageMu.Lock()
		r.err = r.w.stage.retireThrough(r.rank, r.seq)
		r.w.stageMu.Unlock()
	}
	r.seq = 0
	return r.err
}

// Test reports, without blocking, whether the operation has completed
// (and its error if it failed). It makes progress on the way.
func (r *Request) Test() (bool, error) {
	if r.seq == 0 || r.err != nil {
		return true, r.err
	}
	done, err := r.w.f.Test(r.rank, r.seq)
	if err != nil {
		r.err, r.seq = err, 0
		return true, err
	}
	if !done {
		return false, nil
	}
	return true, r.Wait()
}

// RPut is Put returning a Request to wait for its completion.
func (win *Window[T]) RPut(origin []T, target, disp int) (Request, error) {
	return win.transfer(true, origin, target, disp)
}

// RGet is Get returning a Request: after Wait, origin holds the data.
func (win *Window[T]) RGet(origin []T, target, disp int) (Request, error) {
	return win.transfer(false, origin, target, disp)
}

// RAccumulate is Accumulate returning a Request.
func (win *Window[T]) RAccumulate(origin []T, target, disp int, op Op) (Request, error) {
	if err := checkOp[T](op, false); err != nil {
		return Request{}, err
	}
	return win.accumulateReq(origin, nil, target, disp, op)
}

// RGetAccumulate is GetAccumulate returning a Request: after Wait, result
// holds the old values.
func (win *Window[T]) RGetAccumulate(origin, result []T, target, disp int, op Op) (Request, error) {
	if err := checkOp[T](op, true); err != nil {
		return Request{}, err
	}
	if len(result) != len(origin) {
		return Request{}, errSizes(len(origin), len(result))
	}
	return win.accumulateReq(origin, result, target, disp, op)
}
