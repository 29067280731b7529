/*
 * gb_reduce_scatter: MPI_Reduce_scatter (MPI_FLOAT, MPI_SUM, equal counts)
 * latency, µs per call by the bytes each rank receives (size / 4 floats; each
 * rank sends n times that). reduce_scatter_block.c builds
 * gb_reduce_scatter_block from this file with GB_BLOCK set:
 * MPI_Reduce_scatter_block. Every rank's block is checked.
 */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef GB_BLOCK
#define GB_BLOCK 0
#endif
#define NAME (GB_BLOCK ? "reduce_scatter_block" : "reduce_scatter")

struct ctx {
    char *sbuf, *rbuf;
    float *expect;
    int *counts;
    enum gb_mem mem;
    int rank, n;
};

static void call(void *c, size_t size) {
    struct ctx *x = c;
    int count = (int)(size / 4);
#if GB_BLOCK
    MPI_Reduce_scatter_block(x->sbuf, x->rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#else
    for (int r = 0; r < x->n; r++)
        x->counts[r] = count;
    MPI_Reduce_scatter(x->sbuf, x->rbuf, x->counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#endif
}

static void prep(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    gb_fill_floats(x->sbuf, size / 4 * (size_t)x->n, x->mem, seed + (uint32_t)x->rank);
    gb_set(x->rbuf, size, x->mem, 0xa5);
}

static size_t check(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    size_t count = size / 4;
    gb_float_sums(x->expect, count * (size_t)x->n, seed, x->n);
    return gb_check_floats(x->rbuf, count, x->mem, x->expect + count * (size_t)x->rank, NAME);
}

int main(int argc, char **argv) {
    struct gb_opts o = {.name = NAME, .min_size = 4, .max_size = 1 << 20, .iters = 1000, .iters_large = 100,
                        .warmup = 100, .warmup_large = 10, .side = {GB_HOST, GB_HOST}};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 1, 0);
    struct ctx x = {.mem = o.side[0]};
    MPI_Comm_rank(MPI_COMM_WORLD, &x.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &x.n);
    x.sbuf = gb_alloc(o.max_size * (size_t)x.n, x.mem);
    x.rbuf = gb_alloc(o.max_size, x.mem);
    x.expect = malloc(o.max_size * (size_t)x.n + 4);
    x.counts = malloc(sizeof(int) * (size_t)x.n);
    struct gb_coll_ops ops = {call, prep, check};
    size_t errors = 0;
    gb_coll_sweep(&o, &ops, &x, &errors);
    gb_free(x.sbuf, x.mem);
    gb_free(x.rbuf, x.mem);
    free(x.expect);
    free(x.counts);
    return gb_finish(errors);
}
