/*
 * dt_coll: collectives on buffers of one memory kind (default D: device),
 * checked against a host-computed reference: allreduce (every predefined op
 * on int, long, float, double, also in place), iallreduce, reduce (every
 * root), scan, reduce_scatter_block, bcast (every root), allgather,
 * alltoall, gather and scatter. Sizes up to -M bytes per rank.
 *
 *   dt_coll [-M MAXSIZE] [-k KIND]
 */
#include "dt_cases.h"

#include <unistd.h>

static int rank_, nranks;
static char kind = 'D';

/* MPI_Reduce to `root`: the root checks. */
static size_t reduce_case(int t, int o, size_t count, int root, uint32_t seed) {
    size_t bytes = count * dt_type_sizes[t];
    unsigned char *h = malloc(bytes ? bytes : 1);
    dt_fill_values(h, t, o, rank_, count, seed);
    void *s = dt_alloc(bytes, kind), *d = dt_alloc(bytes, kind);
    dt_put(s, h, bytes, kind);
    dt_memset(d, DT_GUARD_BYTE, bytes, kind);
    MPI_Reduce(s, d, (int)count, dt_mpi_type(t), dt_mpi_op(o), root, MPI_COMM_WORLD);
    size_t bad = 0;
    if (rank_ == root) {
        dt_get(h, d, bytes, kind);
        bad = dt_check_values(h, t, o, nranks - 1, 0, count, seed, "reduce");
    }
    dt_free(s, kind), dt_free(d, kind), free(h);
    return bad;
}

/* MPI_Scan: rank r holds the reduction over ranks 0..r. */
static size_t scan_case(int t, int o, size_t count, uint32_t seed) {
    size_t bytes = count * dt_type_sizes[t];
    unsigned char *h = malloc(bytes ? bytes : 1);
    dt_fill_values(h, t, o, rank_, count, seed);
    void *s = dt_alloc(bytes, kind), *d = dt_alloc(bytes, kind);
    dt_put(s, h, bytes, kind);
    MPI_Scan(s, d, (int)count, dt_mpi_type(t), dt_mpi_op(o), MPI_COMM_WORLD);
    dt_get(h, d, bytes, kind);
    size_t bad = dt_check_values(h, t, o, rank_, 0, count, seed, "scan");
    dt_free(s, kind), dt_free(d, kind), free(h);
    return bad;
}

/* MPI_Reduce_scatter_block: rank r gets block r of the reduced vector. */
static size_t rsb_case(int t, int o, size_t count, uint32_t seed) {
    size_t total = count * (size_t)nranks, bytes = total * dt_type_sizes[t], mine = count * dt_type_sizes[t];
    unsigned char *h = malloc(bytes ? bytes : 1);
    dt_fill_values(h, t, o, rank_, total, seed);
    void *s = dt_alloc(bytes, kind), *d = dt_alloc(mine, kind);
    dt_put(s, h, bytes, kind);
    MPI_Reduce_scatter_block(s, d, (int)count, dt_mpi_type(t), dt_mpi_op(o), MPI_COMM_WORLD);
    dt_get(h, d, mine, kind);
    size_t bad = dt_check_values(h, t, o, nranks - 1, (size_t)rank_ * count, count, seed, "reduce_scatter_block");
    dt_free(s, kind), dt_free(d, kind), free(h);
    return bad;
}

static size_t bcast_case(size_t size, int root, uint32_t seed) {
    char *b = dt_alloc(size, kind);
    if (rank_ == root)
        dt_fill(b, size, kind, seed);
    else
        dt_memset(b, DT_GUARD_BYTE, size, kind);
    MPI_Bcast(b, (int)size, MPI_BYTE, root, MPI_COMM_WORLD);
    size_t bad = dt_check(b, size, kind, seed, "bcast");
    dt_free(b, kind);
    return bad;
}

/* Block j of rank r's contribution carries the pattern seed + r * n + j. */
static uint32_t block_seed(uint32_t seed, int from, int block) {
    return seed + (uint32_t)(from * nranks + block) * 7u;
}

static size_t allgather_case(size_t size, int gather, uint32_t seed) {
    char *s = dt_alloc(size, kind), *d = dt_alloc(size * (size_t)nranks, kind);
    dt_fill(s, size, kind, block_seed(seed, rank_, 0));
    dt_memset(d, DT_GUARD_BYTE, size * (size_t)nranks, kind);
    int root = (int)(seed % (uint32_t)nranks);
    if (gather)
        MPI_Gather(s, (int)size, MPI_BYTE, d, (int)size, MPI_BYTE, root, MPI_COMM_WORLD);
    else
        MPI_Allgather(s, (int)size, MPI_BYTE, d, (int)size, MPI_BYTE, MPI_COMM_WORLD);
    size_t bad = 0;
    if (!gather || rank_ == root)
        for (int j = 0; j < nranks; j++)
            bad += dt_check(d + (size_t)j * size, size, kind, block_seed(seed, j, 0), gather ? "gather" : "allgather");
    dt_free(s, kind), dt_free(d, kind);
    return bad;
}

static size_t scatter_case(size_t size, uint32_t seed) {
    int root = (int)(seed % (uint32_t)nranks);
    char *s = dt_alloc(size * (size_t)nranks, kind), *d = dt_alloc(size, kind);
    if (rank_ == root)
        for (int j = 0; j < nranks; j++)
            dt_fill(s + (size_t)j * size, size, kind, block_seed(seed, root, j));
    dt_memset(d, DT_GUARD_BYTE, size, kind);
    MPI_Scatter(s, (int)size, MPI_BYTE, d, (int)size, MPI_BYTE, root, MPI_COMM_WORLD);
    size_t bad = dt_check(d, size, kind, block_seed(seed, root, rank_), "scatter");
    dt_free(s, kind), dt_free(d, kind);
    return bad;
}

static size_t alltoall_case(size_t size, uint32_t seed) {
    size_t all = size * (size_t)nranks;
    char *s = dt_alloc(all, kind), *d = dt_alloc(all, kind);
    for (int j = 0; j < nranks; j++)
        dt_fill(s + (size_t)j * size, size, kind, block_seed(seed, rank_, j));
    dt_memset(d, DT_GUARD_BYTE, all, kind);
    MPI_Alltoall(s, (int)size, MPI_BYTE, d, (int)size, MPI_BYTE, MPI_COMM_WORLD);
    size_t bad = 0;
    for (int j = 0; j < nranks; j++)
        bad += dt_check(d + (size_t)j * size, size, kind, block_seed(seed, j, rank_), "alltoall");
    dt_free(s, kind), dt_free(d, kind);
    return bad;
}

int main(int argc, char **argv) {
    dt_prog = "dt_coll";
    size_t max = 4u << 20;
    int c;
    while ((c = getopt(argc, argv, "M:k:")) != -1) {
        if (c == 'M')
            max = dt_parse_size(optarg);
        else if (c == 'k')
            kind = optarg[0];
        else {
            fprintf(stderr, "usage: dt_coll [-M MAXSIZE] [-k KIND]\n");
            return 2;
        }
    }
    dt_cuda_setup(0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    uint32_t seed = 11;
    /* element counts: one, a few pages, and the largest that fits in -M */
    size_t counts[3] = {1, 1000, 0};
    int ncounts = 2;
    for (int t = 0; t < T_NBASIC; t++)
        for (int o = 0; o < O_NOPS; o++) {
            if (!dt_op_valid(o, t))
                continue;
            counts[2] = max / dt_type_sizes[t];
            ncounts = counts[2] > 1000 ? 3 : 2;
            for (int i = 0; i < ncounts; i++) {
                seed += 13;
                dt_result(dt_allreduce(t, o, counts[i], kind, 0, 0, seed), "allreduce %c %s %s count %zu", kind,
                          dt_op_names[o], dt_type_names[t], counts[i]);
            }
        }
    for (int t = 0; t < T_NBASIC; t++) {
        size_t big = max / dt_type_sizes[t];
        for (int ip = 0; ip < 2; ip++)
            for (int nb = 0; nb < 2; nb++) {
                if (!ip && !nb)
                    continue; /* done above */
                seed += 13;
                dt_result(dt_allreduce(t, O_SUM, big, kind, nb, ip, seed), "%s %c sum %s count %zu%s",
                          nb ? "iallreduce" : "allreduce", kind, dt_type_names[t], big, ip ? " in place" : "");
                seed += 13;
                dt_result(dt_allreduce(t, O_MAX, 1000, kind, nb, ip, seed), "%s %c max %s count 1000%s",
                          nb ? "iallreduce" : "allreduce", kind, dt_type_names[t], ip ? " in place" : "");
            }
    }
    static const int rops[] = {O_SUM, O_PROD, O_MIN, O_BXOR};
    for (int t = 0; t < T_NBASIC; t++)
        for (size_t q = 0; q < sizeof rops / sizeof rops[0]; q++) {
            int o = rops[q];
            if (!dt_op_valid(o, t))
                continue;
            size_t big = max / dt_type_sizes[t] / (size_t)nranks;
            for (int root = 0; root < nranks; root++) {
                seed += 13;
                dt_result(reduce_case(t, o, root % 2 ? 1000 : big, root, seed), "reduce %c %s %s count %zu root %d",
                          kind, dt_op_names[o], dt_type_names[t], root % 2 ? (size_t)1000 : big, root);
            }
            seed += 13;
            dt_result(scan_case(t, o, big, seed), "scan %c %s %s count %zu", kind, dt_op_names[o], dt_type_names[t],
                      big);
            seed += 13;
            dt_result(rsb_case(t, o, big, seed), "reduce_scatter_block %c %s %s count %zu", kind, dt_op_names[o],
                      dt_type_names[t], big);
        }
    size_t sizes[] = {1, 8 << 10, (64 << 10) + 3, 1 << 20, max};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t s = sizes[i];
        if (s > max || (i == 4 && s == sizes[3]))
            continue;
        for (int root = 0; root < nranks; root++) {
            seed += 13;
            dt_result(bcast_case(s, root, seed), "bcast %c %zu B root %d", kind, s, root);
        }
        size_t per = s / (size_t)nranks ? s / (size_t)nranks : 1;
        seed += 13;
        dt_result(allgather_case(per, 0, seed), "allgather %c %zu B per rank", kind, per);
        seed += 13;
        dt_result(allgather_case(per, 1, seed), "gather %c %zu B per rank", kind, per);
        seed += 13;
        dt_result(scatter_case(per, seed), "scatter %c %zu B per rank", kind, per);
        seed += 13;
        dt_result(alltoall_case(per, seed), "alltoall %c %zu B per rank", kind, per);
    }
    int rc = dt_summary();
    MPI_Finalize();
    dt_cuda_teardown();
    return rc;
}
