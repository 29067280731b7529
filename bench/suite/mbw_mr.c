/*
 * gb_mbw_mr: multi-pair bandwidth and message rate. With n ranks, rank i < n/2
 * sends to rank i + n/2 in windows of MPI_Isend (as gb_bw does), all pairs at
 * once. Prints the aggregate MB/s and messages per second by size; the time is
 * the slowest pair's.
 */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "mbw_mr", .min_size = 1, .max_size = 4 << 20, .iters = 100, .iters_large = 20,
                        .warmup = 10, .warmup_large = 2, .window = 64, .side = {GB_HOST, GB_HOST},
                        .flags = GB_PT2PT | GB_WINDOW};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 2, 1);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int pairs = n / 2, sender = rank < pairs, peer = sender ? rank + pairs : rank - pairs;
    gb_header(&o, "Size       MB/s           Messages/s");
    size_t errors = 0;
    int nbufs = o.validate ? o.window : 1;
    enum gb_mem mem = o.side[sender ? 0 : 1];
    char **bufs = calloc((size_t)nbufs, sizeof *bufs);
    for (int k = 0; k < nbufs; k++)
        bufs[k] = gb_alloc(o.max_size, mem);
    GB_SIZES(&o, size) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = gb_bw_loop(&o, sender, peer, bufs, nbufs, mem, size, &errors), tmax = 0;
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double msgs = (double)pairs * o.window * gb_iters(&o, size);
            printf("%-10zu %14.2f %14.0f\n", size, msgs * (double)size / tmax / 1e6, msgs / tmax);
            fflush(stdout);
        }
    }
    for (int k = 0; k < nbufs; k++)
        gb_free(bufs[k], mem);
    free(bufs);
    return gb_finish(errors);
}
