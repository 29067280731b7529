/* Error handlers, error codes and environment queries: plain MPI only. */
#define TEST_NAME "errors"
#include "check.h"
#include <string.h>

static int rank, size;

static void expect_class(int rc, int eclass, const char *what)
{
    int cls = -1;
    CHECK(rc != MPI_SUCCESS, "%s: returned MPI_SUCCESS, expected class %d", what, eclass);
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK(cls == eclass, "%s: error class %d, expected %d", what, cls, eclass);
    char msg[MPI_MAX_ERROR_STRING];
    int len = -1;
    msg[0] = '\0';
    CHECK_MPI(MPI_Error_string(rc, msg, &len));
    CHECK(len > 0 && len < MPI_MAX_ERROR_STRING && (int)strlen(msg) == len,
          "%s: Error_string length %d ('%s')", what, len, msg);
}

static void test_error_returns(void)
{
    int buf[4] = {0, 1, 2, 3}, rc;
    /* errors on MPI_COMM_NULL, or not tied to a communicator, may be raised on
     * MPI_COMM_WORLD or MPI_COMM_SELF depending on the MPI version: set both */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));

    rc = MPI_Send(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_RANK, "Send to rank == size");
    rc = MPI_Send(buf, 1, MPI_INT, -7, 0, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_RANK, "Send to rank -7");
    rc = MPI_Recv(buf, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    expect_class(rc, MPI_ERR_RANK, "Recv from invalid rank");
    rc = MPI_Send(buf, 1, MPI_INT, rank, -5, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_TAG, "Send with tag -5");
    rc = MPI_Send(buf, 1, MPI_INT, rank, MPI_ANY_TAG, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_TAG, "Send with MPI_ANY_TAG");
    {
        int *ub, flag;
        CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
        CHECK(flag, "MPI_TAG_UB missing");
        if (*ub < 2147483647) {
            rc = MPI_Send(buf, 1, MPI_INT, rank, *ub + 1, MPI_COMM_WORLD);
            expect_class(rc, MPI_ERR_TAG, "Send with tag MPI_TAG_UB+1");
        }
    }
    rc = MPI_Send(buf, -1, MPI_INT, rank, 0, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_COUNT, "Send with count -1");
    rc = MPI_Send(buf, 1, MPI_DATATYPE_NULL, rank, 0, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_TYPE, "Send with MPI_DATATYPE_NULL");
    rc = MPI_Send(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL);
    expect_class(rc, MPI_ERR_COMM, "Send on MPI_COMM_NULL");
    int r;
    rc = MPI_Comm_rank(MPI_COMM_NULL, &r);
    expect_class(rc, MPI_ERR_COMM, "Comm_rank(MPI_COMM_NULL)");
    rc = MPI_Bcast(buf, 1, MPI_INT, size, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_ROOT, "Bcast with root == size");
    rc = MPI_Bcast(buf, 1, MPI_INT, -9, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_ROOT, "Bcast with root -9");
    rc = MPI_Send(NULL, 2, MPI_INT, rank, 0, MPI_COMM_WORLD);
    expect_class(rc, MPI_ERR_BUFFER, "Send NULL buffer with count 2");
    MPI_Request rq;
    rc = MPI_Irecv(buf, 1, MPI_INT, rank, -3, MPI_COMM_WORLD, &rq);
    expect_class(rc, MPI_ERR_TAG, "Irecv with tag -3");

    /* the communicator is still usable after returned errors */
    int x = rank, y = -1;
    CHECK_MPI(MPI_Sendrecv(&x, 1, MPI_INT, rank, 1, &y, 1, MPI_INT, rank, 1, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    CHECK(y == rank, "self Sendrecv after errors");
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    /* class mapping of the predefined classes and MPI_SUCCESS */
    int classes[] = {MPI_SUCCESS, MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_TAG,
                     MPI_ERR_COMM, MPI_ERR_RANK, MPI_ERR_ROOT, MPI_ERR_TRUNCATE, MPI_ERR_OTHER,
                     MPI_ERR_INTERN, MPI_ERR_ARG, MPI_ERR_REQUEST, MPI_ERR_OP, MPI_ERR_GROUP,
                     MPI_ERR_UNKNOWN, MPI_ERR_IN_STATUS, MPI_ERR_PENDING};
    for (size_t k = 0; k < sizeof classes / sizeof classes[0]; k++) {
        int cls = -1;
        CHECK_MPI(MPI_Error_class(classes[k], &cls));
        CHECK(cls == classes[k], "Error_class(%d) = %d", classes[k], cls);
        char msg[MPI_MAX_ERROR_STRING];
        int len = -1;
        CHECK_MPI(MPI_Error_string(classes[k], msg, &len));
        CHECK(len > 0 && (int)strlen(msg) == len, "Error_string(class %d) empty", classes[k]);
    }
    CHECK(MPI_SUCCESS == 0, "MPI_SUCCESS is not 0");
    CHECK(MPI_ERR_LASTCODE >= MPI_ERR_PENDING, "MPI_ERR_LASTCODE %d", MPI_ERR_LASTCODE);

    /* Comm_get_errhandler returns what was set */
    MPI_Errhandler eh;
    CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "Comm_get_errhandler != MPI_ERRORS_RETURN");
    CHECK_MPI(MPI_Errhandler_free(&eh));
    CHECK(eh == MPI_ERRHANDLER_NULL, "Errhandler_free did not set MPI_ERRHANDLER_NULL");
    CHECK_MPI(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh)); /* still set after the free */
    CHECK(eh == MPI_ERRORS_RETURN, "errhandler lost after Errhandler_free of a reference");
    CHECK_MPI(MPI_Errhandler_free(&eh));
    MPI_Comm d;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &d)); /* dup inherits the handler */
    CHECK_MPI(MPI_Comm_get_errhandler(d, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "Comm_dup did not inherit the error handler");
    CHECK_MPI(MPI_Errhandler_free(&eh));
    CHECK_MPI(MPI_Comm_free(&d));
}

static int eh_calls, eh_last_code;
static MPI_Comm eh_last_comm;

static void my_handler(MPI_Comm *comm, int *code, ...)
{
    eh_calls++;
    eh_last_code = *code;
    eh_last_comm = *comm;
}

static void test_user_errhandler(void)
{
    MPI_Errhandler eh, got;
    MPI_Comm d;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    CHECK_MPI(MPI_Comm_create_errhandler(my_handler, &eh));
    CHECK_MPI(MPI_Comm_set_errhandler(d, eh));
    CHECK_MPI(MPI_Comm_get_errhandler(d, &got));
    CHECK(got == eh, "Comm_get_errhandler did not return the user handler");
    CHECK_MPI(MPI_Errhandler_free(&got));
    /* the handler stays attached after the user frees its handle */
    CHECK_MPI(MPI_Errhandler_free(&eh));
    CHECK(eh == MPI_ERRHANDLER_NULL, "Errhandler_free of user handler");

    CHECK_MPI(MPI_Comm_call_errhandler(d, MPI_ERR_OTHER));
    CHECK(eh_calls == 1 && eh_last_code == MPI_ERR_OTHER, "Comm_call_errhandler: calls %d code %d",
          eh_calls, eh_last_code);
    int res;
    CHECK_MPI(MPI_Comm_compare(eh_last_comm, d, &res));
    CHECK(res == MPI_IDENT, "handler got a different communicator");

    /* a real error invokes it, and the call then returns the error code */
    int buf = 0;
    int rc = MPI_Send(&buf, 1, MPI_INT, size, 0, d);
    CHECK(eh_calls == 2, "user handler not invoked on a real error (calls %d)", eh_calls);
    int cls;
    CHECK_MPI(MPI_Error_class(eh_last_code, &cls));
    CHECK(cls == MPI_ERR_RANK, "user handler got class %d", cls);
    CHECK(rc == eh_last_code, "call returned %d, handler saw %d", rc, eh_last_code);
    CHECK_MPI(MPI_Comm_free(&d));
}

static void test_environment(void)
{
    int v, sv;
    CHECK_MPI(MPI_Get_version(&v, &sv));
    CHECK(v >= 3 && sv >= 0, "Get_version %d.%d", v, sv);
    CHECK(v > MPI_VERSION || (v == MPI_VERSION && sv >= MPI_SUBVERSION) || v >= 3,
          "Get_version %d.%d vs header %d.%d", v, sv, MPI_VERSION, MPI_SUBVERSION);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = -1;
    CHECK_MPI(MPI_Get_library_version(lib, &len));
    CHECK(len > 0 && len < MPI_MAX_LIBRARY_VERSION_STRING && strlen(lib) > 0,
          "Get_library_version length %d", len);
    char host[MPI_MAX_PROCESSOR_NAME];
    CHECK_MPI(MPI_Get_processor_name(host, &len));
    CHECK(len > 0 && len < MPI_MAX_PROCESSOR_NAME && (int)strlen(host) == len,
          "Get_processor_name length %d", len);
    int flag = 0;
    CHECK_MPI(MPI_Initialized(&flag));
    CHECK(flag, "Initialized = 0");
    CHECK_MPI(MPI_Finalized(&flag));
    CHECK(!flag, "Finalized = 1 before MPI_Finalize");
    int prov = -1;
    CHECK_MPI(MPI_Query_thread(&prov));
    CHECK(prov == MPI_THREAD_SINGLE || prov == MPI_THREAD_FUNNELED ||
              prov == MPI_THREAD_SERIALIZED || prov == MPI_THREAD_MULTIPLE,
          "Query_thread %d", prov);
    CHECK(MPI_THREAD_SINGLE < MPI_THREAD_FUNNELED && MPI_THREAD_FUNNELED < MPI_THREAD_SERIALIZED &&
              MPI_THREAD_SERIALIZED < MPI_THREAD_MULTIPLE,
          "thread level constants are not ordered");
    CHECK_MPI(MPI_Is_thread_main(&flag));
    CHECK(flag, "Is_thread_main = 0 on the main thread");

    double t0 = MPI_Wtime(), prev = t0, tick = MPI_Wtick();
    CHECK(tick > 0 && tick < 1, "Wtick %g", tick);
    for (int i = 0; i < 100000; i++) {
        double t = MPI_Wtime();
        CHECK(t >= prev, "Wtime went backwards: %.9f after %.9f", t, prev);
        prev = t;
    }
    while (MPI_Wtime() - t0 < 0.01) {}
    CHECK(MPI_Wtime() > t0, "Wtime does not advance");

    void *mem = NULL;
    CHECK_MPI(MPI_Alloc_mem(1 << 20, MPI_INFO_NULL, &mem));
    CHECK(mem != NULL, "Alloc_mem returned NULL");
    int *im = mem;
    for (int i = 0; i < (1 << 18); i++) im[i] = i ^ rank;
    int nx = (rank + 1) % size, pv = (rank + size - 1) % size;
    int *rm = NULL;
    CHECK_MPI(MPI_Alloc_mem(1 << 20, MPI_INFO_NULL, &rm));
    CHECK_MPI(MPI_Sendrecv(im, 1 << 18, MPI_INT, nx, 0, rm, 1 << 18, MPI_INT, pv, 0, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    for (int i = 0; i < (1 << 18); i++) CHECK(rm[i] == (i ^ pv), "Alloc_mem buffer data [%d]", i);
    CHECK_MPI(MPI_Free_mem(mem));
    CHECK_MPI(MPI_Free_mem(rm));

    double arr[10];
    MPI_Aint a0, a3, sum, diff;
    CHECK_MPI(MPI_Get_address(&arr[0], &a0));
    CHECK_MPI(MPI_Get_address(&arr[3], &a3));
    CHECK(a3 - a0 == 3 * (MPI_Aint)sizeof(double), "Get_address difference %ld", (long)(a3 - a0));
    sum = MPI_Aint_add(a0, 3 * sizeof(double));
    CHECK(sum == a3, "Aint_add");
    diff = MPI_Aint_diff(a3, a0);
    CHECK(diff == 3 * (MPI_Aint)sizeof(double), "Aint_diff %ld", (long)diff);

    CHECK_MPI(MPI_Pcontrol(0));
    CHECK_MPI(MPI_Pcontrol(1));
    CHECK_MPI(MPI_Pcontrol(2));
}

int main(int argc, char **argv)
{
    int flag = 1;
    CHECK(MPI_Initialized(&flag) == MPI_SUCCESS && !flag, "Initialized before MPI_Init = %d", flag);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    test_environment();
    test_user_errhandler();
    test_error_returns();

    REPORT_OK();
    MPI_Finalize();
    flag = 0;
    MPI_Finalized(&flag);
    if (!flag) {
        fprintf(stderr, "FAIL errors rank %d: Finalized = 0 after MPI_Finalize\n", rank);
        return 1;
    }
    flag = 0;
    MPI_Initialized(&flag);
    if (!flag) {
        fprintf(stderr, "FAIL errors rank %d: Initialized = 0 after MPI_Finalize\n", rank);
        return 1;
    }
    return 0;
}
