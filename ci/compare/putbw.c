/*
 * putbw.c - the MPI side of the put bandwidth in `make compare`: the
 * OSU-style put_bw with flush synchronization that rmago's
 * `pingpong osu -b put_bw -s flush` runs, definition for definition, so
 * that the MPIs are measured in the same run as rmago (the OSU suite
 * itself is not installed on the comparison machine).
 *
 * usage: putbw SYSTEM-LABEL [minsize=8] [maxsize=1048576] [window=64]
 *   (2 ranks). For each power-of-two size: rank 0 takes a shared lock on
 *   rank 1 once, then runs skip+iters iterations, each putting `window`
 *   messages of the size into consecutive slots of rank 1's window and
 *   flushing; the timer starts after the skipped ones. iters/skip are
 *   OSU's: 100/10 up to 8 KiB, 20/2 above. Bandwidth in MB/s (10^6 B/s).
 *   Rank 1 then checks every byte the puts wrote.
 *
 * Output (rank 0): one JSON report in the shape of rmago's pingpong
 * -json (meta, results), which `pingpong import` and `pingpong table`
 * read. A wrong byte prints DATA VERIFICATION FAILED and exits 3.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(long size, long i) { return (unsigned char)(size * 7 + i * 13 + i / 251); }

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
    int rank, nprocs;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    long minsize = argc > 2 ? atol(argv[2]) : 8;
    long maxsize = argc > 3 ? atol(argv[3]) : 1048576;
    int window = argc > 4 ? atoi(argv[4]) : 64;
    if (argc < 2 || nprocs != 2 || minsize < 1 || maxsize < minsize || window < 1) {
        if (rank == 0) fprintf(stderr, "usage: putbw LABEL [minsize] [maxsize] [window] (2 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    for (int i = 0; i < len; i++) {
        if (lib[i] == '\n' || lib[i] == ',' || lib[i] == '"' || lib[i] == '\\') { lib[i] = 0; break; }
        if (lib[i] < ' ') lib[i] = ' ';
    }
    lib[39] = 0;

    long total = maxsize * window;
    unsigned char *base, *src;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)total, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Alloc_mem((MPI_Aint)total, MPI_INFO_NULL, &src);
    memset(base, 0, total);

    int bad = 0;
    if (rank == 0) {
        printf("{\"meta\":{\"system\":\"%s\",\"library\":\"%s\",\"ranks\":2,\"host\":\"\",\"time\":\"\",\"settle_ms\":25},\"results\":[", argv[1], lib);
    }
    int first = 1;
    for (long size = minsize; size <= maxsize && !bad; size *= 2) {
        int iters = size > 8192 ? 20 : 100, skip = size > 8192 ? 2 : 10;
        MPI_Barrier(MPI_COMM_WORLD);
        if (size == minsize) settle();
        double t0 = 0;
        if (rank == 0) {
            for (long i = 0; i < size * window; i++) src[i] = pattern(size, i);
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            for (int it = 0; it < skip + iters; it++) {
                if (it == skip) t0 = MPI_Wtime();
                for (int k = 0; k < window; k++)
                    MPI_Put(src + k * size, (int)size, MPI_BYTE, 1, (MPI_Aint)(k * size), (int)size, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            double t = MPI_Wtime() - t0;
            MPI_Win_unlock(1, win);
            double mbps = (double)size * window * iters / 1e6 / t;
            printf("%s{\"bench\":\"put_bw\",\"sync\":\"flush\",\"window\":\"allocate\",\"ranks\":2,\"bytes\":%ld,"
                   "\"metric\":\"bandwidth_MBps\",\"iters\":%d,\"reps\":1,\"mean\":%.3f,\"min\":%.3f,\"median\":%.3f,"
                   "\"max\":%.3f,\"samples\":[%.3f],\"verified\":true}",
                   first ? "" : ",", size, iters, mbps, mbps, mbps, mbps, mbps);
            first = 0;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win); /* MPI_Win_sync needs an epoch */
            MPI_Win_sync(win);
            for (long i = 0; i < size * window; i++)
                if (base[i] != pattern(size, i)) {
                    fprintf(stderr, "DATA VERIFICATION FAILED: put_bw %ld B, byte %ld is %u, want %u\n", size, i,
                            base[i], pattern(size, i));
                    bad = 1;
                    break;
                }
            MPI_Win_unlock(1, win);
        }
        MPI_Bcast(&bad, 1, MPI_INT, 1, MPI_COMM_WORLD);
    }
    if (rank == 0) printf("]}\n");
    MPI_Win_free(&win);
    MPI_Free_mem(src);
    MPI_Finalize();
    return bad ? 3 : 0;
}
