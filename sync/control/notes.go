package control

import (
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// Direct notes (transport/directwait.go): where rank r reaches rank t's
// control words directly (Direct: node-local peers on shm), PSCW and fence
// notify t by changing a word of t's region that r alone writes, and t
// polls its own words; other ranks are notified with notifications. After
// the lock words: a bell (its ring and sleepers words, each on a cache
// line of its own), then NoteWords words per sender.
const (
	// NotePost counts the sender's PSCW posts to this rank.
	NotePost = iota
	// NoteComplete counts the sender's PSCW completions to this rank.
	NoteComplete
	// NoteFence is the sender's round-one fence note of the fences of
	// parity 0 (NoteFence+1: parity 1): the fence's number shifted left
	// by one, plus one if the sender put data (sync/fence).
	NoteFence
	// NoteBarrier is the sender's note of a fence's barrier-only rounds
	// (sync/fence's second round and dissemination steps), by parity as
	// NoteFence: the fence's number.
	NoteBarrier = NoteFence + 2
	// NoteWords is the number of note words per sender.
	NoteWords = NoteBarrier + 2
)

// bellBase is the first word of the bell: the first 64-byte boundary after
// the lock protocol's result words. Its ring word is there, its sleepers
// word 8 words (a line) further; the 7 words after ring are NoteSet's
// sources when it writes through a queue pair.
func bellBase(size int) int { return (LockResult(size, size+1) + 7) &^ 7 }

// NoteWord is the word of this rank's region where sender s's note of
// kind (NotePost, ...) lands, in a job of size ranks.
func NoteWord(size, s, kind int) int { return bellBase(size) + 16 + NoteWords*s + kind }

// DirectNotes reports whether rank r is notified through its note words
// rather than with notifications: r is served by a provider that
// completes every request at post (shm), so that a note changed after the
// requests to r follows them. Rank r answers alike about this rank.
func (c *Region) DirectNotes(r int) bool { return c.F.CompletesAtPost(r) }

// Bell is this rank's bell, where its direct waits sleep.
func (c *Region) Bell() transport.Bell { return bellOf(c.words, c.F.Size()) }

func bellOf(words []uint64, size int) transport.Bell {
	b := bellBase(size)
	return transport.Bell{
		Ring:     (*atomic.Uint32)(unsafe.Pointer(&words[b])),
		Sleepers: (*atomic.Uint32)(unsafe.Pointer(&words[b+8])),
	}
}

// NoteSet stores v into rank r's word i (a NoteWord that this rank alone
// writes), r notified directly (DirectNotes), ordered after every earlier
// store of this goroutine and request to r, and wakes r's direct waits if
// they sleep. Where r's words are mapped (Direct) the store does not wait
// for the word's cache line, which r's waits read: the core goes on (a
// locked add would stall until the line arrived, a few hundred
// nanoseconds with r spinning). Otherwise (the mapping failed) it is an
// 8-byte write to r, complete at post, and r's sleeping waits see it at
// their next look (AwaitDirect's slices). It fails, as a notification
// would, if r's queue pair has failed.
func (c *Region) NoteSet(r, i int, v uint64) error {
	w := c.Direct(r)
	if w == nil {
		// The source: this rank's spare bell word of i's kind, which only
		// notes of that kind (one caller at a time) use.
		size := c.F.Size()
		src := bellBase(size) + 1 + (i-NoteWord(size, 0, 0))%NoteWords
		c.Store(src, v)
		_, err := c.F.Write(r, c.LocalAt(src), c.RemoteAt(r, i), 8)
		return err
	}
	if err := c.F.DirectReady(r); err != nil {
		return err
	}
	storeRelease(&w[i], v)
	bellOf(w, c.F.Size()).Alert()
	return nil
}
