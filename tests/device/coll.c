/*
 * dt_coll: collectives on buffers of one memory kind (default D: device),
 * checked against a host-computed reference: allreduce (every predefined op
 * on int, long, float, double, also in place), iallreduce, reduce (every
 * root), scan, exscan, reduce_scatter_block, reduce_scatter (uneven counts,
 * one of them 0), bcast (every root), allgather, allgatherv, alltoall,
 * alltoallv, gather, gatherv, scatter and scatterv (the v forms with uneven
 * counts, some 0, and a guard gap after every block that must stay
 * untouched). Sizes up to -M bytes per rank. -k X (mixed): even ranks pass
 * device buffers, odd ranks host buffers, to every collective.
 *
 *   dt_coll [-M MAXSIZE] [-k KIND]
 */
#include "dt_cases.h"

#include <unistd.h>

#define MAXRANKS 64

static int rank_, nranks;
static char kind_arg = 'D', kind; /* as given (for the case names), and this rank's */

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

/* MPI_Exscan: rank r > 0 holds the reduction over ranks 0..r-1 (rank 0's
 * result is undefined: only its guard is checked). */
static size_t exscan_case(int t, int o, size_t count, uint32_t seed) {
    size_t bytes = count * dt_type_sizes[t];
    unsigned char *h = malloc(bytes + DT_GUARD);
    dt_fill_values(h, t, o, rank_, count, seed);
    void *s = dt_alloc(bytes, kind), *d = dt_alloc(bytes + DT_GUARD, kind);
    dt_put(s, h, bytes, kind);
    dt_memset(d, DT_GUARD_BYTE, bytes + DT_GUARD, kind);
    MPI_Exscan(s, d, (int)count, dt_mpi_type(t), dt_mpi_op(o), MPI_COMM_WORLD);
    dt_get(h, d, bytes + DT_GUARD, kind);
    size_t bad = dt_check_value(h + bytes, DT_GUARD, 'H', DT_GUARD_BYTE, "guard after the exscan result");
    if (rank_ > 0)
        bad += dt_check_values(h, t, o, rank_ - 1, 0, count, seed, "exscan");
    dt_free(s, kind), dt_free(d, kind), free(h);
    return bad;
}

/* Elements rank j gets from MPI_Reduce_scatter of nominal `count` per rank:
 * uneven, and 0 for rank 0 when count is 1. */
static size_t rs_count(size_t count, int j) {
    return count * (size_t)(j + 1) / (size_t)nranks;
}

/* MPI_Reduce_scatter: rank r gets its rs_count elements of the reduced vector. */
static size_t rs_case(int t, int o, size_t count, uint32_t seed) {
    int counts[MAXRANKS];
    size_t total = 0, first = 0, ts = dt_type_sizes[t];
    for (int j = 0; j < nranks; j++) {
        counts[j] = (int)rs_count(count, j);
        if (j < rank_)
            first += (size_t)counts[j];
        total += (size_t)counts[j];
    }
    size_t mine = (size_t)counts[rank_] * ts;
    unsigned char *h = malloc(total * ts + DT_GUARD);
    dt_fill_values(h, t, o, rank_, total, seed);
    void *s = dt_alloc(total * ts, kind), *d = dt_alloc(mine + DT_GUARD, kind);
    dt_put(s, h, total * ts, kind);
    dt_memset(d, DT_GUARD_BYTE, mine + DT_GUARD, kind);
    MPI_Reduce_scatter(s, d, counts, dt_mpi_type(t), dt_mpi_op(o), MPI_COMM_WORLD);
    dt_get(h, d, mine + DT_GUARD, kind);
    size_t bad = dt_check_values(h, t, o, nranks - 1, first, (size_t)counts[rank_], seed, "reduce_scatter");
    bad += dt_check_value(h + mine, DT_GUARD, 'H', DT_GUARD_BYTE, "guard after the reduce_scatter result");
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

/* ---- the v forms -------------------------------------------------------------
 * Rank `from` sends vcount(per, from, to) bytes to rank `to`: uneven, 0 for
 * some pairs when per is small. Buffers hold the blocks in rank order with a
 * DT_GUARD gap after each, which must keep DT_GUARD_BYTE. */

static size_t vcount(size_t per, int from, int to) {
    return per * (size_t)((from + 2 * to) % nranks + 1) / (size_t)nranks + (size_t)((from + to) % 3);
}

/* Displacements of blocks of cnt[] bytes with a guard gap after each; returns the total. */
static size_t vlayout(const int *cnt, int *displ) {
    size_t at = 0;
    for (int j = 0; j < nranks; j++) {
        if (at > (size_t)INT32_MAX)
            dt_die("v layout too large");
        displ[j] = (int)at;
        at += (size_t)cnt[j] + DT_GUARD;
    }
    return at;
}

/* A buffer of kind `kind` with block j carrying the pattern of seeds[j] and the gaps the guard byte. */
static char *vfill(const int *cnt, const int *displ, const uint32_t *seeds, size_t total) {
    unsigned char *h = malloc(total ? total : 1);
    memset(h, DT_GUARD_BYTE, total);
    for (int j = 0; j < nranks; j++)
        for (size_t i = 0; i < (size_t)cnt[j]; i++)
            h[(size_t)displ[j] + i] = dt_pattern(seeds[j], i);
    char *b = dt_alloc(total, kind);
    dt_put(b, h, total, kind);
    free(h);
    return b;
}

/* Wrong bytes of a v-layout receive buffer, the gaps included. */
static size_t vcheck(const char *b, const int *cnt, const int *displ, const uint32_t *seeds, size_t total,
                     const char *what) {
    unsigned char *h = malloc(total ? total : 1);
    dt_get(h, b, total, kind);
    size_t bad = 0;
    for (int j = 0; j < nranks; j++) {
        bad += dt_check(h + displ[j], (size_t)cnt[j], 'H', seeds[j], what);
        bad += dt_check_value(h + displ[j] + cnt[j], DT_GUARD, 'H', DT_GUARD_BYTE, what);
    }
    free(h);
    return bad;
}

/* MPI_Gatherv (to root seed % n) or MPI_Allgatherv: rank j contributes vcount(per, j, 0) bytes. */
static size_t gatherv_case(size_t per, int all, uint32_t seed) {
    int cnt[MAXRANKS], displ[MAXRANKS];
    uint32_t seeds[MAXRANKS];
    for (int j = 0; j < nranks; j++) {
        cnt[j] = (int)vcount(per, j, 0);
        seeds[j] = block_seed(seed, j, 0);
    }
    size_t total = vlayout(cnt, displ);
    int root = (int)(seed % (uint32_t)nranks);
    char *s = dt_alloc((size_t)cnt[rank_], kind);
    dt_fill(s, (size_t)cnt[rank_], kind, seeds[rank_]);
    char *d = dt_alloc(total, kind);
    dt_memset(d, DT_GUARD_BYTE, total, kind);
    if (all)
        MPI_Allgatherv(s, cnt[rank_], MPI_BYTE, d, cnt, displ, MPI_BYTE, MPI_COMM_WORLD);
    else
        MPI_Gatherv(s, cnt[rank_], MPI_BYTE, d, cnt, displ, MPI_BYTE, root, MPI_COMM_WORLD);
    size_t bad = 0;
    if (all || rank_ == root)
        bad = vcheck(d, cnt, displ, seeds, total, all ? "allgatherv" : "gatherv");
    dt_free(s, kind), dt_free(d, kind);
    return bad;
}

/* MPI_Scatterv from root seed % n: rank j gets vcount(per, root, j) bytes. */
static size_t scatterv_case(size_t per, uint32_t seed) {
    int cnt[MAXRANKS], displ[MAXRANKS];
    uint32_t seeds[MAXRANKS];
    int root = (int)(seed % (uint32_t)nranks);
    for (int j = 0; j < nranks; j++) {
        cnt[j] = (int)vcount(per, root, j);
        seeds[j] = block_seed(seed, root, j);
    }
    size_t total = vlayout(cnt, displ), mine = (size_t)cnt[rank_];
    char *s = rank_ == root ? vfill(cnt, displ, seeds, total) : dt_alloc(1, kind);
    char *d = dt_alloc(mine + DT_GUARD, kind);
    dt_memset(d, DT_GUARD_BYTE, mine + DT_GUARD, kind);
    MPI_Scatterv(s, cnt, displ, MPI_BYTE, d, cnt[rank_], MPI_BYTE, root, MPI_COMM_WORLD);
    unsigned char *h = malloc(mine + DT_GUARD);
    dt_get(h, d, mine + DT_GUARD, kind);
    size_t bad = dt_check(h, mine, 'H', seeds[rank_], "scatterv");
    bad += dt_check_value(h + mine, DT_GUARD, 'H', DT_GUARD_BYTE, "guard after the scatterv block");
    free(h);
    if (rank_ == root)
        bad += vcheck(s, cnt, displ, seeds, total, "scatterv send buffer after the call");
    dt_free(s, kind), dt_free(d, kind);
    return bad;
}

/* MPI_Alltoallv: rank r sends vcount(per, r, j) bytes to rank j. */
static size_t alltoallv_case(size_t per, uint32_t seed) {
    int sc[MAXRANKS], sd[MAXRANKS], rc[MAXRANKS], rd[MAXRANKS];
    uint32_t ss[MAXRANKS], rs[MAXRANKS];
    for (int j = 0; j < nranks; j++) {
        sc[j] = (int)vcount(per, rank_, j);
        ss[j] = block_seed(seed, rank_, j);
        rc[j] = (int)vcount(per, j, rank_);
        rs[j] = block_seed(seed, j, rank_);
    }
    size_t stotal = vlayout(sc, sd), rtotal = vlayout(rc, rd);
    char *s = vfill(sc, sd, ss, stotal);
    char *d = dt_alloc(rtotal, kind);
    dt_memset(d, DT_GUARD_BYTE, rtotal, kind);
    MPI_Alltoallv(s, sc, sd, MPI_BYTE, d, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
    size_t bad = vcheck(d, rc, rd, rs, rtotal, "alltoallv");
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
            kind_arg = optarg[0];
        else {
            fprintf(stderr, "usage: dt_coll [-M MAXSIZE] [-k KIND]\n");
            return 2;
        }
    }
    dt_cuda_setup(0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks > MAXRANKS)
        dt_die("at most %d ranks", MAXRANKS);
    kind = dt_rank_kind(kind_arg);
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
                dt_result(dt_allreduce(t, o, counts[i], kind, 0, 0, seed), "allreduce %c %s %s count %zu", kind_arg,
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
                          nb ? "iallreduce" : "allreduce", kind_arg, dt_type_names[t], big, ip ? " in place" : "");
                seed += 13;
                dt_result(dt_allreduce(t, O_MAX, 1000, kind, nb, ip, seed), "%s %c max %s count 1000%s",
                          nb ? "iallreduce" : "allreduce", kind_arg, dt_type_names[t], ip ? " in place" : "");
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
                          kind_arg, dt_op_names[o], dt_type_names[t], root % 2 ? (size_t)1000 : big, root);
            }
            seed += 13;
            dt_result(scan_case(t, o, big, seed), "scan %c %s %s count %zu", kind_arg, dt_op_names[o], dt_type_names[t],
                      big);
            seed += 13;
            dt_result(exscan_case(t, o, big, seed), "exscan %c %s %s count %zu", kind_arg, dt_op_names[o],
                      dt_type_names[t], big);
            seed += 13;
            dt_result(rsb_case(t, o, big, seed), "reduce_scatter_block %c %s %s count %zu", kind_arg, dt_op_names[o],
                      dt_type_names[t], big);
            for (int small = 0; small < 2; small++) {
                size_t cnt = small ? 1 : big;
                seed += 13;
                dt_result(rs_case(t, o, cnt, seed), "reduce_scatter %c %s %s count %zu", kind_arg, dt_op_names[o],
                          dt_type_names[t], cnt);
            }
        }
    size_t sizes[] = {1, 8 << 10, (64 << 10) + 3, 1 << 20, max};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t s = sizes[i];
        if (s > max || (i == 4 && s == sizes[3]))
            continue;
        for (int root = 0; root < nranks; root++) {
            seed += 13;
            dt_result(bcast_case(s, root, seed), "bcast %c %zu B root %d", kind_arg, s, root);
        }
        size_t per = s / (size_t)nranks ? s / (size_t)nranks : 1;
        seed += 13;
        dt_result(allgather_case(per, 0, seed), "allgather %c %zu B per rank", kind_arg, per);
        seed += 13;
        dt_result(allgather_case(per, 1, seed), "gather %c %zu B per rank", kind_arg, per);
        seed += 13;
        dt_result(scatter_case(per, seed), "scatter %c %zu B per rank", kind_arg, per);
        seed += 13;
        dt_result(alltoall_case(per, seed), "alltoall %c %zu B per rank", kind_arg, per);
        seed += 13;
        dt_result(gatherv_case(per, 0, seed), "gatherv %c about %zu B per rank", kind_arg, per);
        seed += 13;
        dt_result(gatherv_case(per, 1, seed), "allgatherv %c about %zu B per rank", kind_arg, per);
        seed += 13;
        dt_result(scatterv_case(per, seed), "scatterv %c about %zu B per rank", kind_arg, per);
        seed += 13;
        dt_result(alltoallv_case(per, seed), "alltoallv %c about %zu B per rank", kind_arg, per);
    }
    int rc = dt_summary();
    MPI_Finalize();
    dt_cuda_teardown();
    return rc;
}
