/* MPI-4's partitioned communication on a ring: MPI_Psend_init/MPI_Precv_init
 * started several times, partitions marked ready one by one, by range and
 * by list; the two sides partitioning the same buffer differently; nothing
 * has arrived before every partition is ready; a point-to-point message
 * with the same source, tag and communicator never matches a partitioned
 * receive (nor the other way round); and the calls' errors. Any np >= 1. */
#define TEST_NAME "partitioned"
#include "check.h"
#include <string.h>

#define P 4
#define K 5
#define ROUNDS 3

static int rank, size, left, right;

static void expect_class(int rc, int want, const char *what)
{
    int cls = -1;
    CHECK(rc != MPI_SUCCESS, "%s: returned MPI_SUCCESS", what);
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK(cls == want, "%s: error class %d, expected %d", what, cls, want);
}

static void test_ring(int how)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int sbuf[P * K], rbuf[P * K], flag;
    MPI_Request s, r;
    CHECK_MPI(MPI_Psend_init(sbuf, P, K, MPI_INT, right, 7, w, MPI_INFO_NULL, &s));
    /* The receiver partitions the same P*K ints as 2 halves. */
    CHECK_MPI(MPI_Precv_init(rbuf, 2, P * K / 2, MPI_INT, left, 7, w, MPI_INFO_NULL, &r));
    for (int it = 0; it < ROUNDS; it++) {
        for (int i = 0; i < P * K; i++) { sbuf[i] = 1000 * rank + 10 * it + i; rbuf[i] = -1; }
        CHECK_MPI(MPI_Start(&r));
        CHECK_MPI(MPI_Start(&s));
        CHECK_MPI(MPI_Parrived(r, 0, &flag));
        if (size > 1) {
            /* The left neighbour's partitions are not all ready: it waits
             * for this barrier first. */
            CHECK(!flag, "round %d: partition 0 arrived before the sender marked any ready", it);
        }
        MPI_Barrier(w);
        if (how == 0) {
            for (int p = 0; p < P; p++) CHECK_MPI(MPI_Pready(p, s));
        } else if (how == 1) {
            CHECK_MPI(MPI_Pready_range(0, 1, s));
            CHECK_MPI(MPI_Pready_range(2, P - 1, s));
        } else {
            int odd[] = {1, 3}, even[] = {2, 0};
            CHECK_MPI(MPI_Pready_list(2, odd, s));
            CHECK_MPI(MPI_Pready_list(2, even, s));
        }
        for (int p = 0; p < 2; p++) {
            do CHECK_MPI(MPI_Parrived(r, p, &flag)); while (!flag);
        }
        CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
        CHECK(r != MPI_REQUEST_NULL && s != MPI_REQUEST_NULL, "the requests stay allocated");
        for (int i = 0; i < P * K; i++)
            CHECK(rbuf[i] == 1000 * left + 10 * it + i, "how %d round %d: rbuf[%d] = %d", how, it, i,
                  rbuf[i]);
    }
    CHECK_MPI(MPI_Request_free(&s));
    CHECK_MPI(MPI_Request_free(&r));
}

/* A plain send with the partitioned receive's source, tag and communicator
 * goes to the plain receive, and the partitioned data to the partitioned
 * receive, whatever the order they were posted in. */
static void test_separate_from_p2p(void)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int pbuf = 100 + rank, prbuf = -1, x = 200 + rank, y = -1;
    MPI_Request s, r, q;
    CHECK_MPI(MPI_Precv_init(&prbuf, 1, 1, MPI_INT, left, 9, w, MPI_INFO_NULL, &r));
    CHECK_MPI(MPI_Psend_init(&pbuf, 1, 1, MPI_INT, right, 9, w, MPI_INFO_NULL, &s));
    CHECK_MPI(MPI_Start(&r));
    CHECK_MPI(MPI_Send(&x, 1, MPI_INT, right, 9, w));
    CHECK_MPI(MPI_Irecv(&y, 1, MPI_INT, left, 9, w, &q));
    CHECK_MPI(MPI_Start(&s));
    CHECK_MPI(MPI_Pready(0, s));
    CHECK_MPI(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
    CHECK(y == 200 + left, "the plain receive got %d, not the plain send's %d", y, 200 + left);
    CHECK(prbuf == 100 + left, "the partitioned receive got %d, not %d", prbuf, 100 + left);
    CHECK_MPI(MPI_Request_free(&s));
    CHECK_MPI(MPI_Request_free(&r));
}

static void test_errors(void)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int b[4] = {1, 2, 3, 4}, rb[4], flag;
    MPI_Request s, r, plain;
    CHECK_MPI(MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN));
    expect_class(MPI_Psend_init(b, 0, 1, MPI_INT, right, 0, w, MPI_INFO_NULL, &s), MPI_ERR_ARG,
                 "Psend_init with 0 partitions");
    expect_class(MPI_Psend_init(b, 2, -1, MPI_INT, right, 0, w, MPI_INFO_NULL, &s), MPI_ERR_COUNT,
                 "Psend_init with count -1");
    expect_class(MPI_Precv_init(rb, 2, 1, MPI_INT, left, 0, MPI_COMM_NULL, MPI_INFO_NULL, &r),
                 MPI_ERR_COMM, "Precv_init on MPI_COMM_NULL");
    CHECK_MPI(MPI_Psend_init(b, 2, 2, MPI_INT, right, 3, w, MPI_INFO_NULL, &s));
    CHECK_MPI(MPI_Precv_init(rb, 2, 2, MPI_INT, left, 3, w, MPI_INFO_NULL, &r));
    expect_class(MPI_Pready(0, s), MPI_ERR_REQUEST, "Pready before MPI_Start");
    expect_class(MPI_Pready(0, r), MPI_ERR_REQUEST, "Pready on a receive request");
    expect_class(MPI_Parrived(s, 0, &flag), MPI_ERR_REQUEST, "Parrived on a send request");
    expect_class(MPI_Parrived(r, 0, &flag), MPI_ERR_REQUEST, "Parrived before MPI_Start");
    CHECK_MPI(MPI_Start(&r));
    CHECK_MPI(MPI_Start(&s));
    expect_class(MPI_Pready(2, s), MPI_ERR_ARG, "Pready of partition 2 of 2");
    expect_class(MPI_Pready_range(1, 0, s), MPI_ERR_ARG, "Pready_range(1, 0)");
    expect_class(MPI_Parrived(r, -1, &flag), MPI_ERR_ARG, "Parrived of partition -1");
    CHECK_MPI(MPI_Pready(1, s));
    expect_class(MPI_Pready(1, s), MPI_ERR_ARG, "Pready of a partition already ready");
    CHECK_MPI(MPI_Pready(0, s));
    CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&s, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Isend(b, 0, MPI_INT, MPI_PROC_NULL, 0, w, &plain));
    expect_class(MPI_Pready(0, plain), MPI_ERR_REQUEST, "Pready on a plain request");
    CHECK_MPI(MPI_Wait(&plain, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Request_free(&s));
    CHECK_MPI(MPI_Request_free(&r));
    CHECK_MPI(MPI_Comm_set_errhandler(w, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    right = (rank + 1) % size;
    left = (rank + size - 1) % size;
    for (int how = 0; how < 3; how++) test_ring(how);
    test_separate_from_p2p();
    test_errors();
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
