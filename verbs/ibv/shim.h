//go:build ibv && linux && cgo

// The C side of the ibv provider: flat request and completion descriptors
// that Go fills and reads in C memory, and helpers that do in one cgo call
// what would otherwise take several (posting a chain, polling and
// flattening completions, a CQ wait that sleeps on the completion channel),
// or that wrap what cgo cannot call (macros, unions). The Go files include it;
// post.c, cqwait.c and setup.c define the functions.

#ifndef RG_IBV_SHIM_H
#define RG_IBV_SHIM_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

// Flat, union-free request descriptors that Go fills in C memory; the post
// helpers turn them into ibv_send_wr / ibv_recv_wr chains and post them, all
// in one cgo call.
typedef struct {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t rkey;
	uint32_t imm;      // host byte order; converted here
	uint32_t opcode;   // enum ibv_wr_opcode
	uint32_t flags;    // enum ibv_send_flags
	uint32_t num_sge;
	uint32_t pad;
} rg_swr;

typedef struct {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
} rg_rwr;

// Flat work completion, imm in host byte order.
typedef struct {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t has_imm;
} rg_wc;

// rg_waiter is what a blocking CQ wait needs: the CQ, the completion channel
// it was created on (its fd non-blocking), an eventfd that Close writes to
// end a blocked wait, and the notification state. Only the one goroutine
// holding the CQ's wait lock touches armed and unacked.
typedef struct {
	struct ibv_cq *cq;
	struct ibv_comp_channel *ch;
	int wake;          // eventfd
	int armed;         // notification requested and its event not taken yet
	unsigned unacked;  // events taken, not yet acknowledged
	int slept;         // the last rg_cq_block slept in poll() until an event
} rg_waiter;

// Events are acknowledged in batches: ibv_ack_cq_events takes a lock.
#define RG_ACK_BATCH 64
// rg_cq_block's result when the wake eventfd fired (beyond any -errno).
#define RG_WOKEN (-0x10000)

// A queue pair's send and receive sides and a CQ's poll buffers, in C
// memory, set up once. The calls on the data path take their address as an
// integer: cgo checks every pointer argument of a call for Go pointers,
// which cost a fetch-and-add about 4 % of its time under emulation, and
// these point to C memory only.
typedef struct {
	struct ibv_qp *qp;
	rg_swr *d;                // the requests, flattened (filled by Go)
	struct ibv_sge *sges;     // their SGEs, in order
	struct ibv_send_wr *wrs;  // where rg_post_send builds the chain
} rg_sendq;

typedef struct {
	struct ibv_qp *qp;
	rg_rwr *d;
	struct ibv_sge *sges;
	struct ibv_recv_wr *wrs;
} rg_recvq;

typedef struct {
	struct ibv_cq *cq;
	struct ibv_wc *raw;  // what ibv_poll_cq fills
	rg_wc *out;          // the completions, flattened for Go
} rg_pollq;

// post.c: posting and polling; the first argument is the address of an
// rg_sendq, rg_recvq or rg_pollq.
int64_t rg_post_send(uintptr_t sendq, int n);
int64_t rg_post_recv(uintptr_t recvq, int n);
int rg_poll(uintptr_t pollq, int n);
int rg_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *raw, rg_wc *out);

// cqwait.c: the sleeping half of CQ.Wait.
rg_waiter *rg_create_cq(struct ibv_context *c, int depth);
int rg_destroy_cq(rg_waiter *w);
void rg_wake(rg_waiter *w);
void rg_unwake(rg_waiter *w);
int rg_cq_block(rg_waiter *w, int n, struct ibv_wc *raw, rg_wc *out, int timeout_ms);

// setup.c: devices, ports, GIDs, queue pairs and memory regions.
const char *rg_dev_name(struct ibv_device **l, int i);
struct ibv_device *rg_dev_at(struct ibv_device **l, int i);
int rg_query_port(struct ibv_context *c, int port, struct ibv_port_attr *a);
int rg_query_gid(struct ibv_context *c, int port, int idx, uint8_t *gid, int *type);
struct ibv_qp *rg_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		int max_send_wr, int max_recv_wr, int max_sge, int max_inline, struct ibv_qp_cap *cap);
int rg_probe_inline(struct ibv_context *c);
int rg_qp_init(struct ibv_qp *qp, int port, int access);
int rg_qp_rtr(struct ibv_qp *qp, int port, int mtu, uint32_t dqpn, uint32_t rq_psn,
		int max_dest_rd_atomic, int min_rnr_timer, uint16_t dlid,
		int global, const uint8_t *dgid, int sgid_index);
int rg_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, int max_rd_atomic, int timeout,
		int retry_cnt, int rnr_retry);
int rg_qp_state(struct ibv_qp *qp);
struct ibv_mr *rg_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access);

#endif
