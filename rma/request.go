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
	r.err = r.w.f.Await(r.rank, r.seq)
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
	var req Request
	err := win.transfer(&req, true, origin, target, disp, false)
	return req, win.callErr("RPut", target, disp, err)
}

// RGet is Get returning a Request: after Wait, origin holds the data.
func (win *Window[T]) RGet(origin []T, target, disp int) (Request, error) {
	var req Request
	err := win.transfer(&req, false, origin, target, disp, false)
	return req, win.callErr("RGet", target, disp, err)
}

// RAccumulate is Accumulate returning a Request.
func (win *Window[T]) RAccumulate(origin []T, target, disp int, op Op) (Request, error) {
	if err := checkOp[T](op, false); err != nil {
		return Request{}, win.accErr("RAccumulate", op, target, disp, err)
	}
	req, err := win.accumulateReq(origin, nil, target, disp, op)
	return req, win.accErr("RAccumulate", op, target, disp, err)
}

// RGetAccumulate is GetAccumulate returning a Request: after Wait, result
// holds the old values.
func (win *Window[T]) RGetAccumulate(origin, result []T, target, disp int, op Op) (Request, error) {
	err := checkOp[T](op, true)
	if err == nil && len(result) != len(origin) {
		err = errSizes(len(origin), len(result))
	}
	if err != nil {
		return Request{}, win.accErr("RGetAccumulate", op, target, disp, err)
	}
	req, err := win.accumulateReq(origin, result, target, disp, op)
	return req, win.accErr("RGetAccumulate", op, target, disp, err)
}
