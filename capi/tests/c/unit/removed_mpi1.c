/* The MPI-1 names MPI-3.0 removed, which MPICH's libmpi.so.12 still exports
 * and old codes still call: MPI_Address, MPI_Errhandler_create/get/set,
 * MPI_Type_extent/lb/ub, MPI_Type_hvector/hindexed/struct (MPICH's mpi.h
 * still declares them, and so does gmpi's), each checked against its MPI-2
 * replacement. */
#define TEST_NAME "removed_mpi1"
#include "check.h"

static int calls;
static void count_errors(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    (void)code;
    calls++;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    double d[4];
    MPI_Aint a1, a2;
    CHECK_MPI(MPI_Address(&d[2], &a1));
    CHECK_MPI(MPI_Get_address(&d[2], &a2));
    CHECK(a1 == a2, "MPI_Address %ld, MPI_Get_address %ld", (long)a1, (long)a2);

    /* Error handlers: create, set, get, then an error reaches it. */
    MPI_Errhandler eh, got;
    CHECK_MPI(MPI_Errhandler_create(count_errors, &eh));
    CHECK_MPI(MPI_Errhandler_set(MPI_COMM_WORLD, eh));
    CHECK_MPI(MPI_Errhandler_get(MPI_COMM_WORLD, &got));
    CHECK(got == eh, "MPI_Errhandler_get gives the handler set");
    CHECK_MPI(MPI_Errhandler_free(&got));
    int rc = MPI_Send(d, -1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD);
    CHECK(rc != MPI_SUCCESS && calls == 1, "the handler was called once (rc %d, calls %d)", rc, calls);
    CHECK(MPI_Errhandler_set(MPI_COMM_WORLD, MPI_ERRHANDLER_NULL) != MPI_SUCCESS,
          "MPI_Errhandler_set(MPI_ERRHANDLER_NULL) fails");
    CHECK(calls == 2, "and its error reaches the handler too (calls %d)", calls);
    CHECK_MPI(MPI_Errhandler_set(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Errhandler_free(&eh));

    /* Types: built by the old names, compared with the new ones. */
    MPI_Datatype hv, hv2, hi, hi2, st, st2, rs;
    CHECK_MPI(MPI_Type_hvector(3, 2, 40, MPI_INT, &hv));
    CHECK_MPI(MPI_Type_create_hvector(3, 2, 40, MPI_INT, &hv2));
    int bl[3] = {1, 2, 3};
    MPI_Aint dp[3] = {0, 16, 64};
    CHECK_MPI(MPI_Type_hindexed(3, bl, dp, MPI_DOUBLE, &hi));
    CHECK_MPI(MPI_Type_create_hindexed(3, bl, dp, MPI_DOUBLE, &hi2));
    MPI_Datatype ts[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    CHECK_MPI(MPI_Type_struct(3, bl, dp, ts, &st));
    CHECK_MPI(MPI_Type_create_struct(3, bl, dp, ts, &st2));
    MPI_Datatype pairs[3][2] = {{hv, hv2}, {hi, hi2}, {st, st2}};
    for (int k = 0; k < 3; k++) {
        MPI_Aint lb, ext, lb2, ext2, x, l, u;
        int s1, s2;
        CHECK_MPI(MPI_Type_get_extent(pairs[k][0], &lb, &ext));
        CHECK_MPI(MPI_Type_get_extent(pairs[k][1], &lb2, &ext2));
        CHECK_MPI(MPI_Type_size(pairs[k][0], &s1));
        CHECK_MPI(MPI_Type_size(pairs[k][1], &s2));
        CHECK(lb == lb2 && ext == ext2 && s1 == s2, "type %d: lb %ld/%ld extent %ld/%ld size %d/%d", k,
              (long)lb, (long)lb2, (long)ext, (long)ext2, s1, s2);
        CHECK_MPI(MPI_Type_extent(pairs[k][0], &x));
        CHECK_MPI(MPI_Type_lb(pairs[k][0], &l));
        CHECK_MPI(MPI_Type_ub(pairs[k][0], &u));
        CHECK(x == ext && l == lb && u == lb + ext, "type %d: MPI_Type_extent/lb/ub %ld %ld %ld", k,
              (long)x, (long)l, (long)u);
        CHECK_MPI(MPI_Type_free(&pairs[k][0]));
        CHECK_MPI(MPI_Type_free(&pairs[k][1]));
    }
    /* lb/ub follow a resized type's bounds. */
    CHECK_MPI(MPI_Type_create_resized(MPI_INT, -8, 32, &rs));
    MPI_Aint l, u;
    CHECK_MPI(MPI_Type_lb(rs, &l));
    CHECK_MPI(MPI_Type_ub(rs, &u));
    CHECK(l == -8 && u == 24, "resized: lb %ld ub %ld", (long)l, (long)u);
    CHECK_MPI(MPI_Type_free(&rs));

    /* Their errors name the old call and go through the handler. */
    int cls = 0;
    rc = MPI_Type_hvector(-1, 1, 8, MPI_INT, &hv);
    CHECK(rc != MPI_SUCCESS, "MPI_Type_hvector(count -1) fails");
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_COUNT, "MPI_Type_hvector(count -1): class %d", cls);
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    CHECK_MPI(MPI_Error_string(rc, msg, &len));
    CHECK(strstr(msg, "MPI_Type_hvector") != NULL, "the message names the call: %s", msg);
    rc = MPI_Type_extent(MPI_DATATYPE_NULL, &l);
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_TYPE, "MPI_Type_extent(MPI_DATATYPE_NULL): class %d", cls);

    if (rank == 0)
        printf("OK %s\n", TEST_NAME);
    MPI_Finalize();
    return 0;
}
