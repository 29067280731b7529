/*
 * dt_realloc: free and re-allocate device buffers between messages
 * (cuMemFree + cuMemAlloc of the same size, which the driver tends to give
 * back at the same address, then of other sizes), with a different fill each
 * time, below and above the eager / IPC thresholds, every byte checked. A
 * runtime that keys its pointer classification or CUDA IPC mappings by
 * address alone delivers stale data here. Also alternates device and host
 * buffers, and the receive side frees its buffer while the sender keeps its.
 *
 *   dt_realloc [-M MAXSIZE] [-n ITERATIONS]
 */
#include "dt_cases.h"

#include <unistd.h>

int main(int argc, char **argv) {
    dt_prog = "dt_realloc";
    size_t max = 4u << 20;
    int iters = 12, c;
    while ((c = getopt(argc, argv, "M:n:")) != -1) {
        if (c == 'M')
            max = dt_parse_size(optarg);
        else if (c == 'n')
            iters = atoi(optarg);
        else {
            fprintf(stderr, "usage: dt_realloc [-M MAXSIZE] [-n ITERATIONS]\n");
            return 2;
        }
    }
    dt_cuda_setup(0);
    MPI_Init(&argc, &argv);
    static const size_t sizes[] = {4 << 10, (8 << 10) + 8, 64 << 10, 1 << 20, 4 << 20, 16 << 20};
    uint32_t seed = 3;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (sizes[i] > max)
            continue;
        /* same size, fresh buffers on both sides every iteration */
        size_t bad = 0;
        for (int it = 0; it < iters; it++)
            bad += dt_ring(sizes[i], 'D', 'D', it % 2, seed += 17);
        dt_result(bad, "D->D %zu B, both sides re-allocated x%d", sizes[i], iters);
        /* device, host, device... at the same size: the classification must follow */
        bad = 0;
        for (int it = 0; it < iters; it++) {
            char k = it % 2 ? 'H' : 'D';
            bad += dt_ring(sizes[i], k, 'D', 0, seed += 17);
            bad += dt_ring(sizes[i], 'D', k, 1, seed += 17);
        }
        dt_result(bad, "%zu B, device/host alternating x%d", sizes[i], iters);
        /* growing and shrinking: a new allocation may cover an old one's range */
        bad = 0;
        for (int it = 0; it < iters; it++) {
            size_t s = it % 3 == 0 ? sizes[i] : it % 3 == 1 ? sizes[i] / 2 + 1 : sizes[i] * 2;
            if (s > max)
                s = sizes[i];
            bad += dt_ring(s, 'D', 'D', it % 2, seed += 17);
        }
        dt_result(bad, "D->D around %zu B, sizes changing x%d", sizes[i], iters);
    }
    /* the sender keeps one buffer, refilled; the receiver re-allocates */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t size = sizes[i];
        if (size > max)
            continue;
        int r, n;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        MPI_Comm_size(MPI_COMM_WORLD, &n);
        char *s = dt_alloc(size, 'D');
        size_t bad = 0;
        for (int it = 0; it < iters; it++) {
            seed += 17;
            dt_fill(s, size, 'D', seed + (uint32_t)r);
            char *d = dt_alloc(size, 'D');
            dt_memset(d, 0, size, 'D');
            MPI_Sendrecv(s, (int)size, MPI_BYTE, (r + 1) % n, 9, d, (int)size, MPI_BYTE, (r + n - 1) % n, 9,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            bad += dt_check(d, size, 'D', seed + (uint32_t)((r + n - 1) % n), "received data");
            dt_free(d, 'D');
        }
        dt_free(s, 'D');
        dt_result(bad, "D->D %zu B, sender keeps its buffer, receiver re-allocates x%d", size, iters);
    }
    int rc = dt_summary();
    MPI_Finalize();
    dt_cuda_teardown();
    return rc;
}
