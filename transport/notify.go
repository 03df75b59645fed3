package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/rmago/rmago/verbs"
)

// Notifications: zero-length RDMA writes with immediate data, counted by
// tag as the target's posted receives take them, and by sender, so that a
// wait can tell a sender that failed or left before it notified (the wait
// fails at once) from one that notified and then left (it counts).

// tagNotes counts the notifications of one tag that arrived and were not
// consumed yet: in all, and by sender.
type tagNotes struct {
	n    int
	from []int32 // by rank
}

// notesOf returns tag's counts, made on first use; f.mu held.
func (f *Fabric) notesOf(tag uint32) *tagNotes {
	t := f.notes[tag]
	if t == nil {
		t = &tagNotes{from: make([]int32, f.size)}
		f.notes[tag] = t
	}
	return t
}

// noteCount is how many notifications with tag wait; f.mu held.
func (f *Fabric) noteCount(tag uint32) int {
	if t := f.notes[tag]; t != nil {
		return t.n
	}
	return 0
}

// noteArrived records a notification from rank r; f.mu held.
func (f *Fabric) noteArrived(tag uint32, r int) {
	t := f.notesOf(tag)
	t.n++
	t.from[r]++
}

// consume takes count notifications of t, one per sender (each sender of
// a round sends one: barriers and fences alternate tags between rounds, so
// a tag never holds two rounds of a sender); f.mu held.
func (t *tagNotes) consume(count int) {
	t.n -= count
	for r := range t.from {
		if count == 0 {
			return
		}
		if t.from[r] > 0 {
			t.from[r]--
			count--
		}
	}
}

// delivered reports whether rank r's notification for the running wait
// (f.scan) has arrived; f.mu held.
func (f *Fabric) delivered(r int) bool {
	if f.scan.arrived != nil && f.scan.arrived(r) {
		return true
	}
	for _, tag := range f.scan.tags[:f.scan.ntags] {
		if t := f.notes[tag]; t != nil && t.from[r] > 0 {
			return true
		}
	}
	return false
}

// Notify sends rank r a notification carrying tag, ordered after every
// request posted to r before it: when r sees the tag, it sees their effects.
func (f *Fabric) Notify(r int, tag uint32) error {
	p, err := f.peerOf(r)
	if err != nil {
		return fmt.Errorf("notifying rank %d: %w", r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	p.noteWR = verbs.SendWR{Op: verbs.OpWriteImm, Imm: tag}
	_, err = f.postLocked(p, &p.noteWR)
	return err
}

// NotifySoon is Notify for a notification the provider may hold briefly
// to send with the requests that follow (verbs.Coalesce): on soft, until
// this process next posts a request that leaves at once, polls or waits
// on the fabric, or at most the provider's cork delay.
func (f *Fabric) NotifySoon(r int, tag uint32) error {
	p, err := f.peerOf(r)
	if err != nil {
		return fmt.Errorf("notifying rank %d: %w", r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	p.noteWR = verbs.SendWR{Op: verbs.OpWriteImm, Imm: tag, Flags: verbs.Coalesce}
	_, err = f.postLocked(p, &p.noteWR)
	return err
}

// NotifySignaled is Notify as a signalled request: it returns the
// sequence number to Wait for, whose completion says the notification and
// every request posted to r before it have completed.
func (f *Fabric) NotifySignaled(r int, tag uint32) (uint64, error) {
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("notifying rank %d: %w", r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	p.noteWR = verbs.SendWR{Op: verbs.OpWriteImm, Imm: tag, Flags: verbs.Signaled}
	return f.postLocked(p, &p.noteWR)
}

// TakeNote consumes one notification with tag from rank r if one has
// arrived, and reports whether it did. It does not make progress: callers
// polling for notes drive the fabric with Progress (Poller).
func (f *Fabric) TakeNote(tag uint32, r int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.notes[tag]
	if t == nil || t.from[r] == 0 {
		return false
	}
	t.from[r]--
	t.n--
	return true
}

// HasNote reports whether a notification with tag from rank r has
// arrived and not been consumed, without consuming it or making progress.
func (f *Fabric) HasNote(tag uint32, r int) bool {
	return f.HasEitherNote(tag, tag, r)
}

// HasEitherNote is HasNote for a notification tagged a or b.
func (f *Fabric) HasEitherNote(a, b uint32, r int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tag := range [2]uint32{a, b} {
		if t := f.notes[tag]; t != nil && t.from[r] > 0 {
			return true
		}
	}
	return false
}

// AwaitNotes waits until count notifications with tag have arrived (from
// any ranks) and consumes them. from lists the ranks expected to send one
// each: if one of them fails or leaves the job before its notification
// arrived, the wait fails at once instead of waiting for the timeout (one
// that notified and then left counts).
func (f *Fabric) AwaitNotes(tag uint32, count int, from func(yield func(int) bool)) error {
	return f.AwaitNotesGrace(tag, count, from, 0)
}

// AwaitNotesGrace is AwaitNotes with its own grace for failure notices
// once the timeout has passed (0: NoticeGrace, as AwaitNotes). A chain of waits,
// each for a rank that is itself waiting, ends at the rank that waits for
// the failed one: giving the waits nearer that end shorter graces lets it
// give the failed rank up, and tell the others, before they blame the
// healthy rank they wait for (the fence's dissemination steps).
func (f *Fabric) AwaitNotesGrace(tag uint32, count int, from func(yield func(int) bool), grace time.Duration) error {
	op := waitOp{what: "notification wait", rank: -1, tags: [2]uint32{tag}, ntags: 1, count: count, grace: grace}
	err := f.waitFor(func() bool { return f.noteCount(tag) >= count }, op, from)
	if err == nil {
		f.mu.Lock()
		f.notesOf(tag).consume(count)
		f.mu.Unlock()
	}
	return err
}

// AwaitNoteFrom waits until a notification with tag from rank r has
// arrived, blocking in the completion queues, and consumes it. It fails
// at once if r fails or leaves before its notification arrived, or if any
// other rank fails (not one that left in order): r may be stuck on it. On
// timeout it waits the grace for failure notices before it blames r, as
// AwaitNotes does.
func (f *Fabric) AwaitNoteFrom(tag uint32, r int) error {
	var failed error
	op := waitOp{what: "notification wait", rank: -1, tags: [2]uint32{tag}, ntags: 1, count: 1}
	err := f.waitFor(func() bool { // f.mu held
		if t := f.notes[tag]; t != nil && t.from[r] > 0 {
			return true
		}
		for s := range f.size {
			if e := f.Err(s); s != f.rank && e != nil && !errors.Is(e, ErrPeerGone) {
				failed = fmt.Errorf("notification wait: rank %d failed: %w", s, e)
				return true
			}
		}
		return false
	}, op, func(yield func(int) bool) { yield(r) })
	if err == nil && failed != nil {
		return failed
	}
	if err == nil {
		f.mu.Lock()
		t := f.notes[tag]
		t.from[r]--
		t.n--
		f.mu.Unlock()
	}
	return err
}

// AwaitNoteEach waits until a notification with tag has arrived from each
// rank of ranks, consuming none, blocking in the completion queues as the
// fabric's other waits do. A rank of ranks whose connection ends before
// its notification arrived ends the wait at once, and so does any rank of
// watch that failed (ErrPeer without ErrPeerGone), even after its own
// notification arrived: the ranks still missing may be stuck on it. On
// timeout the error names the ranks whose notification is missing.
func (f *Fabric) AwaitNoteEach(tag uint32, ranks, watch []int) error {
	var failed error
	ready := func() bool { // f.mu held
		for _, r := range watch {
			if e := f.Err(r); e != nil && !errors.Is(e, ErrPeerGone) {
				failed = fmt.Errorf("rank %d failed: %w", r, e)
				return true
			}
		}
		t := f.notes[tag]
		for _, r := range ranks {
			if t == nil || t.from[r] == 0 {
				return false
			}
		}
		return true
	}
	each := func(yield func(int) bool) {
		for _, r := range ranks {
			if !yield(r) {
				return
			}
		}
	}
	if f.progs != nil && f.blocker == nil {
		// Soft alone (or with ibv): drive it between looks. With shm
		// beside it, the blocker wakes the wait for either (waitcq.go).
		return f.pollNoteEach(tag, ranks, ready, &failed)
	}
	op := waitOp{what: "notification wait", rank: -1, tags: [2]uint32{tag}, ntags: 1, count: len(ranks)}
	if err := f.waitFor(ready, op, each); err != nil {
		return err
	}
	return failed
}

// pollNoteEach is AwaitNoteEach on a fabric with a provider this process
// drives (soft): a Poller, which drives it between looks, answers the
// notification sooner there than a wait in its completion queue (PSCW
// ping-pong, 8 B: 46 against 51-55 µs).
func (f *Fabric) pollNoteEach(tag uint32, ranks []int, ready func() bool, failed *error) error {
	w := f.NewPoller()
	defer w.Done()
	for {
		f.mu.Lock()
		ok := ready()
		f.mu.Unlock()
		if ok {
			return *failed
		}
		for _, r := range ranks {
			if e := f.Err(r); e != nil && !f.HasNote(tag, r) {
				return fmt.Errorf("notification wait: rank %d: %w", r, e)
			}
		}
		if r := f.firstLeft(ranks, isLeave(tag), func(r int) bool { return f.HasNote(tag, r) }); r >= 0 {
			return fmt.Errorf("notification wait: %w", f.leftWait(r, tag>>28 == TagFence))
		}
		if w.Pause() {
			continue
		}
		if w.Grace() {
			continue
		}
		var missing []int
		for _, r := range ranks {
			if !f.HasNote(tag, r) {
				missing = append(missing, r)
			}
		}
		return fmt.Errorf("%w: notification wait: %d of %d notifications (tag %#x) arrived; none from %s within %v",
			ErrTimeout, len(ranks)-len(missing), len(ranks), tag, RankList(missing), f.timeout)
	}
}

// AwaitNotesEither waits until count notifications tagged a or b have
// arrived in all, consumes them, and reports how many carried b. Every
// other rank is expected to send one; one that fails or leaves before it
// did fails the wait at once.
func (f *Fabric) AwaitNotesEither(a, b uint32, count int) (int, error) {
	return f.AwaitNotesEitherFrom(a, b, count, f.othersFn)
}

// AwaitNotesEitherFrom is AwaitNotesEither with the ranks expected to send
// one each listed by from (count of them), as AwaitNotes has them.
func (f *Fabric) AwaitNotesEitherFrom(a, b uint32, count int, from func(yield func(int) bool)) (int, error) {
	return f.AwaitNotesEitherGrace(a, b, count, from, 0)
}

// AwaitNotesEitherGrace is AwaitNotesEitherFrom with its own grace for
// failure notices once the timeout has passed, as AwaitNotesGrace has it.
func (f *Fabric) AwaitNotesEitherGrace(a, b uint32, count int, from func(yield func(int) bool), grace time.Duration) (int, error) {
	op := waitOp{what: "notification wait", rank: -1, tags: [2]uint32{a, b}, ntags: 2, count: count, grace: grace}
	err := f.waitFor(func() bool { return f.noteCount(a)+f.noteCount(b) >= count }, op, from)
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ta, tb := f.notesOf(a), f.notesOf(b)
	nb := min(tb.n, count)
	tb.n -= nb
	ta.n -= count - nb
	// Each sender sent one of the two.
	for r := range ta.from {
		if ta.from[r] > 0 {
			ta.from[r]--
		} else if tb.from[r] > 0 {
			tb.from[r]--
		}
	}
	return nb, nil
}

// TestNotify consumes count notifications with tag if they have arrived,
// making progress once without blocking.
func (f *Fabric) TestNotify(tag uint32, count int) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.polling {
		if _, err := f.pollLocked(); err != nil {
			return false, err
		}
	}
	if f.noteCount(tag) >= count {
		f.notesOf(tag).consume(count)
		return true, nil
	}
	return false, nil
}
