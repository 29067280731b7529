/*
 * gb_get_bw: one-sided get bandwidth, as OSU's osu_get_bw with its defaults
 * (MPI_Win_allocate, passive target): rank 0 holds a shared lock on rank 1
 * and times a window of MPI_Get (-W, default 64) followed by MPI_Win_flush;
 * MB/s (10^6 bytes per second) by message size. -c: rank 0 checks what the
 * last get of each size read.
 */
#include "util.h"

#include <stdio.h>

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "get_bw", .min_size = 1, .max_size = 4 << 20, .iters = 100, .iters_large = 20,
                        .warmup = 10, .warmup_large = 2, .window = 64, .side = {GB_HOST, GB_HOST},
                        .flags = GB_WINDOW};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 2, 0);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gb_header(&o, "Size       Bandwidth(MB/s)");
    size_t errors = 0;
    char *win_mem, *dst = gb_alloc(o.max_size, GB_HOST);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)o.max_size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_mem, &win);
    GB_SIZES(&o, size) {
        uint32_t seed = (uint32_t)size * 3u;
        if (rank == 1) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            gb_fill(win_mem, size, GB_HOST, seed);
            MPI_Win_unlock(1, win);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        int iters = gb_iters(&o, size), warm = gb_warmup(&o, size);
        if (rank == 0) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            double t0 = 0;
            for (int i = -warm; i < iters; i++) {
                if (i == 0)
                    t0 = MPI_Wtime();
                for (int k = 0; k < o.window; k++)
                    MPI_Get(dst, (int)size, MPI_CHAR, 1, 0, (int)size, MPI_CHAR, win);
                MPI_Win_flush(1, win);
            }
            double t = MPI_Wtime() - t0;
            MPI_Win_unlock(1, win);
            printf("%-10zu %12.2f\n", size, (double)size * o.window * iters / t / 1e6);
            fflush(stdout);
            if (o.validate)
                errors += gb_check(dst, size, GB_HOST, seed, "get_bw");
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_free(&win);
    gb_free(dst, GB_HOST);
    return gb_finish(errors);
}
