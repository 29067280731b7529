/* Communicators and groups beyond comms.c: error cases under
 * MPI_ERRORS_RETURN, error-handler inheritance, idup, create_group, ranges,
 * names, info, intercommunicator queries. Any np >= 1. */
#define TEST_NAME "comm_groups"
#include "check.h"
#include <string.h>

static int rank, size;

#define EXPECT_ERR(call, cls)                                                            \
    do {                                                                                 \
        int rc_ = (call), c_ = -1;                                                       \
        if (rc_ != MPI_SUCCESS) MPI_Error_class(rc_, &c_);                               \
        CHECK(c_ == (cls), "%s returned %d (class %d), expected class %d", #call, rc_, c_, \
              (cls));                                                                    \
    } while (0)

/* Sum of an int over comm with point-to-point only. */
static int psum(MPI_Comm comm, int v)
{
    int r, n, s = v, t;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    if (r == 0) {
        for (int p = 1; p < n; p++) {
            CHECK_MPI(MPI_Recv(&t, 1, MPI_INT, p, 77, comm, MPI_STATUS_IGNORE));
            s += t;
        }
        for (int p = 1; p < n; p++) CHECK_MPI(MPI_Send(&s, 1, MPI_INT, p, 78, comm));
    } else {
        CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 77, comm));
        CHECK_MPI(MPI_Recv(&s, 1, MPI_INT, 0, 78, comm, MPI_STATUS_IGNORE));
    }
    return s;
}

static void test_comm_errors(void)
{
    int r;
    MPI_Comm c = MPI_COMM_WORLD, n;
    EXPECT_ERR(MPI_Comm_rank(MPI_COMM_NULL, &r), MPI_ERR_COMM);
    EXPECT_ERR(MPI_Comm_size(0x12345, &r), MPI_ERR_COMM);
    EXPECT_ERR(MPI_Comm_rank(MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
    EXPECT_ERR(MPI_Comm_free(&c), MPI_ERR_COMM);
    c = MPI_COMM_SELF;
    EXPECT_ERR(MPI_Comm_free(&c), MPI_ERR_COMM);
    CHECK(c == MPI_COMM_SELF, "failed Comm_free changed the handle");
    EXPECT_ERR(MPI_Comm_split(MPI_COMM_WORLD, -5, 0, &n), MPI_ERR_ARG);
    EXPECT_ERR(MPI_Comm_split_type(MPI_COMM_WORLD, 99, 0, MPI_INFO_NULL, &n), MPI_ERR_ARG);
    EXPECT_ERR(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, 0x777, &n), MPI_ERR_INFO);
    EXPECT_ERR(MPI_Comm_dup(MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
    EXPECT_ERR(MPI_Comm_create(MPI_COMM_WORLD, MPI_GROUP_NULL, &n), MPI_ERR_GROUP);
    EXPECT_ERR(MPI_Comm_remote_size(MPI_COMM_WORLD, &r), MPI_ERR_COMM);
    MPI_Group g;
    EXPECT_ERR(MPI_Comm_remote_group(MPI_COMM_WORLD, &g), MPI_ERR_COMM);
    EXPECT_ERR(MPI_Comm_set_info(MPI_COMM_WORLD, 0x777), MPI_ERR_INFO);
    CHECK_MPI(MPI_Comm_set_info(MPI_COMM_WORLD, MPI_INFO_NULL));
    MPI_Info info = MPI_INFO_NULL;
    CHECK_MPI(MPI_Comm_get_info(MPI_COMM_WORLD, &info));
    CHECK(info != MPI_INFO_NULL, "Comm_get_info gave MPI_INFO_NULL");
    CHECK_MPI(MPI_Comm_set_info(MPI_COMM_WORLD, info));
    MPI_Comm parent = 0;
    CHECK_MPI(MPI_Comm_get_parent(&parent));
    CHECK(parent == MPI_COMM_NULL, "Comm_get_parent gave %#x", parent);
    int inter = 1;
    CHECK_MPI(MPI_Comm_test_inter(MPI_COMM_SELF, &inter));
    CHECK(inter == 0, "test_inter(self)");
    EXPECT_ERR(MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_NULL, &r), MPI_ERR_COMM);
    EXPECT_ERR(MPI_Comm_create_group(MPI_COMM_WORLD, MPI_GROUP_EMPTY, -1, &n), MPI_ERR_TAG);
}

static void test_dups(void)
{
    MPI_Comm d, dd, s, id;
    MPI_Errhandler e;
    MPI_Request rq;
    int res, r, n, len;
    char name[MPI_MAX_OBJECT_NAME];
    CHECK_MPI(MPI_Comm_dup_with_info(MPI_COMM_WORLD, MPI_INFO_NULL, &d));
    CHECK_MPI(MPI_Comm_get_errhandler(d, &e));
    CHECK(e == MPI_ERRORS_RETURN, "dup did not copy the error handler");
    CHECK_MPI(MPI_Comm_get_name(d, name, &len));
    CHECK(len == 0 && name[0] == 0, "a dup has name '%s'", name);
    CHECK_MPI(MPI_Comm_set_errhandler(d, MPI_ERRORS_ARE_FATAL));
    CHECK_MPI(MPI_Comm_dup(d, &dd));
    CHECK_MPI(MPI_Comm_get_errhandler(dd, &e));
    CHECK(e == MPI_ERRORS_ARE_FATAL, "dup of a FATAL comm has handler %#x", e);
    CHECK_MPI(MPI_Comm_set_errhandler(dd, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_split(dd, 0, rank, &s));
    CHECK_MPI(MPI_Comm_get_errhandler(s, &e));
    CHECK(e == MPI_ERRORS_RETURN, "split did not inherit the error handler");
    /* the error goes to s's handler (RETURN) */
    EXPECT_ERR(MPI_Send(&r, 1, MPI_INT, size + 3, 0, s), MPI_ERR_RANK);
    CHECK_MPI(MPI_Comm_compare(s, s, &res));
    CHECK(res == MPI_IDENT, "compare(s, s) = %d", res);
    CHECK_MPI(MPI_Comm_compare(d, dd, &res));
    CHECK(res == MPI_CONGRUENT, "compare(d, dd) = %d", res);

    CHECK_MPI(MPI_Comm_idup(MPI_COMM_WORLD, &id, &rq));
    CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK(rq == MPI_REQUEST_NULL, "idup request not freed by Wait");
    CHECK_MPI(MPI_Comm_rank(id, &r));
    CHECK_MPI(MPI_Comm_size(id, &n));
    CHECK(r == rank && n == size, "idup rank %d size %d", r, n);
    CHECK(psum(id, 1) == size, "traffic on idup");
    MPI_Comm id2;
    CHECK_MPI(MPI_Comm_idup_with_info(id, MPI_INFO_NULL, &id2, &rq));
    CHECK_MPI(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Comm_compare(id, id2, &res));
    CHECK(res == MPI_CONGRUENT, "compare(idup, idup2) = %d", res);

    /* names: set, get, truncate */
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK_MPI(MPI_Comm_set_name(s, big));
    CHECK_MPI(MPI_Comm_get_name(s, name, &len));
    CHECK(len == MPI_MAX_OBJECT_NAME - 1 && (int)strlen(name) == len, "long name cut to %d", len);
    CHECK_MPI(MPI_Comm_set_name(MPI_COMM_WORLD, "world!"));
    CHECK_MPI(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "world!") == 0, "renamed world '%s'", name);
    CHECK_MPI(MPI_Comm_set_name(MPI_COMM_WORLD, "MPI_COMM_WORLD"));

    MPI_Comm *all[] = {&d, &dd, &s, &id, &id2};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        CHECK_MPI(MPI_Comm_free(all[k]));
        CHECK(*all[k] == MPI_COMM_NULL, "free did not null");
    }
    /* a freed handle is invalid */
    MPI_Comm stale;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &stale));
    MPI_Comm copy = stale;
    CHECK_MPI(MPI_Comm_free(&stale));
    EXPECT_ERR(MPI_Comm_rank(copy, &r), MPI_ERR_COMM);
}

static void test_split_type(void)
{
    MPI_Comm a, b, c;
    MPI_Info info;
    int n;
    /* mix of SHARED and UNDEFINED on different ranks */
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, rank == 1 ? MPI_UNDEFINED : MPI_COMM_TYPE_SHARED,
                                  -rank, MPI_INFO_NULL, &a));
    if (rank == 1) {
        CHECK(a == MPI_COMM_NULL, "UNDEFINED rank got a comm");
    } else {
        CHECK_MPI(MPI_Comm_size(a, &n));
        CHECK(n >= 1 && n <= size, "shared size %d", n);
        CHECK(psum(a, 1) == n, "traffic on split_type");
        CHECK_MPI(MPI_Comm_free(&a));
    }
    /* HW_GUIDED with mpi_shared_memory: as SHARED; without the key: COMM_NULL */
    CHECK_MPI(MPI_Info_create(&info));
    CHECK_MPI(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, info, &b));
    CHECK(b != MPI_COMM_NULL, "HW_GUIDED mpi_shared_memory gave COMM_NULL");
    CHECK_MPI(MPI_Comm_free(&b));
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, MPI_INFO_NULL, &b));
    CHECK(b == MPI_COMM_NULL, "HW_GUIDED without a resource type gave a comm");
    CHECK_MPI(MPI_Info_free(&info));
    /* HW_UNGUIDED: a strict subset, or COMM_NULL (all ranks on one node here) */
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, rank, MPI_INFO_NULL, &c));
    if (c != MPI_COMM_NULL) {
        CHECK_MPI(MPI_Comm_size(c, &n));
        CHECK(n < size, "HW_UNGUIDED not a strict subset");
        CHECK_MPI(MPI_Comm_free(&c));
    }
}

static void test_create_group(void)
{
    MPI_Group wg, half, rev;
    MPI_Comm c, d;
    int r, n;
    CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    /* evens and odds build their communicators concurrently with the same tag */
    int range[1][3] = {{rank % 2, size - 1, 2}};
    if (rank % 2 == 1 && (size - 1) % 2 == 0) range[0][1] = size - 2;
    if (rank % 2 == 0 && (size - 1) % 2 == 1) range[0][1] = size - 2;
    CHECK_MPI(MPI_Group_range_incl(wg, 1, range, &half));
    CHECK_MPI(MPI_Comm_create_group(MPI_COMM_WORLD, half, 5, &c));
    CHECK(c != MPI_COMM_NULL, "create_group gave COMM_NULL to a member");
    CHECK_MPI(MPI_Comm_rank(c, &r));
    CHECK_MPI(MPI_Comm_size(c, &n));
    CHECK(r == rank / 2 && n == (rank % 2 ? size / 2 : (size + 1) / 2), "create_group rank %d size %d",
          r, n);
    int es = 0;
    for (int p = rank % 2; p < size; p += 2) es += p;
    CHECK(psum(c, rank) == es, "traffic on create_group comm");
    /* all ranks, reversed, same tag again; then a different tag */
    int rr[1][3] = {{size - 1, 0, -1}};
    CHECK_MPI(MPI_Group_range_incl(wg, 1, rr, &rev));
    CHECK_MPI(MPI_Comm_create_group(MPI_COMM_WORLD, rev, 5, &d));
    CHECK_MPI(MPI_Comm_rank(d, &r));
    CHECK(r == size - 1 - rank, "reversed create_group rank %d", r);
    CHECK(psum(d, 1) == size, "traffic on reversed comm");
    MPI_Comm e;
    CHECK_MPI(MPI_Comm_create_group(c, MPI_GROUP_EMPTY, 9, &e));
    CHECK(e == MPI_COMM_NULL, "create_group(empty) gave a comm");
    /* only rank 0 of world: a one-process communicator, others do nothing */
    if (rank == 0) {
        MPI_Group g0;
        int z = 0;
        CHECK_MPI(MPI_Group_incl(wg, 1, &z, &g0));
        CHECK_MPI(MPI_Comm_create_group(MPI_COMM_WORLD, g0, 0, &e));
        CHECK_MPI(MPI_Comm_size(e, &n));
        CHECK(n == 1, "solo create_group size %d", n);
        CHECK_MPI(MPI_Comm_free(&e));
        CHECK_MPI(MPI_Group_free(&g0));
    }
    CHECK_MPI(MPI_Comm_free(&c));
    CHECK_MPI(MPI_Comm_free(&d));
    CHECK_MPI(MPI_Group_free(&half));
    CHECK_MPI(MPI_Group_free(&rev));
    CHECK_MPI(MPI_Group_free(&wg));
}

static void test_group_errors_ranges(void)
{
    MPI_Group wg, g, h;
    int n, r, res;
    CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    EXPECT_ERR(MPI_Group_size(MPI_GROUP_NULL, &n), MPI_ERR_GROUP);
    EXPECT_ERR(MPI_Group_rank(0x4242, &n), MPI_ERR_GROUP);
    int bad = size;
    EXPECT_ERR(MPI_Group_incl(wg, 1, &bad, &g), MPI_ERR_RANK);
    int twice[2] = {0, 0};
    EXPECT_ERR(MPI_Group_incl(wg, 2, twice, &g), MPI_ERR_RANK);
    EXPECT_ERR(MPI_Group_excl(wg, -1, twice, &g), MPI_ERR_ARG);
    EXPECT_ERR(MPI_Group_union(wg, MPI_GROUP_NULL, &g), MPI_ERR_GROUP);
    int tr;
    EXPECT_ERR(MPI_Group_translate_ranks(wg, 1, &bad, wg, &tr), MPI_ERR_RANK);
    int z0[1][3] = {{0, 0, 0}};
    EXPECT_ERR(MPI_Group_range_incl(wg, 1, z0, &g), MPI_ERR_ARG);
    int oob[1][3] = {{0, size, 1}};
    EXPECT_ERR(MPI_Group_range_excl(wg, 1, oob, &g), MPI_ERR_RANK);
    if (size >= 2) {
        int wrong[1][3] = {{1, 0, 1}};
        EXPECT_ERR(MPI_Group_range_incl(wg, 1, wrong, &g), MPI_ERR_ARG);
        int overlap[2][3] = {{0, 1, 1}, {1, 1, 1}};
        EXPECT_ERR(MPI_Group_range_incl(wg, 2, overlap, &g), MPI_ERR_RANK);
    }
    h = 0x4242;
    EXPECT_ERR(MPI_Group_free(&h), MPI_ERR_GROUP);
    h = MPI_GROUP_EMPTY;
    CHECK_MPI(MPI_Group_free(&h));
    CHECK(h == MPI_GROUP_NULL, "Group_free(GROUP_EMPTY) did not set GROUP_NULL");

    /* range_incl of everything with stride 1 is IDENT to world; stride 2 + excl */
    int all[1][3] = {{0, size - 1, 1}};
    CHECK_MPI(MPI_Group_range_incl(wg, 1, all, &g));
    CHECK_MPI(MPI_Group_compare(g, wg, &res));
    CHECK(res == MPI_IDENT, "range_incl(all) = %d", res);
    CHECK_MPI(MPI_Group_free(&g));
    int ev[1][3] = {{0, size - 1 - (size - 1) % 2, 2}};
    CHECK_MPI(MPI_Group_range_excl(wg, 1, ev, &g));
    CHECK_MPI(MPI_Group_size(g, &n));
    CHECK(n == size / 2, "range_excl(evens) size %d", n);
    CHECK_MPI(MPI_Group_rank(g, &r));
    CHECK(r == (rank % 2 ? rank / 2 : MPI_UNDEFINED), "range_excl rank %d", r);
    if (g != MPI_GROUP_EMPTY) CHECK_MPI(MPI_Group_free(&g));
    CHECK_MPI(MPI_Group_range_excl(wg, 1, all, &g));
    CHECK(g == MPI_GROUP_EMPTY, "range_excl(all) is not MPI_GROUP_EMPTY");
    CHECK_MPI(MPI_Group_range_incl(wg, 0, all, &g));
    CHECK(g == MPI_GROUP_EMPTY, "range_incl(n=0) is not MPI_GROUP_EMPTY");
    CHECK_MPI(MPI_Group_intersection(wg, MPI_GROUP_EMPTY, &g));
    CHECK(g == MPI_GROUP_EMPTY, "intersection with empty is not MPI_GROUP_EMPTY");
    CHECK_MPI(MPI_Group_union(MPI_GROUP_EMPTY, wg, &g));
    CHECK_MPI(MPI_Group_compare(g, wg, &res));
    CHECK(res == MPI_IDENT, "empty ∪ world = %d", res);
    CHECK_MPI(MPI_Group_free(&g));
    /* translate into the empty group */
    int zr = 0, out = 7;
    CHECK_MPI(MPI_Group_translate_ranks(wg, 1, &zr, MPI_GROUP_EMPTY, &out));
    CHECK(out == MPI_UNDEFINED, "translate into empty = %d", out);
    CHECK_MPI(MPI_Group_translate_ranks(wg, 0, NULL, wg, NULL));
    /* self group */
    MPI_Group sg;
    CHECK_MPI(MPI_Comm_group(MPI_COMM_SELF, &sg));
    CHECK_MPI(MPI_Group_translate_ranks(sg, 1, &zr, wg, &out));
    CHECK(out == rank, "self rank 0 in world = %d", out);
    CHECK_MPI(MPI_Group_free(&sg));
    CHECK_MPI(MPI_Group_free(&wg));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    test_comm_errors();
    test_dups();
    test_split_type();
    test_create_group();
    test_group_errors_ranges();

    REPORT_OK();
    MPI_Finalize();
    return 0;
}
