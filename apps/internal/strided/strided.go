// Package strided moves non-contiguous data (a column of a row-major
// matrix, say) with rma, which transfers contiguous runs only. Two ways:
//
//   - Pack the elements into a contiguous buffer, Put the buffer once into
//     a landing area of the target's window, and have the target Unpack it
//     after the synchronization: one transfer, two local copies.
//   - PutVector: one Put per element, each straight into its place: no
//     copies, no landing area, but one work request per element (MPI's
//     vector datatype done the naive way).
package strided

import "github.com/rmago/rmago/rma"

// Pack copies count elements of src, the first at start and each stride
// after the previous, into dst[:count].
func Pack[T rma.Number](dst, src []T, start, stride, count int) {
	for i := range count {
		dst[i] = src[start+i*stride]
	}
}

// Unpack copies src into dst at start, start+stride, ...: the inverse of Pack.
func Unpack[T rma.Number](dst []T, start, stride int, src []T) {
	for i, v := range src {
		dst[start+i*stride] = v
	}
}

// PutVector puts count elements of origin (at start, stride apart) into
// rank target's window at tdisp, tstride apart, one Put per element. The
// origin elements must stay unchanged until the synchronization that
// completes the puts.
func PutVector[T rma.Number](win *rma.Window[T], origin []T, start, stride, count, target, tdisp, tstride int) error {
	for i := range count {
		o := start + i*stride
		if err := win.Put(origin[o:o+1], target, tdisp+i*tstride); err != nil {
			return err
		}
	}
	return nil
}
