/*
 * gb_latency: point-to-point one-way latency (ping-pong between ranks 0 and 1,
 * MPI_Send/MPI_Recv, half the round trip), µs by message size. Other ranks
 * only take part in the barriers between sizes.
 */
#include "util.h"

#include <stdio.h>

static void pingpong(int rank, char *sbuf, char *rbuf, size_t size) {
    int peer = 1 - rank;
    if (rank == 0) {
        MPI_Send(sbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(sbuf, (int)size, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "latency", .min_size = 0, .max_size = 4 << 20, .iters = 10000,
                        .iters_large = 1000, .warmup = 1000, .warmup_large = 100, .side = {GB_HOST, GB_HOST},
                        .flags = GB_PT2PT};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 2, 0);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gb_header(&o, "Size       Latency(us)");
    size_t errors = 0;
    enum gb_mem mem = o.side[rank < 2 ? rank : 0];
    char *sbuf = NULL, *rbuf = NULL;
    if (rank < 2) {
        sbuf = gb_alloc(o.max_size, mem);
        rbuf = gb_alloc(o.max_size, mem);
    }
    GB_SIZES(&o, size) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank >= 2)
            continue;
        int iters = gb_iters(&o, size), warm = gb_warmup(&o, size);
        double t = 0;
        if (!o.validate) {
            for (int i = 0; i < warm; i++)
                pingpong(rank, sbuf, rbuf, size);
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++)
                pingpong(rank, sbuf, rbuf, size);
            t = MPI_Wtime() - t0;
        } else {
            for (int i = -warm; i < iters; i++) {
                gb_fill(sbuf, size, mem, (uint32_t)(i + warm) * 2 + (uint32_t)rank);
                gb_set(rbuf, size, mem, 0xa5);
                double t0 = MPI_Wtime();
                pingpong(rank, sbuf, rbuf, size);
                if (i >= 0)
                    t += MPI_Wtime() - t0;
                errors += gb_check(rbuf, size, mem, (uint32_t)(i + warm) * 2 + (uint32_t)(1 - rank), "latency");
            }
        }
        if (rank == 0) {
            printf("%-10zu %12.3f\n", size, t / (2.0 * iters) * 1e6);
            fflush(stdout);
        }
    }
    if (rank < 2) {
        gb_free(sbuf, mem);
        gb_free(rbuf, mem);
    }
    return gb_finish(errors);
}
