/*
 * dt_kinds: stream-ordered memory (cuMemAllocAsync / cuMemFreeAsync on a
 * stream, synchronized before use: pool allocations that legacy CUDA IPC
 * cannot export), managed memory (cuMemAllocManaged) and pinned host memory
 * (cuMemHostAlloc) through point-to-point and allreduce, every byte checked.
 *
 *   dt_kinds [-M MAXSIZE]
 */
#include "dt_cases.h"

#include <unistd.h>

int main(int argc, char **argv) {
    dt_prog = "dt_kinds";
    size_t max = 4u << 20;
    int c;
    while ((c = getopt(argc, argv, "M:")) != -1) {
        if (c == 'M')
            max = dt_parse_size(optarg);
        else {
            fprintf(stderr, "usage: dt_kinds [-M MAXSIZE]\n");
            return 2;
        }
    }
    dt_cuda_setup(0);
    MPI_Init(&argc, &argv);
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (!dt_kind_available('A') && r == 0)
        printf("SKIP dt_kinds stream-ordered memory: the driver has no cuMemAllocAsync\n");
    static const char *pairs[] = {"AA", "AD", "DA", "AH", "HA", "MM", "MD", "DM", "HM", "MH", "PD", "DP", "PP"};
    static const size_t sizes[] = {1, 8 << 10, (64 << 10) + 5, 1 << 20, 4 << 20, 64 << 20};
    uint32_t seed = 5;
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (int nb = 0; nb < 2; nb++) {
                char sk = pairs[p][0], rk = pairs[p][1];
                if (sizes[i] > max || !dt_kind_available(sk) || !dt_kind_available(rk))
                    continue;
                seed += 31;
                dt_result(dt_ring(sizes[i], sk, rk, nb, seed), "%s->%s %zu B %s", dt_kind_name(sk),
                          dt_kind_name(rk), sizes[i], nb ? "nonblocking" : "blocking");
            }
    static const char kinds[] = {'A', 'M', 'P'};
    for (size_t k = 0; k < sizeof kinds; k++) {
        if (!dt_kind_available(kinds[k]))
            continue;
        for (int t = 0; t < T_NBASIC; t++) {
            size_t counts[] = {1000, max / dt_type_sizes[t]};
            for (int i = 0; i < 2; i++) {
                seed += 31;
                dt_result(dt_allreduce(t, O_SUM, counts[i], kinds[k], i, 0, seed), "%s %s sum %s count %zu",
                          i ? "iallreduce" : "allreduce", dt_kind_name(kinds[k]), dt_type_names[t], counts[i]);
            }
        }
    }
    int rc = dt_summary();
    MPI_Finalize();
    dt_cuda_teardown();
    return rc;
}
