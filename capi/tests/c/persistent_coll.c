/* MPI-4's persistent collectives (MPI_<Coll>_init + MPI_Start/MPI_Startall):
 * each one initialised once and started several times, with new data in the
 * same buffers before every start (the buffers are read at each start, not
 * at init), checked against what the blocking collective gives; the `_c`
 * variants; in place; several started at once with MPI_Startall; the
 * neighbourhood ones on a ring; the request's life (inactive: MPI_Test says
 * done with an empty status; started twice: MPI_ERR_REQUEST; freed while
 * inactive); and the errors of init itself. Plain MPI-4 only.
 *
 * Not in run_mpich.sh: MPICH 4.0.2's own persistent collectives fail these
 * checks (MPI_Gather_init leaves uninitialised words at the root, a second
 * MPI_Scatter_init start delivers nothing, MPI_Test of an inactive one says
 * "not complete", waits end in "Invalid communicator" at np 3 and 4), so
 * the programs built by mpicc.mpich run against gmpi only. */
#define TEST_NAME "persistent_coll"
#include "check.h"
#include <string.h>

#define K 3
#define MAXP 64
#define ROUNDS 3

static int rank, size;

static void run(MPI_Request *rq)
{
    CHECK_MPI(MPI_Start(rq));
    CHECK_MPI(MPI_Wait(rq, MPI_STATUS_IGNORE));
    CHECK(*rq != MPI_REQUEST_NULL, "a persistent request stays allocated after MPI_Wait");
}

#define EQ(got, want, what, it, idx)                                                  \
    CHECK((got) == (want), "%s round %d: [%d] is %d, expected %d", what, it, (int)(idx), \
          (int)(got), (int)(want))

static void test_rooted(void)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int root = size - 1, P = size;
    int b[K], s[K], r[K];
    static int big[MAXP * K], counts[MAXP], displs[MAXP];
    MPI_Request rq[6];

    CHECK_MPI(MPI_Bcast_init(b, K, MPI_INT, 0, w, MPI_INFO_NULL, &rq[0]));
    CHECK_MPI(MPI_Reduce_init(s, r, K, MPI_INT, MPI_SUM, root, w, MPI_INFO_NULL, &rq[1]));
    CHECK_MPI(MPI_Gather_init(s, K, MPI_INT, big, K, MPI_INT, root, w, MPI_INFO_NULL, &rq[2]));
    CHECK_MPI(MPI_Scatter_init(big, K, MPI_INT, r, K, MPI_INT, root, w, MPI_INFO_NULL, &rq[3]));
    for (int j = 0; j < P; j++) { counts[j] = 1 + j % 2; displs[j] = 2 * j; }
    CHECK_MPI(MPI_Gatherv_init(s, counts[rank], MPI_INT, big, counts, displs, MPI_INT, root, w,
                               MPI_INFO_NULL, &rq[4]));
    CHECK_MPI(MPI_Scatterv_init(big, counts, displs, MPI_INT, r, counts[rank], MPI_INT, root, w,
                                MPI_INFO_NULL, &rq[5]));
    for (int it = 0; it < ROUNDS; it++) {
        for (int i = 0; i < K; i++) b[i] = rank == 0 ? 7 + i + 10 * it : -1;
        run(&rq[0]);
        for (int i = 0; i < K; i++) EQ(b[i], 7 + i + 10 * it, "Bcast_init", it, i);

        for (int i = 0; i < K; i++) { s[i] = rank + i + it; r[i] = -1; }
        run(&rq[1]);
        if (rank == root)
            for (int i = 0; i < K; i++)
                EQ(r[i], P * (i + it) + P * (P - 1) / 2, "Reduce_init", it, i);

        for (int i = 0; i < K; i++) s[i] = rank * 100 + i + it;
        run(&rq[2]);
        if (rank == root)
            for (int j = 0; j < P * K; j++)
                EQ(big[j], (j / K) * 100 + j % K + it, "Gather_init", it, j);

        if (rank == root)
            for (int j = 0; j < P * K; j++) big[j] = 5 * j + it;
        run(&rq[3]);
        for (int i = 0; i < K; i++) EQ(r[i], 5 * (rank * K + i) + it, "Scatter_init", it, i);

        for (int i = 0; i < K; i++) s[i] = 1000 * rank + i + it;
        if (rank == root)
            for (int j = 0; j < 2 * P; j++) big[j] = -1;
        run(&rq[4]);
        if (rank == root)
            for (int j = 0; j < P; j++)
                for (int i = 0; i < counts[j]; i++)
                    EQ(big[displs[j] + i], 1000 * j + i + it, "Gatherv_init", it, j);

        if (rank == root)
            for (int j = 0; j < 2 * P; j++) big[j] = 3 * j - it;
        for (int i = 0; i < K; i++) r[i] = -1;
        run(&rq[5]);
        for (int i = 0; i < counts[rank]; i++)
            EQ(r[i], 3 * (displs[rank] + i) - it, "Scatterv_init", it, i);
    }
    for (int i = 0; i < 6; i++) {
        CHECK_MPI(MPI_Request_free(&rq[i]));
        CHECK(rq[i] == MPI_REQUEST_NULL, "MPI_Request_free sets MPI_REQUEST_NULL");
    }
}

static void test_all(void)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int P = size;
    int s[K], r[K], inplace[K];
    static int sbig[MAXP * K], rbig[MAXP * K];
    static int sc[MAXP], sd[MAXP], rc[MAXP], rd[MAXP], rcounts[MAXP];
    static MPI_Datatype st[MAXP], rt[MAXP];
    MPI_Request rq[11];

    CHECK_MPI(MPI_Barrier_init(w, MPI_INFO_NULL, &rq[0]));
    CHECK_MPI(MPI_Allreduce_init(s, r, K, MPI_INT, MPI_MAX, w, MPI_INFO_NULL, &rq[1]));
    CHECK_MPI(MPI_Allreduce_init(MPI_IN_PLACE, inplace, K, MPI_INT, MPI_SUM, w, MPI_INFO_NULL,
                                 &rq[2]));
    CHECK_MPI(MPI_Allgather_init(s, K, MPI_INT, rbig, K, MPI_INT, w, MPI_INFO_NULL, &rq[3]));
    CHECK_MPI(MPI_Alltoall_init(sbig, K, MPI_INT, rbig, K, MPI_INT, w, MPI_INFO_NULL, &rq[4]));
    for (int j = 0; j < P; j++) {
        sc[j] = rc[j] = 1;
        sd[j] = rd[j] = j;
        st[j] = rt[j] = MPI_INT;
        rcounts[j] = 1;
    }
    CHECK_MPI(MPI_Allgatherv_init(s, 1, MPI_INT, rbig, rc, rd, MPI_INT, w, MPI_INFO_NULL, &rq[5]));
    CHECK_MPI(MPI_Alltoallv_init(sbig, sc, sd, MPI_INT, rbig, rc, rd, MPI_INT, w, MPI_INFO_NULL,
                                 &rq[6]));
    static int sdb[MAXP], rdb[MAXP];
    for (int j = 0; j < P; j++) { sdb[j] = rdb[j] = j * (int)sizeof(int); }
    CHECK_MPI(MPI_Alltoallw_init(sbig, sc, sdb, st, rbig, rc, rdb, rt, w, MPI_INFO_NULL, &rq[7]));
    CHECK_MPI(MPI_Reduce_scatter_block_init(sbig, r, 1, MPI_INT, MPI_SUM, w, MPI_INFO_NULL,
                                            &rq[8]));
    CHECK_MPI(MPI_Reduce_scatter_init(sbig, r, rcounts, MPI_INT, MPI_SUM, w, MPI_INFO_NULL,
                                      &rq[9]));
    CHECK_MPI(MPI_Scan_init(s, r, K, MPI_INT, MPI_SUM, w, MPI_INFO_NULL, &rq[10]));

    for (int it = 0; it < ROUNDS; it++) {
        run(&rq[0]);

        for (int i = 0; i < K; i++) { s[i] = rank * 10 + i + it; r[i] = -1; }
        run(&rq[1]);
        for (int i = 0; i < K; i++) EQ(r[i], (P - 1) * 10 + i + it, "Allreduce_init", it, i);

        for (int i = 0; i < K; i++) inplace[i] = rank + i + it;
        run(&rq[2]);
        for (int i = 0; i < K; i++)
            EQ(inplace[i], P * (i + it) + P * (P - 1) / 2, "Allreduce_init in place", it, i);

        for (int i = 0; i < K; i++) s[i] = rank * 100 + i - it;
        run(&rq[3]);
        for (int j = 0; j < P * K; j++)
            EQ(rbig[j], (j / K) * 100 + j % K - it, "Allgather_init", it, j);

        for (int j = 0; j < P * K; j++) sbig[j] = rank * 1000 + j + it;
        run(&rq[4]);
        for (int j = 0; j < P; j++)
            for (int i = 0; i < K; i++)
                EQ(rbig[j * K + i], j * 1000 + rank * K + i + it, "Alltoall_init", it, j);

        s[0] = 7 * rank + it;
        run(&rq[5]);
        for (int j = 0; j < P; j++) EQ(rbig[j], 7 * j + it, "Allgatherv_init", it, j);

        for (int j = 0; j < P; j++) sbig[j] = 100 * rank + j + it;
        run(&rq[6]);
        for (int j = 0; j < P; j++) EQ(rbig[j], 100 * j + rank + it, "Alltoallv_init", it, j);

        for (int j = 0; j < P; j++) sbig[j] = 100 * rank + j - it;
        run(&rq[7]);
        for (int j = 0; j < P; j++) EQ(rbig[j], 100 * j + rank - it, "Alltoallw_init", it, j);

        for (int j = 0; j < P; j++) sbig[j] = j + rank + it;
        r[0] = -1;
        run(&rq[8]);
        EQ(r[0], P * (rank + it) + P * (P - 1) / 2, "Reduce_scatter_block_init", it, 0);

        r[0] = -1;
        run(&rq[9]);
        EQ(r[0], P * (rank + it) + P * (P - 1) / 2, "Reduce_scatter_init", it, 0);

        for (int i = 0; i < K; i++) s[i] = 1 + i + it;
        run(&rq[10]);
        for (int i = 0; i < K; i++) EQ(r[i], (rank + 1) * (1 + i + it), "Scan_init", it, i);
    }
    for (int i = 0; i < 11; i++) CHECK_MPI(MPI_Request_free(&rq[i]));

    /* Exscan: rank 0's result is undefined; the others get the prefix. */
    MPI_Request ex;
    CHECK_MPI(MPI_Exscan_init(s, r, 1, MPI_INT, MPI_SUM, w, MPI_INFO_NULL, &ex));
    for (int it = 0; it < ROUNDS; it++) {
        s[0] = rank + it;
        run(&ex);
        if (rank > 0) EQ(r[0], rank * it + rank * (rank - 1) / 2, "Exscan_init", it, 0);
    }
    CHECK_MPI(MPI_Request_free(&ex));
}

/* The count and displacement arrays may be reused once `_init` returns
 * (mpi4py frees its temporary ones): a persistent collective keeps its own
 * copy, so arrays scribbled over and freed after init change nothing. */
static void test_arrays_copied_at_init(void)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int P = size, root = 0;
    int *rc = malloc(sizeof(int) * (size_t)P), *rd = malloc(sizeof(int) * (size_t)P);
    int *sc = malloc(sizeof(int) * (size_t)P), *sd = malloc(sizeof(int) * (size_t)P);
    CHECK(rc && rd && sc && sd, "malloc");
    for (int j = 0; j < P; j++) { rc[j] = sc[j] = 1; rd[j] = sd[j] = j; }
    static int sbuf[MAXP], rbuf[MAXP];
    MPI_Request rq[3];
    CHECK_MPI(MPI_Allgatherv_init(sbuf, 1, MPI_INT, rbuf, rc, rd, MPI_INT, w, MPI_INFO_NULL, &rq[0]));
    CHECK_MPI(MPI_Alltoallv_init(sbuf, sc, sd, MPI_INT, rbuf, rc, rd, MPI_INT, w, MPI_INFO_NULL,
                                 &rq[1]));
    CHECK_MPI(MPI_Gatherv_init(sbuf, 1, MPI_INT, rbuf, rc, rd, MPI_INT, root, w, MPI_INFO_NULL,
                               &rq[2]));
    for (int j = 0; j < P; j++) { rc[j] = sc[j] = -12345; rd[j] = sd[j] = 1 << 30; }
    free(rc);
    free(rd);
    free(sc);
    free(sd);
    for (int it = 0; it < ROUNDS; it++) {
        sbuf[0] = 50 * rank + it;
        run(&rq[0]);
        for (int j = 0; j < P; j++) EQ(rbuf[j], 50 * j + it, "Allgatherv_init, arrays freed", it, j);
        for (int j = 0; j < P; j++) sbuf[j] = 70 * rank + j + it;
        run(&rq[1]);
        for (int j = 0; j < P; j++) EQ(rbuf[j], 70 * j + rank + it, "Alltoallv_init, arrays freed", it, j);
        sbuf[0] = 90 * rank - it;
        run(&rq[2]);
        if (rank == root)
            for (int j = 0; j < P; j++) EQ(rbuf[j], 90 * j - it, "Gatherv_init, arrays freed", it, j);
    }
    for (int i = 0; i < 3; i++) CHECK_MPI(MPI_Request_free(&rq[i]));
}

/* Several persistent collectives started together, completed by Waitall,
 * again and again; the large-count variants among them. */
static void test_startall(void)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int P = size;
    long a[K], ar[K], b[K];
    MPI_Request rq[3];
    CHECK_MPI(MPI_Allreduce_init_c(a, ar, (MPI_Count)K, MPI_LONG, MPI_SUM, w, MPI_INFO_NULL,
                                   &rq[0]));
    CHECK_MPI(MPI_Bcast_init_c(b, (MPI_Count)K, MPI_LONG, 0, w, MPI_INFO_NULL, &rq[1]));
    CHECK_MPI(MPI_Barrier_init(w, MPI_INFO_NULL, &rq[2]));
    for (int it = 0; it < ROUNDS; it++) {
        for (int i = 0; i < K; i++) {
            a[i] = rank * i + it;
            ar[i] = -1;
            b[i] = rank == 0 ? 40 + i + it : 0;
        }
        CHECK_MPI(MPI_Startall(3, rq));
        CHECK_MPI(MPI_Waitall(3, rq, MPI_STATUSES_IGNORE));
        for (int i = 0; i < K; i++) {
            EQ(ar[i], (long)i * P * (P - 1) / 2 + (long)P * it, "Allreduce_init_c", it, i);
            EQ(b[i], 40 + i + it, "Bcast_init_c", it, i);
        }
    }
    for (int i = 0; i < 3; i++) CHECK_MPI(MPI_Request_free(&rq[i]));
}

/* The neighbourhood collectives on a periodic ring (of 3 ranks or more, so
 * that the left and right neighbours differ). */
static void test_neighbor(void)
{
    if (size < 3)
        return;
    MPI_Comm ring;
    int dims[1] = {size}, periods[1] = {1};
    CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    int r, left, right;
    MPI_Comm_rank(ring, &r);
    CHECK_MPI(MPI_Cart_shift(ring, 0, 1, &left, &right));
    int s[2], g[2], one[2] = {1, 1}, disp[2] = {0, 1};
    MPI_Aint bdisp[2] = {0, sizeof(int)};
    MPI_Datatype types[2] = {MPI_INT, MPI_INT};
    MPI_Request rq[5];
    CHECK_MPI(MPI_Neighbor_allgather_init(s, 1, MPI_INT, g, 1, MPI_INT, ring, MPI_INFO_NULL, &rq[0]));
    CHECK_MPI(MPI_Neighbor_allgatherv_init(s, 1, MPI_INT, g, one, disp, MPI_INT, ring,
                                           MPI_INFO_NULL, &rq[1]));
    CHECK_MPI(MPI_Neighbor_alltoall_init(s, 1, MPI_INT, g, 1, MPI_INT, ring, MPI_INFO_NULL, &rq[2]));
    CHECK_MPI(MPI_Neighbor_alltoallv_init(s, one, disp, MPI_INT, g, one, disp, MPI_INT, ring,
                                          MPI_INFO_NULL, &rq[3]));
    CHECK_MPI(MPI_Neighbor_alltoallw_init(s, one, bdisp, types, g, one, bdisp, types, ring,
                                          MPI_INFO_NULL, &rq[4]));
    for (int it = 0; it < ROUNDS; it++) {
        /* allgather(v): each neighbour's first value; alltoall(v,w): s[0]
         * goes left, s[1] right, so g[0] comes from the left's s[1]. */
        for (int k = 0; k < 5; k++) {
            s[0] = 10 * r + it + k;
            s[1] = 10 * r + 5 + it + k;
            g[0] = g[1] = -1;
            run(&rq[k]);
            int want0 = k < 2 ? 10 * left + it + k : 10 * left + 5 + it + k;
            int want1 = 10 * right + it + k;
            EQ(g[0], want0, "Neighbor_*_init from the left", it, k);
            EQ(g[1], want1, "Neighbor_*_init from the right", it, k);
        }
    }
    for (int k = 0; k < 5; k++) CHECK_MPI(MPI_Request_free(&rq[k]));
    /* The large-count forms. */
    MPI_Count onec[2] = {1, 1};
    MPI_Aint dispc[2] = {0, 1};
    CHECK_MPI(MPI_Neighbor_allgather_init_c(s, 1, MPI_INT, g, 1, MPI_INT, ring, MPI_INFO_NULL, &rq[0]));
    CHECK_MPI(MPI_Neighbor_allgatherv_init_c(s, 1, MPI_INT, g, onec, dispc, MPI_INT, ring,
                                             MPI_INFO_NULL, &rq[1]));
    CHECK_MPI(MPI_Neighbor_alltoall_init_c(s, 1, MPI_INT, g, 1, MPI_INT, ring, MPI_INFO_NULL, &rq[2]));
    CHECK_MPI(MPI_Neighbor_alltoallv_init_c(s, onec, dispc, MPI_INT, g, onec, dispc, MPI_INT, ring,
                                            MPI_INFO_NULL, &rq[3]));
    CHECK_MPI(MPI_Neighbor_alltoallw_init_c(s, onec, bdisp, types, g, onec, bdisp, types, ring,
                                            MPI_INFO_NULL, &rq[4]));
    for (int it = 0; it < ROUNDS; it++) {
        for (int k = 0; k < 5; k++) {
            s[0] = 20 * r + it + k;
            s[1] = 20 * r + 5 + it + k;
            g[0] = g[1] = -1;
            run(&rq[k]);
            EQ(g[0], k < 2 ? 20 * left + it + k : 20 * left + 5 + it + k, "Neighbor_*_init_c left", it, k);
            EQ(g[1], 20 * right + it + k, "Neighbor_*_init_c right", it, k);
        }
    }
    for (int k = 0; k < 5; k++) CHECK_MPI(MPI_Request_free(&rq[k]));
    CHECK_MPI(MPI_Comm_free(&ring));
}

static void expect_class(int rc, int want, const char *what)
{
    int cls = -1;
    CHECK(rc != MPI_SUCCESS, "%s: returned MPI_SUCCESS", what);
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK(cls == want, "%s: error class %d, expected %d", what, cls, want);
}

static void test_life_and_errors(void)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int x = rank, y = -1, flag = 0;
    MPI_Status st;
    MPI_Request rq;
    CHECK_MPI(MPI_Allreduce_init(&x, &y, 1, MPI_INT, MPI_SUM, w, MPI_INFO_NULL, &rq));
    /* Inactive: complete at once, with an empty status. */
    CHECK_MPI(MPI_Test(&rq, &flag, &st));
    CHECK(flag, "MPI_Test of an inactive persistent collective says complete");
    CHECK(rq != MPI_REQUEST_NULL, "and keeps the request");
    CHECK_MPI(MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Start(&rq));
    expect_class(MPI_Start(&rq), MPI_ERR_REQUEST, "MPI_Start of an active request");
    CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    EQ(y, size * (size - 1) / 2, "Allreduce_init after a refused second start", 0, 0);
    CHECK_MPI(MPI_Request_free(&rq));

    MPI_Info bad = (MPI_Info)0x12345;
    expect_class(MPI_Allreduce_init(&x, &y, 1, MPI_INT, MPI_SUM, w, bad, &rq), MPI_ERR_INFO,
                 "Allreduce_init with an invalid info");
    expect_class(MPI_Barrier_init(MPI_COMM_NULL, MPI_INFO_NULL, &rq), MPI_ERR_COMM,
                 "Barrier_init on MPI_COMM_NULL");
    expect_class(MPI_Allreduce_init(&x, &y, 1, MPI_INT, MPI_OP_NULL, w, MPI_INFO_NULL, &rq),
                 MPI_ERR_OP, "Allreduce_init with MPI_OP_NULL");
    MPI_Info info;
    CHECK_MPI(MPI_Info_create(&info));
    CHECK_MPI(MPI_Bcast_init(&x, 1, MPI_INT, 0, w, info, &rq));
    CHECK_MPI(MPI_Info_free(&info));
    run(&rq);
    EQ(x, 0, "Bcast_init with an info (freed after init)", 0, 0);
    CHECK_MPI(MPI_Request_free(&rq));
    CHECK_MPI(MPI_Comm_set_errhandler(w, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= MAXP, "at most %d ranks", MAXP);

    test_rooted();
    test_all();
    test_arrays_copied_at_init();
    test_startall();
    test_neighbor();
    test_life_and_errors();

    REPORT_OK();
    MPI_Finalize();
    return 0;
}
