/* 8-byte ping-pong latency between ranks 0 and 1 (other ranks idle).
 * usage: pingpong [iterations]   (default 100000, plus 10000 warm-up, or a
 * tenth of the iterations when that is smaller).  Rank 0 prints
 * "latency_us <one-way microseconds>" (half the mean round trip). Needs np >= 2. */
#define TEST_NAME "pingpong"
#include "check.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2, "pingpong needs at least 2 processes (np=%d)", size);
    long iters = 100000;
    if (argc > 1) iters = strtol(argv[1], NULL, 10);
    CHECK(iters > 0, "bad iteration count '%s'", argc > 1 ? argv[1] : "");
    long warm = iters / 10 < 10000 ? iters / 10 : 10000;

    long long buf = 0;
    double t0 = 0;
    if (rank <= 1) {
        int peer = 1 - rank;
        for (long i = -warm; i < iters; i++) {
            if (i == 0) {
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
            }
            if (rank == 0) {
                buf = i;
                MPI_Send(&buf, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                MPI_Recv(&buf, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                CHECK(buf == i + 1, "pong carried %lld, expected %ld", buf, i + 1);
            } else {
                MPI_Recv(&buf, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                buf++;
                MPI_Send(&buf, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
            }
        }
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0) {
        printf("latency_us %.3f\n", t / (double)iters / 2.0 * 1e6);
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
