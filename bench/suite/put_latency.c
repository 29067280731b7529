/*
 * gb_put_latency: one-sided put latency, as OSU's osu_put_latency with its
 * defaults (window from MPI_Win_allocate, passive target): rank 0 holds a
 * shared lock on rank 1 and times MPI_Put + MPI_Win_flush; µs per put by
 * message size. Rank 1 (and any other rank) only waits in the barriers, so
 * an MPI whose passive target needs the target's progress pays for it here.
 * -c: rank 1 checks the last message of each size.
 */
#include "util.h"

#include <stdio.h>

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "put_latency", .min_size = 0, .max_size = 4 << 20, .iters = 10000,
                        .iters_large = 1000, .warmup = 1000, .warmup_large = 100, .side = {GB_HOST, GB_HOST}};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 2, 0);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gb_header(&o, "Size       Latency(us)");
    size_t errors = 0;
    char *win_mem, *src = gb_alloc(o.max_size, GB_HOST);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)o.max_size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_mem, &win);
    GB_SIZES(&o, size) {
        MPI_Barrier(MPI_COMM_WORLD);
        int iters = gb_iters(&o, size), warm = gb_warmup(&o, size);
        uint32_t seed = (uint32_t)size;
        if (rank == 0) {
            gb_fill(src, size, GB_HOST, seed);
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            for (int i = 0; i < warm; i++) {
                MPI_Put(src, (int)size, MPI_CHAR, 1, 0, (int)size, MPI_CHAR, win);
                MPI_Win_flush(1, win);
            }
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                MPI_Put(src, (int)size, MPI_CHAR, 1, 0, (int)size, MPI_CHAR, win);
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
            errors += gb_check(win_mem, size, GB_HOST, seed, "put_latency");
            MPI_Win_unlock(1, win);
        }
    }
    MPI_Win_free(&win);
    gb_free(src, GB_HOST);
    return gb_finish(errors);
}
