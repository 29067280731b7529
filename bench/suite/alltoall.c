/*
 * gb_alltoall: MPI_Alltoall latency, µs per call by message size (bytes each
 * rank sends to each other rank).
 */
#include "util.h"

#include <stdio.h>

struct ctx {
    char *sbuf, *rbuf;
    enum gb_mem mem;
    int rank, n;
};

static void call(void *c, size_t size) {
    struct ctx *x = c;
    MPI_Alltoall(x->sbuf, (int)size, MPI_CHAR, x->rbuf, (int)size, MPI_CHAR, MPI_COMM_WORLD);
}

/* The block rank `from` sends to rank `to`. */
static uint32_t block_seed(uint32_t seed, int from, int to, int n) {
    return seed + (uint32_t)(from * n + to) * 131u;
}

static void prep(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    for (int d = 0; d < x->n; d++)
        gb_fill(x->sbuf + (size_t)d * size, size, x->mem, block_seed(seed, x->rank, d, x->n));
    gb_set(x->rbuf, size * (size_t)x->n, x->mem, 0xa5);
}

static size_t check(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    size_t bad = 0;
    for (int s = 0; s < x->n; s++)
        bad += gb_check(x->rbuf + (size_t)s * size, size, x->mem, block_seed(seed, s, x->rank, x->n), "alltoall");
    return bad;
}

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "alltoall", .min_size = 1, .max_size = 1 << 20, .iters = 1000,
                        .iters_large = 100, .warmup = 100, .warmup_large = 10, .side = {GB_HOST, GB_HOST}};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 1, 0);
    struct ctx x = {.mem = o.side[0]};
    MPI_Comm_rank(MPI_COMM_WORLD, &x.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &x.n);
    x.sbuf = gb_alloc(o.max_size * (size_t)x.n, x.mem);
    x.rbuf = gb_alloc(o.max_size * (size_t)x.n, x.mem);
    struct gb_coll_ops ops = {call, prep, check};
    size_t errors = 0;
    gb_coll_sweep(&o, &ops, &x, &errors);
    gb_free(x.sbuf, x.mem);
    gb_free(x.rbuf, x.mem);
    return gb_finish(errors);
}
