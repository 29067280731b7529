/* Unsupported calls fail with MPI_ERR_UNSUPPORTED_OPERATION through the
 * right error handler; MPI_File_* return it by default; the file handle
 * conversions and the Fortran status sentinels exist. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int fails = 0;
#define CHECK(c)                                                             \
    do {                                                                     \
        if (!(c)) {                                                          \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);              \
            fails++;                                                         \
        }                                                                    \
    } while (0)

static int cls(int rc) {
    int c;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv) {
    int rank, rc, len, all;
    char msg[MPI_MAX_ERROR_STRING];
    MPI_Win win;
    (void)msg;
    MPI_File fh;
    MPI_Errhandler eh;
    MPI_Comm inter;
    MPI_Session s;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    /* MPI_File_*: MPI_ERRORS_RETURN by default, world still fatal. */
    rc = MPI_File_open(MPI_COMM_WORLD, "/tmp/x", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    CHECK(rc == MPI_ERR_UNSUPPORTED_OPERATION);
    MPI_Error_string(rc, msg, &len);
    CHECK(strstr(msg, "MPI_File_open") != NULL);
    CHECK(MPI_File_get_errhandler(MPI_FILE_NULL, &eh) == MPI_SUCCESS);
    CHECK(eh == MPI_ERRORS_RETURN);
    CHECK(MPI_File_call_errhandler(MPI_FILE_NULL, MPI_ERR_OTHER) == MPI_SUCCESS);
    CHECK(MPI_File_c2f(MPI_FILE_NULL) == 0);
    CHECK(MPI_File_f2c(0) == MPI_FILE_NULL);

    /* The rest: through the communicator's handler. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* Window argument errors (one-sided communication is supported). */
    rc = MPI_Put(NULL, 0, MPI_INT, 0, 0, 0, MPI_INT, MPI_WIN_NULL);
    CHECK(cls(rc) == MPI_ERR_WIN);
    rc = MPI_Win_fence(0, MPI_WIN_NULL);
    CHECK(cls(rc) == MPI_ERR_WIN);
    win = MPI_WIN_NULL;
    rc = MPI_Win_free(&win);
    CHECK(cls(rc) == MPI_ERR_WIN);
    rc = MPI_Win_create(NULL, 0, 1, MPI_INFO_NULL, MPI_COMM_NULL, &win);
    CHECK(cls(rc) == MPI_ERR_COMM);
    inter = MPI_COMM_NULL;
    rc = MPI_Comm_disconnect(&inter);
    CHECK(cls(rc) == MPI_ERR_COMM);
    rc = MPI_Comm_accept("x", MPI_INFO_NULL, 0, MPI_COMM_NULL, &inter);
    CHECK(cls(rc) == MPI_ERR_COMM);
    rc = MPI_Comm_spawn("x", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_NULL, &inter,
                        MPI_ERRCODES_IGNORE);
    CHECK(cls(rc) == MPI_ERR_COMM);
    /* a valid communicator: unsupported */
    inter = MPI_COMM_WORLD;
    rc = MPI_Comm_disconnect(&inter);
    CHECK(cls(rc) == MPI_ERR_UNSUPPORTED_OPERATION);
    /* (Intercommunicators are supported: merging an intracommunicator is
     * an argument error.) */
    rc = MPI_Intercomm_merge(MPI_COMM_WORLD, 0, &inter);
    CHECK(cls(rc) == MPI_ERR_COMM);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    rc = MPI_Comm_spawn("x", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter,
                        MPI_ERRCODES_IGNORE);
    CHECK(cls(rc) == MPI_ERR_UNSUPPORTED_OPERATION);
    /* (Sessions are supported: a session handle that is none is an
     * MPI_ERR_SESSION error.) */
    s = MPI_SESSION_NULL;
    rc = MPI_Session_finalize(&s);
    CHECK(cls(rc) == MPI_ERR_SESSION);
    rc = MPI_Grequest_complete(MPI_REQUEST_NULL);
    CHECK(cls(rc) == MPI_ERR_REQUEST);

    CHECK(MPI_F_STATUS_IGNORE != NULL && MPI_F_STATUSES_IGNORE != NULL);
    CHECK(MPI_F_STATUS_IGNORE != MPI_F_STATUSES_IGNORE);

    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) printf("OK\n");
    MPI_Finalize();
    return fails != 0;
}
