/*
 * pp.c - the MPI side of `make compare`: the same one-to-one and
 * one-to-many RMA ping-pongs as rmago's pingpong command, protocol for
 * protocol, so that the two can be set side by side. Derived from the
 * project's baseline ping-pong (shared/mpi-baseline/pp.c).
 *
 * usage: pp BENCH MODE [minexp=0] [maxexp=20] [reps=12] [warmup=1] [iters=0]
 *   BENCH oneone (2 ranks): MODE fence3 fence2 pscw lock lockall get
 *   BENCH onemany (N ranks): MODE fence3 fence2 pscw
 *   sizes n = 2^minexp .. 2^maxexp doubles; iters = round trips per
 *   repetition (0: 200*1024/n clamped to 2..200, as pingpong); warmup =
 *   untimed repetitions per size.
 *
 * One round trip (rank 0 = root, peers 1..N-1):
 *   fence3  fence; root puts n doubles to every peer; fence; each peer puts
 *           them back into its own slot of the root's window; fence
 *   fence2  the same without the first fence (steady state)
 *   pscw    root: start(peers) put complete post(peers) wait;
 *           peer: post(root) wait start(root) put complete
 *   lock    each leg: lock(EXCLUSIVE, peer); put data; flush(peer);
 *           accumulate(REPLACE) the peer's flag; unlock(peer). The peer
 *           polls its flag with an atomic load, calling MPI_Iprobe for
 *           progress, then reads the data
 *   lockall as lock inside one lock_all epoch per rank, with flushes and
 *           MPI_Win_sync after the flag is seen
 *   get     fence; rank 1 gets n doubles from rank 0; fence; rank 0 gets
 *           them back; fence
 * Every round trip stamps the first, middle and last element with the
 * round number and both sides check them; warm-up round trips and one
 * after the timed ones stamp and check every element. A mismatch marks
 * the line BAD and the program exits 3.
 *
 * Output (rank 0), one CSV line per size:
 *   lib,bench,mode,ranks,n_doubles,bytes,iters,reps,ok,t1,...,tR
 * with each repetition's time per round trip in microseconds.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nprocs, bad;
static long maxn;
static double *base, *src; /* window memory; the root's origin buffer */
static MPI_Win win;
static MPI_Group peers_group;
static long round_no;

static double stamp(long r, long i) { return (double)(((uint64_t)r << 24) | ((uint64_t)i & 0xffffff)); }

/* for_stamped calls f on the elements a round trip stamps */
#define FOR_STAMPED(n, full, i, body)                                   \
    do {                                                                \
        if (full) {                                                     \
            for (long i = 0; i < (n); i++) body;                        \
        } else {                                                        \
            long idx_[3] = {0, (n) / 2, (n) - 1};                       \
            for (int k_ = 0; k_ < 3; k_++) { long i = idx_[k_]; body; } \
        }                                                               \
    } while (0)

static void fill(double *b, long n, int full) { FOR_STAMPED(n, full, i, b[i] = stamp(round_no, i)); }

static void check(const double *b, long n, int full, const char *where) {
    FOR_STAMPED(n, full, i, {
        if (b[i] != stamp(round_no, i)) {
            if (!bad)
                fprintf(stderr, "DATA VERIFICATION FAILED: rank %d %s, round %ld, element %ld is %g, want %g\n",
                        rank, where, round_no, i, b[i], stamp(round_no, i));
            bad = 1;
        }
    });
}

static double *slot(int r, long n) { return base + (long)(r - 1) * n; }

static void put_round(long n, int full, int three) {
    round_no++;
    if (three) MPI_Win_fence(0, win);
    if (rank == 0) {
        fill(src, n, full);
        for (int r = 1; r < nprocs; r++) MPI_Put(src, n, MPI_DOUBLE, r, 0, n, MPI_DOUBLE, win);
    }
    MPI_Win_fence(0, win);
    if (rank != 0) {
        check(base, n, full, "after the root's put");
        MPI_Put(base, n, MPI_DOUBLE, 0, (MPI_Aint)(rank - 1) * n, n, MPI_DOUBLE, win);
    }
    MPI_Win_fence(0, win);
    if (rank == 0)
        for (int r = 1; r < nprocs; r++) check(slot(r, n), n, full, "root, a peer's slot");
}

static void pscw_round(long n, int full) {
    round_no++;
    if (rank == 0) {
        fill(src, n, full);
        MPI_Win_start(peers_group, 0, win);
        for (int r = 1; r < nprocs; r++) MPI_Put(src, n, MPI_DOUBLE, r, 0, n, MPI_DOUBLE, win);
        MPI_Win_complete(win);
        MPI_Win_post(peers_group, 0, win);
        MPI_Win_wait(win);
        for (int r = 1; r < nprocs; r++) check(slot(r, n), n, full, "root, a peer's slot");
    } else {
        MPI_Win_post(peers_group, 0, win);
        MPI_Win_wait(win);
        check(base, n, full, "after the root's put");
        MPI_Win_start(peers_group, 0, win);
        MPI_Put(base, n, MPI_DOUBLE, 0, (MPI_Aint)(rank - 1) * n, n, MPI_DOUBLE, win);
        MPI_Win_complete(win);
    }
}

static void poll_flag(double seq, int all) {
    volatile double *flag = base + maxn;
    int fl;
    for (;;) {
        double v;
        __atomic_load((double *)flag, &v, __ATOMIC_ACQUIRE);
        if (v == seq) break;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &fl, MPI_STATUS_IGNORE);
    }
    if (all) MPI_Win_sync(win);
}

static void send_leg(const double *out, long n, double seq, int all) {
    int peer = 1 - rank;
    if (!all) MPI_Win_lock(MPI_LOCK_EXCLUSIVE, peer, 0, win);
    MPI_Put(out, n, MPI_DOUBLE, peer, 0, n, MPI_DOUBLE, win);
    MPI_Win_flush(peer, win);
    MPI_Accumulate(&seq, 1, MPI_DOUBLE, peer, maxn, 1, MPI_DOUBLE, MPI_REPLACE, win);
    if (all)
        MPI_Win_flush(peer, win);
    else
        MPI_Win_unlock(peer, win);
}

static void lock_round(long n, int full, int all) {
    round_no++;
    double seq = (double)round_no;
    if (rank == 0) {
        fill(src, n, full);
        send_leg(src, n, seq, all);
        poll_flag(seq, all);
        check(base, n, full, "after the put back");
    } else {
        poll_flag(seq, all);
        check(base, n, full, "after the put");
        send_leg(base, n, seq, all);
    }
}

static void get_round(long n, int full) {
    round_no++;
    if (rank == 0) fill(base, n, full);
    MPI_Win_fence(0, win);
    if (rank == 1) MPI_Get(base, n, MPI_DOUBLE, 0, 0, n, MPI_DOUBLE, win);
    MPI_Win_fence(0, win);
    if (rank == 1)
        check(base, n, full, "after its get");
    else
        MPI_Get(src, n, MPI_DOUBLE, 1, 0, n, MPI_DOUBLE, win);
    MPI_Win_fence(0, win);
    if (rank == 0) check(src, n, full, "after its get");
}

static const char *mode;

static void round_trip(long n, int full) {
    if (!strcmp(mode, "fence3")) put_round(n, full, 1);
    else if (!strcmp(mode, "fence2")) put_round(n, full, 0);
    else if (!strcmp(mode, "pscw")) pscw_round(n, full);
    else if (!strcmp(mode, "lock")) lock_round(n, full, 0);
    else if (!strcmp(mode, "lockall")) lock_round(n, full, 1);
    else get_round(n, full);
}

/* settle keeps the rank busy for 25 ms right before its first
 * measurement, once the ranks have met, as rmago's pingpong does
 * (pingpong/settle.go: a fresh Go process is slower for its first
 * milliseconds), so that both sides start measuring alike. */
static void settle(void) {
    double end = MPI_Wtime() + 0.025;
    while (MPI_Wtime() < end) {}
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: pp oneone|onemany MODE [minexp] [maxexp] [reps] [warmup] [iters]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *bench = argv[1];
    mode = argv[2];
    int minexp = argc > 3 ? atoi(argv[3]) : 0;
    int maxexp = argc > 4 ? atoi(argv[4]) : 20;
    int reps = argc > 5 ? atoi(argv[5]) : 12;
    int warmup = argc > 6 ? atoi(argv[6]) : 1;
    int fixed_iters = argc > 7 ? atoi(argv[7]) : 0;
    int one = !strcmp(bench, "oneone");
    int known = one ? (!strcmp(mode, "fence3") || !strcmp(mode, "fence2") || !strcmp(mode, "pscw") ||
                       !strcmp(mode, "lock") || !strcmp(mode, "lockall") || !strcmp(mode, "get"))
                    : (!strcmp(bench, "onemany") &&
                       (!strcmp(mode, "fence3") || !strcmp(mode, "fence2") || !strcmp(mode, "pscw")));
    if (!known || (one && nprocs != 2) || nprocs < 2 || reps < 1 || minexp < 0 || maxexp < minexp) {
        if (rank == 0) fprintf(stderr, "pp: bad arguments (%s %s, %d ranks)\n", bench, mode, nprocs);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    for (int i = 0; i < len; i++)
        if (lib[i] == '\n' || lib[i] == ',') { lib[i] = 0; break; }
    lib[39] = 0;

    maxn = 1L << maxexp;
    /* the root holds a slot per peer; oneone keeps a flag after the data.
       Windows are padded to whole pages: MPICH 4.0.2 misplaces passive-
       target puts into windows of other sizes (baselines.md). */
    long elems = (rank == 0 ? (long)(nprocs - 1) * maxn : maxn) + 1;
    elems = (elems + 511) / 512 * 512;
    MPI_Win_allocate((MPI_Aint)elems * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, elems * sizeof(double));
    MPI_Alloc_mem((MPI_Aint)maxn * sizeof(double), MPI_INFO_NULL, &src);
    memset(src, 0, maxn * sizeof(double));
    MPI_Group world_group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    if (rank == 0) {
        int *ranks = malloc(sizeof(int) * nprocs);
        for (int r = 1; r < nprocs; r++) ranks[r - 1] = r;
        MPI_Group_incl(world_group, nprocs - 1, ranks, &peers_group);
        free(ranks);
    } else {
        int zero = 0;
        MPI_Group_incl(world_group, 1, &zero, &peers_group);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    settle();

    int f2 = !strcmp(mode, "fence2"), lall = !strcmp(mode, "lockall");
    if (f2) MPI_Win_fence(0, win);
    if (lall) MPI_Win_lock_all(0, win);
    double *times = malloc(sizeof(double) * reps);
    for (int e = minexp; e <= maxexp; e++) {
        long n = 1L << e;
        int iters = fixed_iters;
        if (!iters) {
            long t = 200L * 1024 / n;
            iters = t < 2 ? 2 : (t > 200 ? 200 : (int)t);
        }
        for (int i = 0; i < warmup * iters; i++) round_trip(n, 1);
        for (int r = 0; r < reps; r++) {
            if (strcmp(mode, "fence3")) MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int it = 0; it < iters; it++) round_trip(n, 0);
            times[r] = (MPI_Wtime() - t0) * 1e6 / iters;
        }
        round_trip(n, 1);
        int gbad;
        MPI_Allreduce(&bad, &gbad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("%s,%s,%s,%d,%ld,%ld,%d,%d,%s", lib, bench, mode, nprocs, n, n * 8, iters, reps, gbad ? "BAD" : "ok");
            for (int r = 0; r < reps; r++) printf(",%.3f", times[r]);
            printf("\n");
            fflush(stdout);
        }
        if (gbad) break;
    }
    if (lall) MPI_Win_unlock_all(win);
    if (f2 || !strcmp(mode, "fence3") || !strcmp(mode, "get")) MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    MPI_Barrier(MPI_COMM_WORLD);
    int gbad;
    MPI_Allreduce(&bad, &gbad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Group_free(&peers_group);
    MPI_Group_free(&world_group);
    MPI_Win_free(&win);
    MPI_Free_mem(src);
    free(times);
    MPI_Finalize();
    return gbad ? 3 : 0;
}
