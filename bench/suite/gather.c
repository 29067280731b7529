/*
 * gb_gather: MPI_Gather to root 0, µs per call by message size (bytes each rank
 * contributes). The other data-movement collectives are built from this file
 * with GB_OP set (gatherv.c, scatter.c, scatterv.c, allgatherv.c, alltoallv.c):
 * the `v` forms pass equal counts (and displacements of one block apart), so
 * their figures compare with the plain forms' and show what the vector
 * arguments cost. Every receiving rank's blocks are checked.
 */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>

#define GB_GATHER 0
#define GB_GATHERV 1
#define GB_SCATTER 2
#define GB_SCATTERV 3
#define GB_ALLGATHERV 4
#define GB_ALLTOALLV 5

#ifndef GB_OP
#define GB_OP GB_GATHER
#endif

static const char *const NAMES[] = {"gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv"};
#define NAME (NAMES[GB_OP])

struct ctx {
    char *sbuf, *rbuf;
    int *counts, *displs;
    enum gb_mem mem;
    int rank, n;
};

/* Counts and displacements of `size` bytes per rank, one block apart. */
static void vectors(struct ctx *x, size_t size) {
    for (int r = 0; r < x->n; r++) {
        x->counts[r] = (int)size;
        x->displs[r] = (int)(size * (size_t)r);
    }
}

static void call(void *c, size_t size) {
    struct ctx *x = c;
    int s = (int)size;
    switch (GB_OP) {
    case GB_GATHER:
        MPI_Gather(x->sbuf, s, MPI_CHAR, x->rbuf, s, MPI_CHAR, 0, MPI_COMM_WORLD);
        break;
    case GB_GATHERV:
        vectors(x, size);
        MPI_Gatherv(x->sbuf, s, MPI_CHAR, x->rbuf, x->counts, x->displs, MPI_CHAR, 0, MPI_COMM_WORLD);
        break;
    case GB_SCATTER:
        MPI_Scatter(x->sbuf, s, MPI_CHAR, x->rbuf, s, MPI_CHAR, 0, MPI_COMM_WORLD);
        break;
    case GB_SCATTERV:
        vectors(x, size);
        MPI_Scatterv(x->sbuf, x->counts, x->displs, MPI_CHAR, x->rbuf, s, MPI_CHAR, 0, MPI_COMM_WORLD);
        break;
    case GB_ALLGATHERV:
        vectors(x, size);
        MPI_Allgatherv(x->sbuf, s, MPI_CHAR, x->rbuf, x->counts, x->displs, MPI_CHAR, MPI_COMM_WORLD);
        break;
    default:
        vectors(x, size);
        MPI_Alltoallv(x->sbuf, x->counts, x->displs, MPI_CHAR, x->rbuf, x->counts, x->displs, MPI_CHAR,
                      MPI_COMM_WORLD);
        break;
    }
}

/* The seed of the block rank `from` sends to rank `to`. */
static uint32_t block_seed(uint32_t seed, int from, int to, int n) {
    return seed + (uint32_t)(from * n + to);
}

static int scatters(void) { return GB_OP == GB_SCATTER || GB_OP == GB_SCATTERV; }

/* Bytes of the send and receive buffers at this rank. */
static size_t sbytes(const struct ctx *x, size_t size) {
    int many = GB_OP == GB_ALLTOALLV || (scatters() && x->rank == 0);
    return many ? size * (size_t)x->n : size;
}

static size_t rbytes(const struct ctx *x, size_t size) {
    int many = GB_OP == GB_ALLGATHERV || GB_OP == GB_ALLTOALLV || (!scatters() && x->rank == 0);
    return many ? size * (size_t)x->n : size;
}

static void prep(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    if (sbytes(x, size) == size && !scatters()) {
        gb_fill(x->sbuf, size, x->mem, block_seed(seed, x->rank, 0, x->n));
    } else {
        for (int to = 0; to < x->n; to++)
            gb_fill(x->sbuf + (size_t)to * size, size, x->mem, block_seed(seed, x->rank, to, x->n));
    }
    gb_set(x->rbuf, rbytes(x, size), x->mem, 0xa5);
}

static size_t check(void *c, size_t size, uint32_t seed) {
    struct ctx *x = c;
    size_t bad = 0;
    if (scatters())
        return gb_check(x->rbuf, size, x->mem, block_seed(seed, 0, x->rank, x->n), NAME);
    if (GB_OP != GB_ALLGATHERV && GB_OP != GB_ALLTOALLV && x->rank != 0)
        return 0;
    for (int from = 0; from < x->n; from++) {
        int to = GB_OP == GB_ALLTOALLV ? x->rank : 0;
        bad += gb_check(x->rbuf + (size_t)from * size, size, x->mem, block_seed(seed, from, to, x->n), NAME);
    }
    return bad;
}

int main(int argc, char **argv) {
    struct gb_opts o = {.name = NAME, .min_size = 1, .max_size = 1 << 20, .iters = 1000, .iters_large = 100,
                        .warmup = 100, .warmup_large = 10, .side = {GB_HOST, GB_HOST}};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 1, 0);
    struct ctx x = {.mem = o.side[0]};
    MPI_Comm_rank(MPI_COMM_WORLD, &x.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &x.n);
    x.sbuf = gb_alloc(o.max_size * (size_t)x.n, x.mem);
    x.rbuf = gb_alloc(o.max_size * (size_t)x.n, x.mem);
    x.counts = malloc(sizeof(int) * (size_t)x.n);
    x.displs = malloc(sizeof(int) * (size_t)x.n);
    struct gb_coll_ops ops = {call, prep, check};
    size_t errors = 0;
    gb_coll_sweep(&o, &ops, &x, &errors);
    gb_free(x.sbuf, x.mem);
    gb_free(x.rbuf, x.mem);
    free(x.counts);
    free(x.displs);
    return gb_finish(errors);
}
