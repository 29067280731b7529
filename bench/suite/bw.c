/*
 * gb_bw: point-to-point bandwidth, rank 0 to rank 1: each iteration posts a
 * window of MPI_Isend (rank 0) / MPI_Irecv (rank 1), waits for all, and rank 1
 * acknowledges. MB/s (10^6 bytes per second) by message size.
 */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "bw", .min_size = 1, .max_size = 4 << 20, .iters = 100, .iters_large = 20,
                        .warmup = 10, .warmup_large = 2, .window = 64, .side = {GB_HOST, GB_HOST},
                        .flags = GB_PT2PT | GB_WINDOW};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 2, 0);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gb_header(&o, "Size       Bandwidth(MB/s)");
    size_t errors = 0;
    int nbufs = o.validate ? o.window : 1;
    enum gb_mem mem = o.side[rank < 2 ? rank : 0];
    char **bufs = calloc((size_t)nbufs, sizeof *bufs);
    for (int k = 0; rank < 2 && k < nbufs; k++)
        bufs[k] = gb_alloc(o.max_size, mem);
    GB_SIZES(&o, size) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank >= 2)
            continue;
        double t = gb_bw_loop(&o, rank == 0, 1 - rank, bufs, nbufs, mem, size, &errors);
        if (rank == 0) {
            printf("%-10zu %14.2f\n", size, (double)size * o.window * gb_iters(&o, size) / t / 1e6);
            fflush(stdout);
        }
    }
    for (int k = 0; rank < 2 && k < nbufs; k++)
        gb_free(bufs[k], mem);
    free(bufs);
    return gb_finish(errors);
}
