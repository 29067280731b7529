/* With the default MPI_ERRORS_ARE_FATAL handler, an invalid send must kill the
 * whole job with a non-zero exit status and an error message.  Expected to FAIL;
 * it never prints an OK line.  Works for any np >= 1 (meant for np = 2): rank 0
 * sends to rank np (invalid), every other rank blocks in MPI_Recv from rank 0. */
#define TEST_NAME "fatal"
#include "check.h"

int main(int argc, char **argv)
{
    int rank, size, buf = 42;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        int rc = MPI_Send(&buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD);
        /* only reached if the error was not fatal: report, release the others and
         * exit with status 0 so that the runner flags the survival */
        fprintf(stderr, "FAIL fatal rank 0: invalid MPI_Send returned %d instead of aborting\n", rc);
        printf("survived\n");
        fflush(stdout);
        for (int p = 1; p < size; p++) MPI_Send(&buf, 1, MPI_INT, p, 0, MPI_COMM_WORLD);
    } else {
        MPI_Recv(&buf, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
    return 0;
}
