package pscw

import (
	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// Direct notes (sync/control's notes.go): a rank whose control words this
// rank reaches directly (a node-local peer on shm) is posted to and
// completed to by adding one to its count of this rank's posts or
// completions; it polls its own counts, and remembers how many of each it
// has taken. The other ranks get notifications. Every request to a rank
// reached directly has completed at post, so a Complete's count follows
// the access epoch's puts as its notification would.

// directState is the direct notes' side of a PSCW.
type directState struct {
	c         *control.Region
	postTaken []uint64 // by sender: posts taken (by Start)
	doneTaken []uint64 // by sender: completions taken (by Wait, Test)
	postSent  []uint64 // by target: posts sent (Post)
	doneSent  []uint64 // by target: completions sent (Complete)
	start     transport.DirectWait
	wait      transport.DirectWait
	// Scratch of the access side (Start) and of the exposure side (Wait),
	// which may run at once: a group split into the ranks reached
	// directly and the others.
	access, exposure groupSplit
}

type groupSplit struct{ direct, notes []int }

func (p *PSCW) initDirect(c *control.Region) {
	d := &p.d
	d.c = c
	d.postTaken, d.doneTaken = make([]uint64, p.size), make([]uint64, p.size)
	d.postSent, d.doneSent = make([]uint64, p.size), make([]uint64, p.size)
	d.start = transport.DirectWait{What: "pscw: start: waiting for posts", Tag: p.postTag, Bell: c.Bell(), Arrived: p.postArrived}
	d.wait = transport.DirectWait{What: "pscw: wait", Tag: p.completeTag, Bell: c.Bell(), Arrived: p.completeArrived}
}

// direct reports whether rank r gets and sends direct notes.
func (p *PSCW) direct(r int) bool { return p.d.c.DirectNotes(r) }

// postArrived reports whether a post from r that no Start took has come.
func (p *PSCW) postArrived(r int) bool {
	return p.d.c.Load(control.NoteWord(p.size, r, control.NotePost)) > p.d.postTaken[r]
}

// completeArrived reports whether a completion from r that no Wait took
// has come.
func (p *PSCW) completeArrived(r int) bool {
	return p.d.c.Load(control.NoteWord(p.size, r, control.NoteComplete)) > p.d.doneTaken[r]
}

// split divides group into the ranks reached directly and the others, in
// s's slices.
func (p *PSCW) split(s *groupSplit, group []int) (direct, notes []int) {
	s.direct, s.notes = s.direct[:0], s.notes[:0]
	for _, r := range group {
		if p.direct(r) {
			s.direct = append(s.direct, r)
		} else {
			s.notes = append(s.notes, r)
		}
	}
	return s.direct, s.notes
}

// notePost tells r of a post, directly: this rank alone writes its count
// there, so it stores the new count (NoteSet: no wait for the line).
func (p *PSCW) notePost(r int) error {
	if err := p.d.c.NoteSet(r, control.NoteWord(p.size, p.me, control.NotePost), p.d.postSent[r]+1); err != nil {
		return err
	}
	p.d.postSent[r]++
	return nil
}

// noteComplete tells r of a completion, directly, as notePost.
func (p *PSCW) noteComplete(r int) error {
	if err := p.d.c.NoteSet(r, control.NoteWord(p.size, p.me, control.NoteComplete), p.d.doneSent[r]+1); err != nil {
		return err
	}
	p.d.doneSent[r]++
	return nil
}
