/* MPI-4's large-count collectives (the `_c` variants: MPI_Count counts,
 * MPI_Count/MPI_Aint arrays) with small counts, blocking and non-blocking,
 * each checked against the data its `int` twin would give (the neighbourhood
 * ones on a ring at np >= 3); a negative count
 * (scalar or in an array) fails with MPI_ERR_COUNT. Plain MPI only. */
#define TEST_NAME "largecount_coll"
#include "check.h"
#include <string.h>

#define K 3
#define MAXP 64

static int rank, size;

/* Run the blocking form, or the non-blocking one (which sets rq_) and wait. */
#define RUN(nb, blocking, nonblocking)                             \
    do {                                                           \
        if (nb) {                                                  \
            MPI_Request rq_ = MPI_REQUEST_NULL;                    \
            CHECK_MPI(nonblocking);                                \
            CHECK_MPI(MPI_Wait(&rq_, MPI_STATUS_IGNORE));          \
        } else {                                                   \
            CHECK_MPI(blocking);                                   \
        }                                                          \
    } while (0)

#define EQ(got, want, what, idx)                                                    \
    CHECK((got) == (want), "%s%s: [%d] is %d, expected %d", what, nb ? " (I)" : "", \
          (int)(idx), (int)(got), (int)(want))

static void expect_count_error(int rc, const char *what)
{
    int cls = -1;
    CHECK(rc != MPI_SUCCESS, "%s: returned MPI_SUCCESS, expected MPI_ERR_COUNT", what);
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_COUNT, "%s: error class %d, expected MPI_ERR_COUNT (%d)", what, cls,
          MPI_ERR_COUNT);
}

static void test_rooted(int nb)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int root = size - 1, P = size;
    int b[K], s[K], r[K];
    static int big[MAXP * K], big2[MAXP * K];

    for (int i = 0; i < K; i++) b[i] = rank == 0 ? 7 + i : -1;
    RUN(nb, MPI_Bcast_c(b, K, MPI_INT, 0, w), MPI_Ibcast_c(b, K, MPI_INT, 0, w, &rq_));
    for (int i = 0; i < K; i++) EQ(b[i], 7 + i, "Bcast_c", i);

    for (int i = 0; i < K; i++) { s[i] = rank + i; r[i] = -1; }
    RUN(nb, MPI_Reduce_c(s, r, K, MPI_INT, MPI_SUM, root, w),
        MPI_Ireduce_c(s, r, K, MPI_INT, MPI_SUM, root, w, &rq_));
    if (rank == root)
        for (int i = 0; i < K; i++) EQ(r[i], P * i + P * (P - 1) / 2, "Reduce_c", i);

    for (int i = 0; i < K; i++) s[i] = rank * 100 + i;
    RUN(nb, MPI_Gather_c(s, K, MPI_INT, big, K, MPI_INT, root, w),
        MPI_Igather_c(s, K, MPI_INT, big, K, MPI_INT, root, w, &rq_));
    if (rank == root)
        for (int j = 0; j < P * K; j++) EQ(big[j], (j / K) * 100 + j % K, "Gather_c", j);

    if (rank == root)
        for (int j = 0; j < P * K; j++) big[j] = (j / K) * 100 + j % K + 1;
    RUN(nb, MPI_Scatter_c(big, K, MPI_INT, r, K, MPI_INT, root, w),
        MPI_Iscatter_c(big, K, MPI_INT, r, K, MPI_INT, root, w, &rq_));
    for (int i = 0; i < K; i++) EQ(r[i], rank * 100 + i + 1, "Scatter_c", i);

    /* v forms: rank j contributes j+1 elements, stored one apart at the root */
    MPI_Count counts[MAXP];
    MPI_Aint displs[MAXP];
    MPI_Aint at = 0;
    for (int j = 0; j < P; j++) { counts[j] = j + 1; displs[j] = at; at += j + 2; }
    for (int i = 0; i <= rank; i++) big2[i] = rank * 100 + i;
    for (int j = 0; j < MAXP * K; j++) big[j] = -1;
    RUN(nb, MPI_Gatherv_c(big2, rank + 1, MPI_INT, big, counts, displs, MPI_INT, root, w),
        MPI_Igatherv_c(big2, rank + 1, MPI_INT, big, counts, displs, MPI_INT, root, w, &rq_));
    if (rank == root)
        for (int j = 0; j < P; j++) {
            for (int i = 0; i <= j; i++) EQ(big[displs[j] + i], j * 100 + i, "Gatherv_c", j);
            EQ(big[displs[j] + j + 1], -1, "Gatherv_c gap", j);
        }

    if (rank == root)
        for (int j = 0; j < P; j++)
            for (int i = 0; i <= j; i++) big[displs[j] + i] = j * 100 + i + 5;
    for (int i = 0; i < K; i++) big2[i] = -1;
    RUN(nb, MPI_Scatterv_c(big, counts, displs, MPI_INT, big2, rank + 1, MPI_INT, root, w),
        MPI_Iscatterv_c(big, counts, displs, MPI_INT, big2, rank + 1, MPI_INT, root, w, &rq_));
    for (int i = 0; i <= rank; i++) EQ(big2[i], rank * 100 + i + 5, "Scatterv_c", i);
}

static void test_all(int nb)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int P = size;
    int s[K], r[K];
    static int sb[MAXP * K * MAXP], rb[MAXP * K * MAXP];

    for (int i = 0; i < K; i++) { s[i] = rank + i; r[i] = -1; }
    RUN(nb, MPI_Allreduce_c(s, r, K, MPI_INT, MPI_SUM, w),
        MPI_Iallreduce_c(s, r, K, MPI_INT, MPI_SUM, w, &rq_));
    for (int i = 0; i < K; i++) EQ(r[i], P * i + P * (P - 1) / 2, "Allreduce_c", i);

    RUN(nb, MPI_Scan_c(s, r, K, MPI_INT, MPI_SUM, w),
        MPI_Iscan_c(s, r, K, MPI_INT, MPI_SUM, w, &rq_));
    for (int i = 0; i < K; i++) EQ(r[i], rank * (rank + 1) / 2 + (rank + 1) * i, "Scan_c", i);

    RUN(nb, MPI_Exscan_c(s, r, K, MPI_INT, MPI_SUM, w),
        MPI_Iexscan_c(s, r, K, MPI_INT, MPI_SUM, w, &rq_));
    if (rank > 0)
        for (int i = 0; i < K; i++) EQ(r[i], rank * (rank - 1) / 2 + rank * i, "Exscan_c", i);

    for (int i = 0; i < K; i++) s[i] = rank * 100 + i;
    RUN(nb, MPI_Allgather_c(s, K, MPI_INT, rb, K, MPI_INT, w),
        MPI_Iallgather_c(s, K, MPI_INT, rb, K, MPI_INT, w, &rq_));
    for (int j = 0; j < P * K; j++) EQ(rb[j], (j / K) * 100 + j % K, "Allgather_c", j);

    for (int j = 0; j < P * K; j++) sb[j] = rank * 100 + (j / K) * 10 + j % K;
    RUN(nb, MPI_Alltoall_c(sb, K, MPI_INT, rb, K, MPI_INT, w),
        MPI_Ialltoall_c(sb, K, MPI_INT, rb, K, MPI_INT, w, &rq_));
    for (int j = 0; j < P * K; j++) EQ(rb[j], (j / K) * 100 + rank * 10 + j % K, "Alltoall_c", j);

    /* Alltoallw_c: the same exchange with byte displacements, block order reversed */
    {
        MPI_Count sc[MAXP], rc[MAXP];
        MPI_Aint sd[MAXP], rd[MAXP];
        MPI_Datatype st[MAXP], rt[MAXP];
        for (int j = 0; j < P; j++) {
            sc[j] = rc[j] = K;
            sd[j] = (MPI_Aint)(j * K * sizeof(int));
            rd[j] = (MPI_Aint)((P - 1 - j) * K * sizeof(int));
            st[j] = rt[j] = MPI_INT;
        }
        for (int j = 0; j < P * K; j++) rb[j] = -1;
        RUN(nb, MPI_Alltoallw_c(sb, sc, sd, st, rb, rc, rd, rt, w),
            MPI_Ialltoallw_c(sb, sc, sd, st, rb, rc, rd, rt, w, &rq_));
        for (int j = 0; j < P; j++)
            for (int i = 0; i < K; i++)
                EQ(rb[(P - 1 - j) * K + i], j * 100 + rank * 10 + i, "Alltoallw_c", j * K + i);
    }

    for (int j = 0; j < P * K; j++) sb[j] = rank + (j / K) * 10 + j % K;
    RUN(nb, MPI_Reduce_scatter_block_c(sb, r, K, MPI_INT, MPI_SUM, w),
        MPI_Ireduce_scatter_block_c(sb, r, K, MPI_INT, MPI_SUM, w, &rq_));
    for (int i = 0; i < K; i++)
        EQ(r[i], P * (P - 1) / 2 + P * (rank * 10 + i), "Reduce_scatter_block_c", i);

    /* v forms: rank j's block has j+1 elements */
    MPI_Count counts[MAXP], sc[MAXP], rc[MAXP];
    MPI_Aint displs[MAXP], sd[MAXP], rd[MAXP];
    MPI_Aint at = 0, off = 0;
    for (int j = 0; j < P; j++) {
        counts[j] = j + 1;
        displs[j] = at;
        if (j < rank) off += j + 1;
        at += j + 2;
    }
    static int mine[MAXP];
    for (int i = 0; i <= rank; i++) mine[i] = rank * 100 + i;
    for (int j = 0; j < MAXP * K; j++) rb[j] = -1;
    RUN(nb, MPI_Allgatherv_c(mine, rank + 1, MPI_INT, rb, counts, displs, MPI_INT, w),
        MPI_Iallgatherv_c(mine, rank + 1, MPI_INT, rb, counts, displs, MPI_INT, w, &rq_));
    for (int j = 0; j < P; j++) {
        for (int i = 0; i <= j; i++) EQ(rb[displs[j] + i], j * 100 + i, "Allgatherv_c", j);
        EQ(rb[displs[j] + j + 1], -1, "Allgatherv_c gap", j);
    }

    /* Alltoallv_c: to rank j, j+1 elements; from each, rank+1 */
    MPI_Aint sat = 0;
    for (int j = 0; j < P; j++) {
        sc[j] = j + 1;
        sd[j] = sat;
        for (int i = 0; i <= j; i++) sb[sat + i] = rank * 100 + j * 10 + i;
        sat += j + 1;
        rc[j] = rank + 1;
        rd[j] = (MPI_Aint)j * (rank + 2);
    }
    for (int j = 0; j < MAXP * K; j++) rb[j] = -1;
    RUN(nb, MPI_Alltoallv_c(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, w),
        MPI_Ialltoallv_c(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, w, &rq_));
    for (int j = 0; j < P; j++)
        for (int i = 0; i <= rank; i++) EQ(rb[rd[j] + i], j * 100 + rank * 10 + i, "Alltoallv_c", j);

    /* Reduce_scatter_c: rank j gets counts[j] = j+1 elements of the sum */
    int total = P * (P + 1) / 2;
    for (int k = 0; k < total; k++) sb[k] = rank + k;
    for (int i = 0; i < MAXP; i++) rb[i] = -1;
    RUN(nb, MPI_Reduce_scatter_c(sb, rb, counts, MPI_INT, MPI_SUM, w),
        MPI_Ireduce_scatter_c(sb, rb, counts, MPI_INT, MPI_SUM, w, &rq_));
    for (int i = 0; i <= rank; i++)
        EQ(rb[i], P * (P - 1) / 2 + P * ((int)off + i), "Reduce_scatter_c", i);
}

static void test_local(void)
{
    int in[K] = {1, 2, 3}, io[K] = {10, 20, 30};
    CHECK_MPI(MPI_Reduce_local_c(in, io, K, MPI_INT, MPI_SUM));
    for (int i = 0; i < K; i++)
        CHECK(io[i] == 11 * (i + 1), "Reduce_local_c: [%d] is %d", i, io[i]);
}

/* Every rank passes the same bad argument, so each fails alone, before any
 * exchange. */
static void test_errors(void)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int b[K] = {0}, r[K] = {0};
    static int rb[MAXP * K];
    MPI_Count counts[MAXP];
    MPI_Aint displs[MAXP];
    MPI_Request rq;

    CHECK_MPI(MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN));
    expect_count_error(MPI_Bcast_c(b, -1, MPI_INT, 0, w), "Bcast_c count -1");
    expect_count_error(MPI_Ibcast_c(b, -1, MPI_INT, 0, w, &rq), "Ibcast_c count -1");
    expect_count_error(MPI_Gather_c(b, -1, MPI_INT, rb, -1, MPI_INT, 0, w), "Gather_c counts -1");
    expect_count_error(MPI_Alltoall_c(b, -1, MPI_INT, rb, -1, MPI_INT, w), "Alltoall_c counts -1");
    /* MPICH 4.0 does not check these counts (it returns MPI_SUCCESS or
     * crashes), so only a strict run checks them. */
    if (!allow_known_bugs_()) {
        expect_count_error(MPI_Allreduce_c(b, r, -2, MPI_INT, MPI_SUM, w), "Allreduce_c count -2");
        expect_count_error(MPI_Reduce_local_c(b, r, -1, MPI_INT, MPI_SUM),
                           "Reduce_local_c count -1");
        expect_count_error(MPI_Scan_c(b, r, -((MPI_Count)1 << 40), MPI_INT, MPI_SUM, w),
                           "Scan_c count -2^40");
    }
    expect_count_error(MPI_Allgather_c(b, -1, MPI_INT, rb, 1, MPI_INT, w),
                       "Allgather_c sendcount -1");
    for (int j = 0; j < size; j++) { counts[j] = 1; displs[j] = j; }
    counts[size - 1] = -1;
    expect_count_error(MPI_Allgatherv_c(b, 1, MPI_INT, rb, counts, displs, MPI_INT, w),
                       "Allgatherv_c recvcounts[size-1] -1");
    counts[size - 1] = -((MPI_Count)1 << 40);
    expect_count_error(MPI_Reduce_scatter_c(b, r, counts, MPI_INT, MPI_SUM, w),
                       "Reduce_scatter_c recvcounts[size-1] -2^40");
    CHECK_MPI(MPI_Comm_set_errhandler(w, MPI_ERRORS_ARE_FATAL));
}

/* A user operation with a large-count length (MPI_Op_create_c): it sees
 * MPI_Count lengths and works in every reduction. */
static MPI_Count op_c_calls, op_c_seen;
static void sum_c(void *in, void *inout, MPI_Count *len, MPI_Datatype *dt)
{
    const int *a = in;
    int *b = inout;
    CHECK(*dt == MPI_INT, "sum_c got another datatype");
    for (MPI_Count i = 0; i < *len; i++) b[i] += a[i];
    op_c_calls++;
    op_c_seen += *len;
}

static void test_user_op_c(void)
{
    MPI_Op op;
    CHECK_MPI(MPI_Op_create_c(sum_c, 1, &op));
    int s[K], r[K];
    for (int i = 0; i < K; i++) { s[i] = rank + i; r[i] = -1; }
    CHECK_MPI(MPI_Allreduce_c(s, r, K, MPI_INT, op, MPI_COMM_WORLD));
    for (int i = 0; i < K; i++) CHECK(r[i] == size * i + size * (size - 1) / 2, "Op_create_c allreduce [%d] %d", i, r[i]);
    int local[K];
    for (int i = 0; i < K; i++) local[i] = 10 + i;
    CHECK_MPI(MPI_Reduce_local_c(s, local, K, MPI_INT, op));
    for (int i = 0; i < K; i++) CHECK(local[i] == 10 + i + rank + i, "Reduce_local_c with Op_create_c [%d]", i);
    CHECK(op_c_calls > 0 && op_c_seen >= K, "sum_c was called (%lld calls, %lld elements)",
          (long long)op_c_calls, (long long)op_c_seen);
    CHECK_MPI(MPI_Op_free(&op));
}

/* The neighbourhood `_c` calls on a periodic ring of 3 ranks or more (the
 * left and right neighbours differ), blocking and non-blocking. */
static void test_neighbor(int nb)
{
    if (size < 3)
        return;
    MPI_Comm ring;
    int dims[1] = {size}, periods[1] = {1};
    CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    int r, left, right;
    MPI_Comm_rank(ring, &r);
    CHECK_MPI(MPI_Cart_shift(ring, 0, 1, &left, &right));
    int s[2], g[2];
    MPI_Count one[2] = {1, 1};
    MPI_Aint disp[2] = {0, 1}, bdisp[2] = {0, sizeof(int)};
    MPI_Datatype types[2] = {MPI_INT, MPI_INT};
    for (int k = 0; k < 5; k++) {
        s[0] = 10 * r + k;
        s[1] = 10 * r + 5 + k;
        g[0] = g[1] = -1;
        switch (k) {
        case 0:
            RUN(nb, MPI_Neighbor_allgather_c(s, 1, MPI_INT, g, 1, MPI_INT, ring),
                MPI_Ineighbor_allgather_c(s, 1, MPI_INT, g, 1, MPI_INT, ring, &rq_));
            break;
        case 1:
            RUN(nb, MPI_Neighbor_allgatherv_c(s, 1, MPI_INT, g, one, disp, MPI_INT, ring),
                MPI_Ineighbor_allgatherv_c(s, 1, MPI_INT, g, one, disp, MPI_INT, ring, &rq_));
            break;
        case 2:
            RUN(nb, MPI_Neighbor_alltoall_c(s, 1, MPI_INT, g, 1, MPI_INT, ring),
                MPI_Ineighbor_alltoall_c(s, 1, MPI_INT, g, 1, MPI_INT, ring, &rq_));
            break;
        case 3:
            RUN(nb, MPI_Neighbor_alltoallv_c(s, one, disp, MPI_INT, g, one, disp, MPI_INT, ring),
                MPI_Ineighbor_alltoallv_c(s, one, disp, MPI_INT, g, one, disp, MPI_INT, ring, &rq_));
            break;
        default:
            RUN(nb, MPI_Neighbor_alltoallw_c(s, one, bdisp, types, g, one, bdisp, types, ring),
                MPI_Ineighbor_alltoallw_c(s, one, bdisp, types, g, one, bdisp, types, ring, &rq_));
        }
        EQ(g[0], k < 2 ? 10 * left + k : 10 * left + 5 + k, "Neighbor_*_c from the left", k);
        EQ(g[1], 10 * right + k, "Neighbor_*_c from the right", k);
    }
    CHECK_MPI(MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN));
    MPI_Count bad[2] = {1, -1};
    expect_count_error(MPI_Neighbor_allgatherv_c(s, 1, MPI_INT, g, bad, disp, MPI_INT, ring),
                       "Neighbor_allgatherv_c recvcounts[1] -1");
    bad[1] = -((MPI_Count)1 << 40);
    expect_count_error(MPI_Neighbor_alltoallv_c(s, one, disp, MPI_INT, g, bad, disp, MPI_INT, ring),
                       "Neighbor_alltoallv_c recvcounts[1] -2^40");
    CHECK_MPI(MPI_Comm_free(&ring));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= MAXP, "at most %d ranks", MAXP);

    for (int nb = 0; nb < 2; nb++) {
        test_rooted(nb);
        test_all(nb);
        test_neighbor(nb);
    }
    test_local();
    test_user_op_c();
    test_errors();

    REPORT_OK();
    MPI_Finalize();
    return 0;
}
