/*
 * dt_p2p: point-to-point between every pair of memory kinds (send side x
 * receive side, default H and D: H->H, H->D, D->H, D->D), sizes 0, 1, 8 KiB,
 * 64 KiB, 1 MiB, 64 MiB (up to -M), blocking and non-blocking, as a ring
 * over all ranks. Every byte, the status and a guard after each receive
 * buffer are checked. With X among the KINDS (mixed), even ranks use device
 * memory and odd ranks host memory for that side, so `-k X` sends device to
 * host and host to device between neighbours.
 *
 *   dt_p2p [-M MAXSIZE] [-k KINDS] [-r REPEAT]     KINDS: letters of H D M A P X
 */
#include "dt_cases.h"

#include <unistd.h>

int main(int argc, char **argv) {
    dt_prog = "dt_p2p";
    size_t max = 64u << 20;
    const char *kinds = "HD";
    int repeat = 1, c;
    while ((c = getopt(argc, argv, "M:k:r:")) != -1) {
        if (c == 'M')
            max = dt_parse_size(optarg);
        else if (c == 'k')
            kinds = optarg;
        else if (c == 'r')
            repeat = atoi(optarg);
        else {
            fprintf(stderr, "usage: dt_p2p [-M MAXSIZE] [-k KINDS] [-r REPEAT]\n");
            return 2;
        }
    }
    dt_cuda_setup(0);
    MPI_Init(&argc, &argv);
    static const size_t sizes[] = {0, 1, 8 << 10, 64 << 10, 1 << 20, 64 << 20};
    uint32_t seed = 1;
    for (int rep = 0; rep < repeat; rep++)
        for (const char *sk = kinds; *sk; sk++)
            for (const char *rk = kinds; *rk; rk++)
                for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
                    for (int nb = 0; nb < 2; nb++) {
                        if (sizes[i] > max)
                            continue;
                        char s = dt_rank_kind(*sk), r = dt_rank_kind(*rk);
                        if (!dt_kind_available(s) || !dt_kind_available(r))
                            continue;
                        seed += 101;
                        dt_result(dt_ring(sizes[i], s, r, nb, seed), "%c->%c %zu B %s", *sk, *rk, sizes[i],
                                  nb ? "nonblocking" : "blocking");
                    }
    int rc = dt_summary();
    MPI_Finalize();
    dt_cuda_teardown();
    return rc;
}
