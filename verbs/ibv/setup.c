//go:build ibv && linux && cgo

// Devices, ports, GIDs, queue pair creation and state changes, memory
// registration: wrappers for what cgo cannot call directly (macros,
// unions, structs to fill) and the inline-size probe.

#include <string.h>

#include "shim.h"

const char *rg_dev_name(struct ibv_device **l, int i) { return ibv_get_device_name(l[i]); }
struct ibv_device *rg_dev_at(struct ibv_device **l, int i) { return l[i]; }

// ibv_query_port is a macro.
int rg_query_port(struct ibv_context *c, int port, struct ibv_port_attr *a) {
	return ibv_query_port(c, (uint8_t)port, a);
}

// rg_query_gid reads GID table entry idx: its 16 bytes and type
// (IBV_GID_TYPE_*). Returns 0 on success.
int rg_query_gid(struct ibv_context *c, int port, int idx, uint8_t *gid, int *type) {
	struct ibv_gid_entry e;
	memset(&e, 0, sizeof e);
	int rc = ibv_query_gid_ex(c, (uint32_t)port, (uint32_t)idx, &e, 0);
	if (rc) {
		// Older kernels: plain GID, type unknown.
		union ibv_gid g;
		if (ibv_query_gid(c, (uint8_t)port, idx, &g)) return rc;
		memcpy(gid, g.raw, 16);
		*type = -1;
		return 0;
	}
	memcpy(gid, e.gid.raw, 16);
	*type = (int)e.gid_type;
	return 0;
}

struct ibv_qp *rg_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		int max_send_wr, int max_recv_wr, int max_sge, int max_inline, struct ibv_qp_cap *cap) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = (uint32_t)max_send_wr;
	a.cap.max_recv_wr = (uint32_t)max_recv_wr;
	a.cap.max_send_sge = (uint32_t)max_sge;
	a.cap.max_recv_sge = (uint32_t)max_sge;
	a.cap.max_inline_data = (uint32_t)max_inline;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (qp) *cap = a.cap;
	return qp;
}

// rg_probe_inline finds the largest inline size the device grants a small
// RC queue pair, trying 1024 bytes and halving; -1 if none works.
int rg_probe_inline(struct ibv_context *c) {
	struct ibv_pd *pd = ibv_alloc_pd(c);
	if (!pd) return -1;
	struct ibv_cq *cq = ibv_create_cq(c, 4, NULL, NULL, 0);
	if (!cq) { ibv_dealloc_pd(pd); return -1; }
	static const int tries[] = {1024, 512, 256, 128, 64, 32, 0};
	int got = -1;
	for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
		struct ibv_qp_cap cap;
		struct ibv_qp *qp = rg_create_qp(pd, cq, cq, 4, 4, 1, tries[i], &cap);
		if (qp) {
			got = (int)cap.max_inline_data;
			ibv_destroy_qp(qp);
			break;
		}
	}
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return got;
}

int rg_qp_init(struct ibv_qp *qp, int port, int access) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	a.qp_access_flags = (unsigned)access;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int rg_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t dqpn, uint32_t rq_psn,
		int max_dest_rd_atomic, int min_rnr_timer, uint16_t dlid,
		int global, const uint8_t *dgid, int sgid_index) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = (uint8_t)max_dest_rd_atomic;
	a.min_rnr_timer = (uint8_t)min_rnr_timer;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = 0;
	a.ah_attr.src_path_bits = 0;
	a.ah_attr.port_num = (uint8_t)port;
	if (global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.flow_label = 0;
		a.ah_attr.grh.traffic_class = 0;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int rg_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, int max_rd_atomic, int timeout,
		int retry_cnt, int rnr_retry) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = (uint8_t)max_rd_atomic;
	a.timeout = (uint8_t)timeout;
	a.retry_cnt = (uint8_t)retry_cnt;
	a.rnr_retry = (uint8_t)rnr_retry;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
}

// rg_qp_state queries the current state of a queue pair (-errno on failure).
int rg_qp_state(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	return rc ? -rc : (int)a.qp_state;
}

struct ibv_mr *rg_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access) {
	return ibv_reg_mr(pd, (void *)addr, len, access);
}
