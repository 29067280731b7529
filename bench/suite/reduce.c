/*
 * gb_reduce: MPI_Reduce (MPI_FLOAT, MPI_SUM) latency to root 0, µs per call by
 * message size in bytes (size / 4 floats). allreduce.c builds gb_allreduce
 * from this file with GB_ALLREDUCE set: MPI_Allreduce, every rank checked.
 */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef GB_ALLREDUCE
#define GB_ALLREDUCE 0
#endif
#define NAME (GB_ALLREDUCE ? "allreduce" : "reduce")

struct ctx {
    char *sbuf, *rbuf;
    float *expect;
    enum gb_mem mem;
    int rank, n;
};

static void call(void *c, size_t size) {
    struct ctx *x = c;
#if GB_ALLREDUCE
    MPI_Allreduce(x->sbuf, x->rbuf, (int)(size / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#else
    MPI_Reduce(x->sbuf, x->rbuf, (int)(size / 4), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
#endif
}

static void prep(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    gb_fill_floats(x->sbuf, size / 4, x->mem, seed + (uint32_t)x->rank);
    gb_set(x->rbuf, size, x->mem, 0xa5);
}

static size_t check(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    if (!GB_ALLREDUCE && x->rank != 0)
        return 0;
    gb_float_sums(x->expect, size / 4, seed, x->n);
    return gb_check_floats(x->rbuf, size / 4, x->mem, x->expect, NAME);
}

int main(int argc, char **argv) {
    struct gb_opts o = {.name = NAME, .min_size = 4, .max_size = 1 << 20, .iters = 1000, .iters_large = 100,
                        .warmup = 100, .warmup_large = 10, .side = {GB_HOST, GB_HOST}};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 1, 0);
    struct ctx x = {.mem = o.side[0]};
    MPI_Comm_rank(MPI_COMM_WORLD, &x.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &x.n);
    x.sbuf = gb_alloc(o.max_size, x.mem);
    x.rbuf = gb_alloc(o.max_size, x.mem);
    x.expect = malloc(o.max_size + 4);
    struct gb_coll_ops ops = {call, prep, check};
    size_t errors = 0;
    gb_coll_sweep(&o, &ops, &x, &errors);
    gb_free(x.sbuf, x.mem);
    gb_free(x.rbuf, x.mem);
    free(x.expect);
    return gb_finish(errors);
}
