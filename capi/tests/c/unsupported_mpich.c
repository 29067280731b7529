/* Calls MPICH 4 exports that gmpi does not implement yet: each fails with
 * MPI_ERR_UNSUPPORTED_OPERATION through the error handler of the
 * communicator it names (MPI_COMM_WORLD's when it names none; the file
 * calls through MPI_FILE_NULL's, MPI_ERRORS_RETURN by default), with a
 * message naming it; MPI_T_* return MPI_T_ERR_NOT_SUPPORTED, before
 * MPI_Init too, and invoke no handler. Each is called twice: the test
 * (tests/tests/capi.rs) checks that stderr names each exactly once.
 * Built by MPICH's mpicc: the binary must load on gmpi's libmpi.so.12. */
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

static void unsupported(int rc, const char *name) {
    int c = -1, len = 0;
    char msg[MPI_MAX_ERROR_STRING];
    MPI_Error_class(rc, &c);
    if (c != MPI_ERR_UNSUPPORTED_OPERATION) {
        printf("FAIL %s: class %d, not MPI_ERR_UNSUPPORTED_OPERATION\n", name, c);
        fails++;
        return;
    }
    MPI_Error_string(rc, msg, &len);
    if (strstr(msg, name) == NULL) {
        printf("FAIL %s: message \"%s\" does not name it\n", name, msg);
        fails++;
    }
}

int main(int argc, char **argv) {
    int i, provided, x = 1, rank, all;
    MPI_Comm newcomm;
    MPI_Status st;

    for (i = 0; i < 2; i++) {
        CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_T_ERR_NOT_SUPPORTED);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    /* MPI_COMM_SELF's handler, not MPI_COMM_WORLD's (still fatal). */
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    for (i = 0; i < 2; i++) {
        unsupported(MPI_Comm_accept("port", MPI_INFO_NULL, 0, MPI_COMM_SELF, &newcomm),
                    "MPI_Comm_accept");
        unsupported(MPI_Comm_connect("port", MPI_INFO_NULL, 0, MPI_COMM_SELF, &newcomm),
                    "MPI_Comm_connect");
        /* The file calls: MPI_FILE_NULL's handler, MPI_ERRORS_RETURN. */
        unsupported(MPI_File_read_c(MPI_FILE_NULL, &x, (MPI_Count)1, MPI_INT, &st),
                    "MPI_File_read_c");
    }

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (i = 0; i < 2; i++) {
        unsupported(MPI_File_write_c(MPI_FILE_NULL, &x, (MPI_Count)1, MPI_INT, &st),
                    "MPI_File_write_c");
        /* Arguments that would be invalid do not crash it. */
        unsupported(MPI_Comm_spawn(NULL, NULL, -1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, NULL, NULL),
                    "MPI_Comm_spawn");
    }
    CHECK(MPI_T_finalize() == MPI_T_ERR_NOT_SUPPORTED);
    CHECK(MPI_F08_STATUS_IGNORE != NULL && MPI_F08_STATUSES_IGNORE != NULL);
    CHECK(MPI_T_PVAR_ALL_HANDLES != NULL);

    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) printf("OK unsupported_mpich\n");
    MPI_Finalize();
    return fails != 0;
}
