/*
 * gb_bibw: bi-directional bandwidth between ranks 0 and 1: each iteration both
 * post a window of MPI_Irecv and of MPI_Isend, then wait for all. MB/s counts
 * the bytes moved in both directions.
 */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>

static void window(const struct gb_opts *o, int peer, char **sb, char **rb, int nb, size_t size, MPI_Request *reqs) {
    for (int k = 0; k < o->window; k++)
        MPI_Irecv(rb[k % nb], (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k]);
    for (int k = 0; k < o->window; k++)
        MPI_Isend(sb[k % nb], (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[o->window + k]);
    MPI_Waitall(2 * o->window, reqs, MPI_STATUSES_IGNORE);
}

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "bibw", .min_size = 1, .max_size = 4 << 20, .iters = 100, .iters_large = 20,
                        .warmup = 10, .warmup_large = 2, .window = 64, .side = {GB_HOST, GB_HOST},
                        .flags = GB_PT2PT | GB_WINDOW};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 2, 0);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    gb_header(&o, "Size       Bandwidth(MB/s)");
    size_t errors = 0;
    int nb = o.validate ? o.window : 1, peer = 1 - rank;
    enum gb_mem mem = o.side[rank < 2 ? rank : 0];
    char **sb = calloc((size_t)nb, sizeof *sb), **rb = calloc((size_t)nb, sizeof *rb);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)o.window);
    for (int k = 0; rank < 2 && k < nb; k++) {
        sb[k] = gb_alloc(o.max_size, mem);
        rb[k] = gb_alloc(o.max_size, mem);
    }
    GB_SIZES(&o, size) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank >= 2)
            continue;
        int iters = gb_iters(&o, size), warm = gb_warmup(&o, size);
        double t = 0;
        if (!o.validate) {
            for (int i = 0; i < warm; i++)
                window(&o, peer, sb, rb, nb, size, reqs);
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++)
                window(&o, peer, sb, rb, nb, size, reqs);
            t = MPI_Wtime() - t0;
        } else {
            for (int i = -warm; i < iters; i++) {
                for (int k = 0; k < nb; k++) {
                    gb_fill(sb[k], size, mem, (uint32_t)(((i + warm) * nb + k) * 2 + rank));
                    gb_set(rb[k], size, mem, 0xa5);
                }
                double t0 = MPI_Wtime();
                window(&o, peer, sb, rb, nb, size, reqs);
                if (i >= 0)
                    t += MPI_Wtime() - t0;
                for (int k = 0; k < nb; k++)
                    errors += gb_check(rb[k], size, mem, (uint32_t)(((i + warm) * nb + k) * 2 + peer), "bibw");
            }
        }
        if (rank == 0) {
            printf("%-10zu %14.2f\n", size, 2.0 * (double)size * o.window * iters / t / 1e6);
            fflush(stdout);
        }
    }
    for (int k = 0; rank < 2 && k < nb; k++) {
        gb_free(sb[k], mem);
        gb_free(rb[k], mem);
    }
    free(sb);
    free(rb);
    free(reqs);
    return gb_finish(errors);
}
