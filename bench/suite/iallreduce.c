/*
 * gb_iallreduce: non-blocking MPI_Iallreduce (MPI_FLOAT, MPI_SUM) and how much
 * of it overlaps computation, as OSU's osu_iallreduce measures it:
 *   pure     Iallreduce + Wait alone, µs per call;
 *   overall  Iallreduce, then busy compute for the pure time (with -t MPI_Test
 *            calls spread over it), then Wait;
 *   overlap  100 * (1 - (overall - compute) / pure), clamped to 0..100.
 * Every figure is the average over ranks.
 */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "iallreduce", .min_size = 4, .max_size = 1 << 20, .iters = 1000,
                        .iters_large = 100, .warmup = 100, .warmup_large = 10, .tests = 8,
                        .side = {GB_HOST, GB_HOST}, .flags = GB_COMPUTE};
    gb_parse(argc, argv, &o);
    gb_init(&argc, &argv, &o, 1, 0);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    enum gb_mem mem = o.side[0];
    char *sbuf = gb_alloc(o.max_size, mem), *rbuf = gb_alloc(o.max_size, mem);
    float *expect = malloc(o.max_size + 4);
    gb_header(&o, "Size       Overall(us)  Compute(us)  Pure(us)     Overlap(%)");
    size_t errors = 0;
    GB_SIZES(&o, size) {
        int iters = gb_iters(&o, size), warm = gb_warmup(&o, size), count = (int)(size / 4);
        double pure = 0, overall = 0, compute = 0;
        for (int phase = 0; phase < 2; phase++) {
            MPI_Barrier(MPI_COMM_WORLD);
            for (int i = -warm; i < iters; i++) {
                uint32_t seed = (uint32_t)((i + warm) * 2 + phase) * 7919u;
                if (o.validate) {
                    gb_fill_floats(sbuf, (size_t)count, mem, seed + (uint32_t)rank);
                    gb_set(rbuf, size, mem, 0xa5);
                }
                MPI_Request req;
                double t0 = MPI_Wtime(), tc = 0;
                MPI_Iallreduce(sbuf, rbuf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
                if (phase == 1)
                    tc = gb_compute(pure, &req, o.tests);
                MPI_Wait(&req, MPI_STATUS_IGNORE);
                double dt = MPI_Wtime() - t0;
                if (i >= 0) {
                    if (phase == 0)
                        pure += dt;
                    else
                        overall += dt, compute += tc;
                }
                if (o.validate) {
                    gb_float_sums(expect, (size_t)count, seed, n);
                    errors += gb_check_floats(rbuf, (size_t)count, mem, expect, "iallreduce");
                }
            }
            if (phase == 0)
                pure /= iters;
        }
        overall /= iters;
        compute /= iters;
        double mine[3] = {overall, compute, pure}, sum[3];
        MPI_Reduce(mine, sum, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double ov = sum[0] / n, co = sum[1] / n, pu = sum[2] / n;
            double overlap = pu > 0 ? 100.0 * (1.0 - (ov - co) / pu) : 0;
            overlap = overlap < 0 ? 0 : overlap > 100 ? 100 : overlap;
            printf("%-10zu %12.3f %12.3f %12.3f %12.2f\n", size, ov * 1e6, co * 1e6, pu * 1e6, overlap);
            fflush(stdout);
        }
    }
    gb_free(sbuf, mem);
    gb_free(rbuf, mem);
    free(expect);
    return gb_finish(errors);
}
