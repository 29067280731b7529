/* Generalized requests: MPI_Grequest_start/complete with Wait, Test,
 * Waitall mixed with a point-to-point request, Request_get_status; the
 * query function's status (source, tag, count, cancelled) reaches the
 * caller, the free function runs once after completion, the cancel
 * function gets whether the request completed, and a query error is the
 * completion's error. Any np. */
#define TEST_NAME "grequest"
#include "../check.h"

static int freed = 0, cancels = 0, last_complete = -1;

static int query(void *extra, MPI_Status *st)
{
    int v = *(int *)extra;
    st->MPI_SOURCE = v;
    st->MPI_TAG = v + 1;
    MPI_Status_set_elements(st, MPI_INT, v);
    MPI_Status_set_cancelled(st, 0);
    return MPI_SUCCESS;
}

static int query_fails(void *extra, MPI_Status *st)
{
    (void)extra;
    (void)st;
    return MPI_ERR_INTERN;
}

static int free_fn(void *extra)
{
    (void)extra;
    freed++;
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete)
{
    (void)extra;
    cancels++;
    last_complete = complete;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int v = 5, flag = -1, count;
    MPI_Request r;
    MPI_Status st;

    CHECK_MPI(MPI_Grequest_start(query, free_fn, cancel_fn, &v, &r));
    CHECK_MPI(MPI_Test(&r, &flag, &st));
    CHECK(flag == 0 && r != MPI_REQUEST_NULL, "not complete before MPI_Grequest_complete");
    CHECK_MPI(MPI_Cancel(&r));
    CHECK(cancels == 1 && last_complete == 0, "cancel function: %d %d", cancels, last_complete);
    CHECK_MPI(MPI_Request_get_status(r, &flag, &st));
    CHECK(flag == 0, "get_status before completion");
    CHECK_MPI(MPI_Grequest_complete(r));
    CHECK_MPI(MPI_Request_get_status(r, &flag, &st));
    CHECK(flag == 1 && freed == 0, "get_status after completion frees nothing");
    CHECK_MPI(MPI_Wait(&r, &st));
    CHECK(r == MPI_REQUEST_NULL && freed == 1, "wait frees it once (%d)", freed);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_SOURCE == 5 && st.MPI_TAG == 6 && count == 5, "query's status: %d %d %d",
          st.MPI_SOURCE, st.MPI_TAG, count);

    /* Waitall over a generalized request and a receive. */
    int x = rank, y = -1;
    MPI_Request rs[3];
    CHECK_MPI(MPI_Grequest_start(query, free_fn, cancel_fn, &v, &rs[0]));
    CHECK_MPI(MPI_Irecv(&y, 1, MPI_INT, rank, 3, MPI_COMM_WORLD, &rs[1]));
    CHECK_MPI(MPI_Isend(&x, 1, MPI_INT, rank, 3, MPI_COMM_WORLD, &rs[2]));
    CHECK_MPI(MPI_Grequest_complete(rs[0]));
    MPI_Status sts[3];
    CHECK_MPI(MPI_Waitall(3, rs, sts));
    CHECK(y == rank && freed == 2 && sts[0].MPI_TAG == 6, "waitall: %d %d %d", y, freed,
          sts[0].MPI_TAG);

    /* A query error is the completion's error. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK_MPI(MPI_Grequest_start(query_fails, free_fn, cancel_fn, NULL, &r));
    CHECK_MPI(MPI_Grequest_complete(r));
    int rc = MPI_Wait(&r, &st), cls;
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_INTERN, "query error: rc %d class %d", rc, cls);
    CHECK(freed == 3, "freed after a failed query (%d)", freed);
    rc = MPI_Grequest_complete(MPI_REQUEST_NULL);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_REQUEST, "complete(MPI_REQUEST_NULL): %d", cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    MPI_Barrier(MPI_COMM_WORLD);
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
