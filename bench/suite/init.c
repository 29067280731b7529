/*
 * gb_init: how long MPI_Init takes. Each rank reads a monotonic clock around
 * MPI_Init; rank 0 prints the number of ranks, then the slowest, average and
 * fastest rank's MPI_Init in milliseconds. (The launcher's part of start-up is
 * in gb_hello's wall time, which bench/compare measures from outside.)
 */
#include "util.h"

#include <stdio.h>
#include <time.h>

int main(int argc, char **argv) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    MPI_Init(&argc, &argv);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    struct gb_opts o = {.name = "init", .iters = 1, .iters_large = 1, .side = {GB_HOST, GB_HOST},
                        .flags = GB_NOSIZE};
    gb_parse(argc, argv, &o);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    double mx = 0, mn = 0, sum = 0;
    MPI_Reduce(&ms, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&ms, &mn, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&ms, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    gb_header(&o, "Ranks      Max(ms)      Avg(ms)      Min(ms)");
    if (rank == 0)
        printf("%-10d %12.2f %12.2f %12.2f\n", n, mx, sum / n, mn);
    return gb_finish(0);
}
