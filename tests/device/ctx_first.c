/*
 * dt_ctx_first: the application creates its own CUDA context (cuCtxCreate,
 * not the primary context) BEFORE MPI_Init and passes cuMemAlloc pointers of
 * that context: gmpi must use the current context, not retain the primary
 * one for these buffers. Point-to-point (D<->D, D<->H) and allreduce.
 *
 *   dt_ctx_first [-M MAXSIZE]
 */
#include "dt_cases.h"

#include <unistd.h>

int main(int argc, char **argv) {
    dt_prog = "dt_ctx_first";
    size_t max = 4u << 20;
    int c;
    while ((c = getopt(argc, argv, "M:")) != -1) {
        if (c == 'M')
            max = dt_parse_size(optarg);
        else {
            fprintf(stderr, "usage: dt_ctx_first [-M MAXSIZE]\n");
            return 2;
        }
    }
    dt_cuda_setup(1);
    MPI_Init(&argc, &argv);
    static const size_t sizes[] = {8, 8 << 10, 64 << 10, 1 << 20, 4 << 20, 64 << 20};
    static const char *pairs[] = {"DD", "DH", "HD"};
    uint32_t seed = 9;
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            if (sizes[i] > max)
                continue;
            seed += 7;
            dt_result(dt_ring(sizes[i], pairs[p][0], pairs[p][1], (int)(i % 2), seed), "own context %c->%c %zu B",
                      pairs[p][0], pairs[p][1], sizes[i]);
        }
    for (int t = 0; t < T_NBASIC; t++) {
        size_t counts[] = {1, 1000, max / dt_type_sizes[t]};
        for (int i = 0; i < 3; i++) {
            seed += 7;
            dt_result(dt_allreduce(t, i == 1 ? O_MAX : O_SUM, counts[i], 'D', 0, i == 2, seed),
                      "own context allreduce %s %s count %zu", i == 1 ? "max" : "sum", dt_type_names[t], counts[i]);
        }
    }
    int rc = dt_summary();
    MPI_Finalize();
    dt_cuda_teardown();
    return rc;
}
