/*
 * gb_bcast: MPI_Bcast latency from root 0, µs per call by message size
 * (average over ranks, fastest rank, slowest rank).
 */
#include "util.h"

#include <stdio.h>

struct ctx {
    char *buf;
    enum gb_mem mem;
    int rank;
};

static void call(void *c, size_t size) {
    struct ctx *x = c;
    MPI_Bcast(x->buf, (int)size, MPI_CHAR, 0, MPI_COMM_WORLD);
}

static void prep(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    if (x->rank == 0)
        gb_fill(x->buf, size, x->mem, seed);
    else
        gb_set(x->buf, size, x->mem, 0xa5);
}

static size_t check(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    return x->rank == 0 ? 0 : gb_check(x->buf, size, x->mem, seed, "bcast");
}

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "bcast", .min_size = 1, .max_size = 1 << 20, .iters = 1000, .iters_large = 100,
                        .warmup = 100, .warmup_large = 10, .side = {GB_HOST, GB_HOST}};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 1, 0);
    struct ctx x = {.mem = o.side[0]};
    MPI_Comm_rank(MPI_COMM_WORLD, &x.rank);
    x.buf = gb_alloc(o.max_size, x.mem);
    struct gb_coll_ops ops = {call, prep, check};
    size_t errors = 0;
    gb_coll_sweep(&o, &ops, &x, &errors);
    gb_free(x.buf, x.mem);
    return gb_finish(errors);
}
