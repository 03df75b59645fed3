//go:build ibv && linux && cgo

// The sleeping half of CQ.Wait: a CQ with its completion channel and a
// wake eventfd, armed, polled and slept on in one cgo call.

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "shim.h"

// rg_create_cq makes a completion channel with a non-blocking fd, the wake
// eventfd, and a CQ of depth entries that reports to the channel. NULL with
// errno set on failure.
rg_waiter *rg_create_cq(struct ibv_context *c, int depth) {
	rg_waiter *w = calloc(1, sizeof *w);
	if (!w) {
		errno = ENOMEM;
		return NULL;
	}
	w->wake = -1;
	int fl;
	if (!(w->ch = ibv_create_comp_channel(c))) goto fail;
	if ((fl = fcntl(w->ch->fd, F_GETFL)) < 0 || fcntl(w->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) goto fail;
	if ((w->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) goto fail;
	if (!(w->cq = ibv_create_cq(c, depth, NULL, w->ch, 0))) goto fail;
	return w;
fail:;
	int e = errno;
	if (w->wake >= 0) close(w->wake);
	if (w->ch) ibv_destroy_comp_channel(w->ch);
	free(w);
	errno = e ? e : EIO;
	return NULL;
}

// rg_destroy_cq acknowledges the events taken (ibv_destroy_cq waits for
// that), destroys the CQ, then the channel and the eventfd.
int rg_destroy_cq(rg_waiter *w) {
	if (w->unacked) {
		ibv_ack_cq_events(w->cq, w->unacked);
		w->unacked = 0;
	}
	int rc = ibv_destroy_cq(w->cq);
	if (rc) return rc;
	ibv_destroy_comp_channel(w->ch);
	close(w->wake);
	free(w);
	return 0;
}

// rg_wake ends a blocked rg_cq_block (and every later one until rg_unwake).
void rg_wake(rg_waiter *w) {
	uint64_t one = 1;
	if (write(w->wake, &one, sizeof one) < 0) { } // full counter: already woken
}

void rg_unwake(rg_waiter *w) {
	uint64_t v;
	if (read(w->wake, &v, sizeof v) < 0) { } // EAGAIN: was not woken
}

// rg_take_event takes one event from the channel without blocking and
// acknowledges events in batches. 1: took one (the CQ is no longer armed),
// 0: none pending, -errno on failure.
static int rg_take_event(rg_waiter *w) {
	struct ibv_cq *ev;
	void *ev_ctx;
	if (ibv_get_cq_event(w->ch, &ev, &ev_ctx) != 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
		return errno ? -errno : -EIO;
	}
	w->armed = 0;
	if (++w->unacked >= RG_ACK_BATCH) {
		ibv_ack_cq_events(w->cq, w->unacked);
		w->unacked = 0;
	}
	return 1;
}

// rg_cq_block is the sleeping half of CQ.Wait, in one cgo call. If the CQ
// is still armed from an earlier call, take the event its later completions
// may have raised (they were polled since), so that poll() sleeps for new
// ones only. Arm the CQ for the next completion unless it is armed, poll
// once more (a completion that came before the arming raised no event),
// sleep in poll() on the channel's fd for at most timeout_ms, take the
// event, and poll the CQ. Returns the number of completions (0 after a
// timeout, a signal or a spurious wake-up: the caller loops), RG_WOKEN if
// the wake eventfd fired, or -errno. w->slept says whether an event ended
// a sleep in poll() (for the caller's estimate of what a sleep costs).
int rg_cq_block(rg_waiter *w, int n, struct ibv_wc *raw, rg_wc *out, int timeout_ms) {
	int k;
	w->slept = 0;
	if (w->armed && (k = rg_take_event(w)) < 0) return k;
	if (!w->armed) {
		int rc = ibv_req_notify_cq(w->cq, 0);
		if (rc) return -(rc > 0 ? rc : EIO);
		w->armed = 1;
		if ((k = rg_poll_cq(w->cq, n, raw, out)) != 0) return k < 0 ? -EIO : k;
	}
	struct pollfd p[2] = {{.fd = w->ch->fd, .events = POLLIN}, {.fd = w->wake, .events = POLLIN}};
	int r = poll(p, 2, timeout_ms);
	if (r < 0 && errno != EINTR) return -errno;
	if (r > 0 && p[1].revents) return RG_WOKEN;
	if (r > 0 && p[0].revents) {
		// The channel serves this CQ alone and only the waiter takes its
		// events; the fd is non-blocking all the same.
		if ((k = rg_take_event(w)) < 0) return k;
		w->slept = k;
		// An error on the channel (the device went away) with no event to
		// take would make poll() return at once for ever.
		if (!k && (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))) return -EIO;
	}
	k = rg_poll_cq(w->cq, n, raw, out);
	return k < 0 ? -EIO : k;
}
