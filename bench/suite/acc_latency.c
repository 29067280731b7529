/*
 * gb_acc_latency: one-sided accumulate latency, as OSU's osu_acc_latency with
 * its defaults (MPI_Win_allocate, passive target): rank 0 holds a shared lock
 * on rank 1 and times MPI_Accumulate(MPI_SUM) of `size` bytes of MPI_INT +
 * MPI_Win_flush; µs per call by message size (multiples of 4 bytes). -c:
 * rank 1 checks the sums at each size.
 */
#include "util.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "acc_latency", .min_size = 4, .max_size = 4 << 20, .iters = 10000,
                        .iters_large = 1000, .warmup = 1000, .warmup_large = 100, .side = {GB_HOST, GB_HOST}};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 2, 0);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gb_header(&o, "Size       Latency(us)");
    size_t errors = 0;
    int *win_mem, *src = gb_alloc(o.max_size, GB_HOST);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)o.max_size, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win_mem, &win);
    for (size_t i = 0; i < o.max_size / sizeof(int); i++)
        src[i] = (int)(i % 7) + 1;
    GB_SIZES(&o, size) {
        int n = (int)(size / sizeof(int));
        if (n == 0)
            continue;
        if (rank == 1) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            memset(win_mem, 0, size);
            MPI_Win_unlock(1, win);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        int iters = gb_iters(&o, size), warm = gb_warmup(&o, size);
        if (rank == 0) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            for (int i = 0; i < warm; i++) {
                MPI_Accumulate(src, n, MPI_INT, 1, 0, n, MPI_INT, MPI_SUM, win);
                MPI_Win_flush(1, win);
            }
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                MPI_Accumulate(src, n, MPI_INT, 1, 0, n, MPI_INT, MPI_SUM, win);
                MPI_Win_flush(1, win);
            }
            double t = MPI_Wtime() - t0;
            MPI_Win_unlock(1, win);
            printf("%-10zu %12.3f\n", size, t / iters * 1e6);
            fflush(stdout);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1 && o.validate) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            for (int i = 0; i < n; i++)
                if (win_mem[i] != (long)src[i] * (iters + warm)) {
                    errors++;
                    if (errors == 1)
                        fprintf(stderr, "acc_latency: element %d of %zu B: %d, want %ld\n", i, size,
                                win_mem[i], (long)src[i] * (iters + warm));
                }
            MPI_Win_unlock(1, win);
        }
    }
    MPI_Win_free(&win);
    gb_free(src, GB_HOST);
    return gb_finish(errors);
}
