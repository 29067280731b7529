/*
 * gb_barrier: MPI_Barrier latency, µs per call (average over ranks, then the
 * fastest and slowest rank). The size column is 0.
 */
#include "util.h"

#include <stdio.h>

static void call(void *ctx, size_t size) {
    MPI_Barrier(MPI_COMM_WORLD);
}

static void prep(void *ctx, size_t size, uint32_t seed) {}

static size_t check(void *ctx, size_t size, uint32_t seed) {
    return 0;
}

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "barrier", .min_size = 0, .max_size = 0, .iters = 10000, .iters_large = 10000, .warmup = 1000,
                        .warmup_large = 1000, .side = {GB_HOST, GB_HOST}, .flags = GB_NOSIZE};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 1, 0);
    struct gb_coll_ops ops = {call, prep, check};
    size_t errors = 0;
    gb_coll_sweep(&o, &ops, NULL, &errors);
    return gb_finish(errors);
}
