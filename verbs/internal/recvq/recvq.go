// Package recvq is a queue pair's receive queue in the software providers
// (soft, shm): the receive requests posted to it (PostRecv), which the
// sends and writes with immediate data that arrive take in order, or a
// failure flushes.
//
// A Queue is not safe for concurrent use: its queue pair's mutex guards
// it.
package recvq

// MaxSGE is the most segments a receive request scatters into.
const MaxSGE = 4

// Entry is a posted receive request.
type Entry struct {
	ID   uint64         // the work request's ID, for its completion
	NSeg int            // segments in Seg
	Seg  [MaxSGE][]byte // where a send's data goes, in order
}

// Queue holds up to its depth posted receives, oldest first.
type Queue struct {
	ents    []Entry
	head, n int
}

// New returns an empty queue of depth entries (at least one).
func New(depth int) Queue {
	return Queue{ents: make([]Entry, max(depth, 1))}
}

// Len is how many receives are posted.
func (q *Queue) Len() int { return q.n }

// Full reports whether no more receives fit.
func (q *Queue) Full() bool { return q.n == len(q.ents) }

// Push adds e after the others; the caller has checked Full.
func (q *Queue) Push(e *Entry) {
	q.ents[(q.head+q.n)%len(q.ents)] = *e
	q.n++
}

// Head is the oldest receive, to be filled in place and then Dropped;
// the queue must not be empty.
func (q *Queue) Head() *Entry { return &q.ents[q.head] }

// Drop removes the oldest receive, letting go of its segments.
func (q *Queue) Drop() {
	q.ents[q.head] = Entry{}
	q.head = (q.head + 1) % len(q.ents)
	q.n--
}

// Pop removes the oldest receive and returns it; the queue must not be
// empty.
func (q *Queue) Pop() Entry {
	e := q.ents[q.head]
	q.Drop()
	return e
}
