//go:build ibv && linux && cgo

// Posting work requests and polling completions, each in one cgo call.

#include <endian.h>
#include <string.h>

#include "shim.h"

// rg_post_send returns 0, or the error code in the low 32 bits and the
// index of the first request not posted in the high 32 (no out-parameter:
// a pointer to a Go local would make it escape to the heap).
int64_t rg_post_send(uintptr_t sendq, int n) {
	const rg_sendq *q = (const rg_sendq *)sendq;
	const rg_swr *d = q->d;
	struct ibv_send_wr *wrs = q->wrs;
	struct ibv_sge *sg = q->sges;
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wrs[i];
		memset(w, 0, sizeof *w);
		w->wr_id = d[i].wr_id;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		w->sg_list = sg;
		w->num_sge = (int)d[i].num_sge;
		sg += d[i].num_sge;
		w->opcode = (enum ibv_wr_opcode)d[i].opcode;
		w->send_flags = d[i].flags;
		switch (w->opcode) {
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w->imm_data = htobe32(d[i].imm);
			// fall through
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_READ:
			w->wr.rdma.remote_addr = d[i].remote_addr;
			w->wr.rdma.rkey = d[i].rkey;
			break;
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
		case IBV_WR_ATOMIC_CMP_AND_SWP:
			w->wr.atomic.remote_addr = d[i].remote_addr;
			w->wr.atomic.rkey = d[i].rkey;
			w->wr.atomic.compare_add = d[i].compare_add;
			w->wr.atomic.swap = d[i].swap;
			break;
		default:
			break;
		}
	}
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(q->qp, wrs, &bad);
	if (!rc) return 0;
	return (int64_t)(uint32_t)rc | ((int64_t)(bad ? bad - wrs : 0) << 32);
}

// rg_post_recv returns like rg_post_send.
int64_t rg_post_recv(uintptr_t recvq, int n) {
	const rg_recvq *q = (const rg_recvq *)recvq;
	const rg_rwr *d = q->d;
	struct ibv_recv_wr *wrs = q->wrs;
	struct ibv_sge *sg = q->sges;
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &wrs[i];
		w->wr_id = d[i].wr_id;
		w->next = i + 1 < n ? &wrs[i + 1] : NULL;
		w->sg_list = sg;
		w->num_sge = (int)d[i].num_sge;
		sg += d[i].num_sge;
	}
	struct ibv_recv_wr *bad = NULL;
	int rc = ibv_post_recv(q->qp, wrs, &bad);
	if (!rc) return 0;
	return (int64_t)(uint32_t)rc | ((int64_t)(bad ? bad - wrs : 0) << 32);
}

// rg_poll polls up to n completions into the rg_pollq's buffers.
int rg_poll(uintptr_t pollq, int n) {
	const rg_pollq *q = (const rg_pollq *)pollq;
	return rg_poll_cq(q->cq, n, q->raw, q->out);
}

// rg_poll_cq polls up to n completions into raw and flattens them into out.
int rg_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *raw, rg_wc *out) {
	int k = ibv_poll_cq(cq, n, raw);
	for (int i = 0; i < k; i++) {
		out[i].wr_id = raw[i].wr_id;
		out[i].status = raw[i].status;
		out[i].opcode = raw[i].opcode;
		out[i].byte_len = raw[i].byte_len;
		out[i].qp_num = raw[i].qp_num;
		out[i].has_imm = (raw[i].wc_flags & IBV_WC_WITH_IMM) != 0;
		out[i].imm = out[i].has_imm ? be32toh(raw[i].imm_data) : 0;
	}
	return k;
}
