/*
 * gb_fop_latency: one-sided fetch-and-op latency, as OSU's osu_fop_latency
 * with its defaults (MPI_Win_allocate, passive target): rank 0 holds a shared
 * lock on rank 1 and times MPI_Fetch_and_op(MPI_SUM) of one 8-byte integer +
 * MPI_Win_flush; µs per call (one row, size 8). -c: the fetched values count
 * up by one.
 */
#include "util.h"

#include <stdio.h>

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "fop_latency", .min_size = 8, .max_size = 8, .iters = 10000,
                        .iters_large = 10000, .warmup = 1000, .warmup_large = 1000, .side = {GB_HOST, GB_HOST}};
    gb_parse(argc, argv, &o);
    o.min_size = o.max_size = 8;
    gb_init(&argc, &argv, &o, 2, 0);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gb_header(&o, "Size       Latency(us)");
    size_t errors = 0;
    long long *win_mem, one = 1, old = -1;
    MPI_Win win;
    MPI_Win_allocate(8, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &win_mem, &win);
    if (rank == 1) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
        *win_mem = 0;
        MPI_Win_unlock(1, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
        for (int i = 0; i < o.warmup; i++) {
            MPI_Fetch_and_op(&one, &old, MPI_LONG_LONG, 1, 0, MPI_SUM, win);
            MPI_Win_flush(1, win);
        }
        double t0 = MPI_Wtime();
        for (int i = 0; i < o.iters; i++) {
            MPI_Fetch_and_op(&one, &old, MPI_LONG_LONG, 1, 0, MPI_SUM, win);
            MPI_Win_flush(1, win);
            if (o.validate && old != (long long)o.warmup + i)
                errors++;
        }
        double t = MPI_Wtime() - t0;
        MPI_Win_unlock(1, win);
        printf("%-10d %12.3f\n", 8, t / o.iters * 1e6);
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    return gb_finish(errors);
}
