/* Intercommunicators: MPI_Intercomm_create between the low half A of the
 * world (size/2 ranks) and the high half B, point-to-point across the
 * groups, rooted collectives with MPI_ROOT / MPI_PROC_NULL, the all-to-all
 * family, reductions (each group gets the other's), non-blocking forms,
 * dup / split / create / merge / create_from_groups, and the errors
 * intercommunicators give. Any np >= 1 (np 1 checks the errors only). */
#define TEST_NAME "intercomm"
#include "check.h"
#include <string.h>

static int wrank, wsize;

#define EXPECT_ERR(call, cls)                                                            \
    do {                                                                                 \
        int rc_ = (call), c_ = -1;                                                       \
        if (rc_ != MPI_SUCCESS) MPI_Error_class(rc_, &c_);                               \
        CHECK(c_ == (cls), "%s returned %d (class %d), expected class %d", #call, rc_, c_, \
              (cls));                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    int flag = -1, rs;
    CHECK_MPI(MPI_Comm_test_inter(MPI_COMM_WORLD, &flag));
    CHECK(flag == 0, "test_inter(world) = %d", flag);
    EXPECT_ERR(MPI_Comm_remote_size(MPI_COMM_WORLD, &rs), MPI_ERR_COMM);
    MPI_Comm bad;
    EXPECT_ERR(MPI_Intercomm_merge(MPI_COMM_WORLD, 0, &bad), MPI_ERR_COMM);
    EXPECT_ERR(MPI_Intercomm_create(MPI_COMM_WORLD, wsize, MPI_COMM_WORLD, 0, 1, &bad),
               MPI_ERR_RANK);
    if (wsize < 2) {
        REPORT_OK();
        MPI_Finalize();
        return 0;
    }

    int a = wsize / 2, low = wrank < a;
    int nloc = low ? a : wsize - a, nrem = low ? wsize - a : a;
    int rbase = low ? a : 0; /* world rank of remote rank 0 */
    MPI_Comm local, inter;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, !low, wrank, &local));
    CHECK_MPI(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, low ? a : 0, 42, &inter));
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    int me, n;
    CHECK_MPI(MPI_Comm_rank(inter, &me));
    CHECK_MPI(MPI_Comm_size(inter, &n));
    CHECK_MPI(MPI_Comm_remote_size(inter, &rs));
    CHECK_MPI(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag == 1 && n == nloc && rs == nrem && me == (low ? wrank : wrank - a),
          "inter: flag %d size %d remote %d rank %d", flag, n, rs, me);
    MPI_Group rg, wg;
    int res;
    CHECK_MPI(MPI_Comm_remote_group(inter, &rg));
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int rr[1] = {0}, tr[1];
    CHECK_MPI(MPI_Group_translate_ranks(rg, 1, rr, wg, tr));
    CHECK(tr[0] == rbase, "remote rank 0 is world rank %d, expected %d", tr[0], rbase);
    MPI_Group_free(&wg);

    /* point-to-point names remote ranks */
    for (int q = 0; q < nrem; q++) {
        int out = wrank * 10 + q, in = -1;
        MPI_Status st;
        CHECK_MPI(MPI_Sendrecv(&out, 1, MPI_INT, q, 5, &in, 1, MPI_INT, q, 5, inter, &st));
        CHECK(in == (rbase + q) * 10 + me && st.MPI_SOURCE == q, "p2p from %d: %d (source %d)",
              q, in, st.MPI_SOURCE);
    }
    EXPECT_ERR(MPI_Send(&me, 1, MPI_INT, nrem, 0, inter), MPI_ERR_RANK);

    CHECK_MPI(MPI_Barrier(inter));

    /* bcast from A's rank 0 */
    double d[3] = {0, 0, 0};
    int root = low ? (me == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    if (root == MPI_ROOT) d[0] = 1.5, d[1] = 2.5, d[2] = 3.5;
    CHECK_MPI(MPI_Bcast(d, 3, MPI_DOUBLE, root, inter));
    if (!low) CHECK(d[0] == 1.5 && d[2] == 3.5, "bcast got %g %g", d[0], d[2]);

    /* allreduce: the other group's sum */
    long v = wrank + 1, sum = 0, exp = 0;
    for (int q = 0; q < nrem; q++) exp += rbase + q + 1;
    CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, inter));
    CHECK(sum == exp, "allreduce %ld expected %ld", sum, exp);
    MPI_Request req;
    sum = 0;
    CHECK_MPI(MPI_Iallreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, inter, &req));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(sum == exp, "iallreduce %ld expected %ld", sum, exp);

    /* reduce to B's last rank */
    root = low ? nrem - 1 : (me == nloc - 1 ? MPI_ROOT : MPI_PROC_NULL);
    sum = -1;
    CHECK_MPI(MPI_Reduce(low ? &v : NULL, root == MPI_ROOT ? &sum : NULL, 1, MPI_LONG, MPI_SUM,
                         root, inter));
    if (root == MPI_ROOT) CHECK(sum == exp, "reduce %ld expected %ld", sum, exp);

    /* gather / scatter rooted at A's rank 0 */
    root = low ? (me == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    int *g = calloc((size_t)nrem * 2, sizeof(int));
    int mine[2] = {wrank, -wrank};
    CHECK_MPI(MPI_Gather(mine, 2, MPI_INT, g, 2, MPI_INT, root, inter));
    if (root == MPI_ROOT)
        for (int q = 0; q < nrem; q++)
            CHECK(g[2 * q] == rbase + q && g[2 * q + 1] == -(rbase + q), "gather [%d]", q);
    int sc[2] = {0, 0};
    for (int q = 0; q < 2 * nrem; q++) g[q] = 100 + q;
    CHECK_MPI(MPI_Scatter(g, 2, MPI_INT, sc, 2, MPI_INT, root, inter));
    if (!low) CHECK(sc[0] == 100 + 2 * me && sc[1] == 101 + 2 * me, "scatter %d %d", sc[0], sc[1]);
    free(g);

    /* allgather and alltoall */
    int *ag = calloc((size_t)nrem, sizeof(int)), *sa = calloc((size_t)nrem, sizeof(int));
    CHECK_MPI(MPI_Allgather(&wrank, 1, MPI_INT, ag, 1, MPI_INT, inter));
    for (int q = 0; q < nrem; q++) CHECK(ag[q] == rbase + q, "allgather [%d] = %d", q, ag[q]);
    for (int q = 0; q < nrem; q++) sa[q] = wrank * 100 + q;
    CHECK_MPI(MPI_Alltoall(sa, 1, MPI_INT, ag, 1, MPI_INT, inter));
    for (int q = 0; q < nrem; q++)
        CHECK(ag[q] == (rbase + q) * 100 + me, "alltoall [%d] = %d", q, ag[q]);
    free(ag);
    free(sa);

    /* errors intercommunicators give */
    EXPECT_ERR(MPI_Scan(&v, &sum, 1, MPI_LONG, MPI_SUM, inter), MPI_ERR_COMM);
    EXPECT_ERR(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_LONG, MPI_SUM, inter), MPI_ERR_ARG);
    EXPECT_ERR(MPI_Bcast(d, 3, MPI_DOUBLE, nrem, inter), MPI_ERR_ROOT);
    int dims[1] = {0}, periods[1] = {0};
    MPI_Comm cart;
    EXPECT_ERR(MPI_Cart_create(inter, 1, dims, periods, 0, &cart), MPI_ERR_COMM);

    /* dup, split, compare, merge */
    MPI_Comm dup, sp, merged;
    CHECK_MPI(MPI_Comm_dup(inter, &dup));
    CHECK_MPI(MPI_Comm_compare(inter, dup, &res));
    CHECK(res == MPI_CONGRUENT, "compare(inter, dup) = %d", res);
    CHECK_MPI(MPI_Comm_compare(inter, MPI_COMM_WORLD, &res));
    CHECK(res == MPI_UNEQUAL, "compare(inter, world) = %d", res);
    CHECK_MPI(MPI_Comm_split(dup, 0, -me, &sp));
    CHECK_MPI(MPI_Comm_remote_size(sp, &rs));
    int sr;
    MPI_Comm_rank(sp, &sr);
    CHECK(rs == nrem && sr == nloc - 1 - me, "split: remote %d rank %d", rs, sr);
    CHECK_MPI(MPI_Intercomm_merge(sp, !low, &merged));
    int mr, ms;
    MPI_Comm_rank(merged, &mr);
    MPI_Comm_size(merged, &ms);
    /* A first; inside each group the split reversed the order */
    int emr = low ? a - 1 - wrank : a + (wsize - 1 - wrank);
    CHECK(ms == wsize && mr == emr, "merge: rank %d (expected %d) size %d", mr, emr, ms);
    CHECK_MPI(MPI_Comm_test_inter(merged, &flag));
    CHECK(flag == 0, "merged is an intercommunicator");
    long tot = 0;
    CHECK_MPI(MPI_Allreduce(&v, &tot, 1, MPI_LONG, MPI_SUM, merged));
    CHECK(tot == (long)wsize * (wsize + 1) / 2, "merged allreduce %ld", tot);
    MPI_Comm_free(&merged);
    MPI_Comm_free(&sp);
    MPI_Comm_free(&dup);

    /* create_from_groups: the same two groups */
    MPI_Group lg;
    MPI_Comm fg;
    CHECK_MPI(MPI_Comm_group(inter, &lg));
    CHECK_MPI(MPI_Intercomm_create_from_groups(lg, 0, rg, 0, "gmpi-test", MPI_INFO_NULL,
                                               MPI_ERRORS_RETURN, &fg));
    CHECK_MPI(MPI_Comm_compare(inter, fg, &res));
    CHECK(res == MPI_CONGRUENT, "compare(inter, from_groups) = %d", res);
    v = 1;
    CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, fg));
    CHECK(sum == nrem, "from_groups allreduce %ld", sum);
    MPI_Comm_free(&fg);
    MPI_Group_free(&lg);
    MPI_Group_free(&rg);

    CHECK_MPI(MPI_Comm_free(&inter));
    CHECK_MPI(MPI_Comm_free(&local));
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
