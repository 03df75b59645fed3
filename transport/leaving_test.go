package transport

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLeaveWaitPassesFailedRankThatLeft: rank 2 sent rank 0 its leave
// note; rank 0, whose fence missed rank 2's note, then counts it failed
// (leftMidFence). Rank 0's leave barrier wait must still wait for rank 1,
// here until its timeout: a wait that ended at once on rank 2 closed rank
// 0's connections under rank 1, still in the fence with it, whose fence
// then named rank 0 rather than rank 2 (rma's TestCloseEndsWaitsForIt, 1
// run in 160).
func TestLeaveWaitPassesFailedRankThatLeft(t *testing.T) {
	fs := openFabrics(t, 3, time.Second) // rank 0's wait ends at it
	if err := fs[2].Notify(0, leaveTag); err != nil {
		t.Fatal(err)
	}
	if err := waitNotes(fs[0], leaveTag, 1); err != nil {
		t.Fatal(err)
	}
	p := fs[0].peers[2].Load()
	if p == nil {
		t.Fatal("rank 0 is not connected to rank 2, whose note came")
	}
	fs[0].leftMidFence(2, p, leftError(2))
	err := fs[0].AwaitNotes(leaveTag, 2, fs[0].othersFn)
	if !errors.Is(err, ErrTimeout) || strings.Contains(err.Error(), "rank 2") {
		t.Fatalf("rank 0's leave wait, rank 1 not left: %v (want a timeout missing rank 1 alone)", err)
	}
	t.Log(err)
}

// TestFenceWaitNamesFailedBeforeGone: in a fence wait, rank 1 closed its
// connection before its note and rank 2 failed (its connection broke).
// The wait names rank 2: ranks leave because of another's failure, so a
// rank gone before its note counts as the fence's failure only when no
// rank failed, whatever the order the wait looks at them in.
func TestFenceWaitNamesFailedBeforeGone(t *testing.T) {
	fs := openFabrics(t, 3, hangBound)
	tag := MakeTag(TagFence, 1, 0)
	// Connect rank 0 to both before they go, as a fence's earlier rounds
	// would have.
	for _, r := range []int{1, 2} {
		if err := fs[r].Notify(0, tag^1); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitNotes(fs[0], tag^1, 2); err != nil {
		t.Fatal(err)
	}
	crash(t, fs[2])
	fs[1].Close()
	if err := awaitGone(fs[0], 1); err != nil {
		t.Fatal(err)
	}
	w := fs[0].NewPoller()
	for fs[0].Err(2) == nil && w.Pause() {
	}
	w.Done()
	err := fs[0].AwaitNotes(tag, 2, func(yield func(int) bool) { _ = yield(1) && yield(2) })
	if !errors.Is(err, ErrPeer) || errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "rank 2") || strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("rank 0's fence wait: %v (want rank 2's failure)", err)
	}
	t.Log(err)
}
