/* Point-to-point figures between ranks 0 and 1, the same source built
 * against each MPI (gmpicc, mpicc.openmpi, mpicc.mpich) so that every
 * implementation runs the same loop.
 *
 * usage: pp [LAT_ITERS] [TRIALS]   (default 20000, 5)
 * Prints, from rank 0:
 *   lat8_us   <median of TRIALS>  one-way 8 B latency (half the mean round trip)
 *   bw4M_GBs  <median of TRIALS>  4 MiB stream: a window of 8 sends, then a 1-byte ack
 *   bw64M_GBs <median of TRIALS>  64 MiB stream: a window of 2 sends, then an ack
 * Bandwidth is payload bytes / elapsed time, in 10^9 B/s. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

static double latency(int rank, long iters)
{
    char buf[8] = {0};
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        if (rank == 0) {
            MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) / (2.0 * iters) * 1e6;
}

static double bandwidth(int rank, char *buf, long size, int window, int reps)
{
    MPI_Request req[8];
    char ack = 0;
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int r = 0; r < reps; r++) {
        for (int w = 0; w < window; w++) {
            if (rank == 0)
                MPI_Isend(buf + (long)w * size, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[w]);
            else
                MPI_Irecv(buf + (long)w * size, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[w]);
        }
        MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
        if (rank == 0)
            MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
    }
    double t = MPI_Wtime() - t0;
    return (double)size * window * reps / t / 1e9;
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        fprintf(stderr, "pp needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
    int trials = argc > 2 ? atoi(argv[2]) : 5;
    if (iters < 1 || trials < 1 || trials > 100) {
        fprintf(stderr, "usage: pp [LAT_ITERS] [TRIALS<=100]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long big = 64L << 20;
    char *buf = malloc(8 * (4L << 20) > 2 * big ? 8 * (4L << 20) : 2 * big);
    memset(buf, rank + 1, 2 * big);
    double lat[100], bw4[100], bw64[100];
    if (rank <= 1) {
        latency(rank, iters / 10 + 1); /* warm up, connections made */
        bandwidth(rank, buf, 4L << 20, 8, 1);
        for (int t = 0; t < trials; t++) {
            lat[t] = latency(rank, iters);
            bw4[t] = bandwidth(rank, buf, 4L << 20, 8, 4);
            bw64[t] = bandwidth(rank, buf, big, 2, 2);
        }
    }
    if (rank == 0) {
        printf("lat8_us %.3f\n", median(lat, trials));
        printf("bw4M_GBs %.3f\n", median(bw4, trials));
        printf("bw64M_GBs %.3f\n", median(bw64, trials));
        fflush(stdout);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
