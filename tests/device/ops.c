/*
 * dt_ops: the reduction kernels, one per (type, op) MPI defines: every
 * fixed-width integer type (MPI_INT8_T .. MPI_UINT64_T) with all ten
 * predefined ops, MPI_C_BOOL with the logical ops, float, double and
 * MPIX_C_FLOAT16 and MPIX_BFLOAT16 (MPICH's half precision and bfloat16)
 * with sum, prod, min and max. Each
 * pair goes through allreduce at 1, 1027 and the largest count that fits in
 * -M bytes, in-place allreduce and reduce (to the last rank) at that count,
 * against a host reference. Buffers of kind -k (default D; X: mixed, device
 * on even ranks and host on odd ones).
 *
 * Run with GMPI_LOG=gpu=debug, the log names each kernel gmpi compiled
 * ("compiled gmpi_reduce_OP_TYPE"); a WARN "no device reduction kernels"
 * means the reductions ran on the CPU instead.
 *
 *   dt_ops [-M MAXSIZE] [-k KIND]
 */
#include "dt_cases.h"

#include <unistd.h>

static int rank_, nranks;

/* MPI_Reduce to the last rank: it checks. */
static size_t reduce_case(int t, int o, size_t count, char k, uint32_t seed) {
    size_t bytes = count * dt_type_sizes[t];
    int root = nranks - 1;
    unsigned char *h = malloc(bytes + DT_GUARD);
    dt_fill_values(h, t, o, rank_, count, seed);
    void *s = dt_alloc(bytes, k), *d = dt_alloc(bytes + DT_GUARD, k);
    dt_put(s, h, bytes, k);
    dt_memset(d, DT_GUARD_BYTE, bytes + DT_GUARD, k);
    MPI_Reduce(s, d, (int)count, dt_mpi_type(t), dt_mpi_op(o), root, MPI_COMM_WORLD);
    size_t bad = 0;
    if (rank_ == root) {
        dt_get(h, d, bytes + DT_GUARD, k);
        bad = dt_check_values(h, t, o, nranks - 1, 0, count, seed, "reduce");
        bad += dt_check_value(h + bytes, DT_GUARD, 'H', DT_GUARD_BYTE, "guard after the reduce result");
    }
    dt_free(s, k), dt_free(d, k), free(h);
    return bad;
}

int main(int argc, char **argv) {
    dt_prog = "dt_ops";
    size_t max = 1u << 20;
    char kind_arg = 'D';
    int c;
    while ((c = getopt(argc, argv, "M:k:")) != -1) {
        if (c == 'M')
            max = dt_parse_size(optarg);
        else if (c == 'k')
            kind_arg = optarg[0];
        else {
            fprintf(stderr, "usage: dt_ops [-M MAXSIZE] [-k KIND]\n");
            return 2;
        }
    }
    dt_cuda_setup(0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks > 16)
        dt_die("the reference values assume at most 16 ranks");
    char k = dt_rank_kind(kind_arg);
    uint32_t seed = 17;
    int pairs = 0;
    for (int t = 0; t < T_NTYPES; t++)
        for (int o = 0; o < O_NOPS; o++) {
            if (!dt_op_valid(o, t))
                continue;
            pairs++;
            size_t big = max / dt_type_sizes[t];
            size_t counts[] = {1, 1027, big};
            for (int i = 0; i < 3; i++) {
                if (i == 2 && big <= 1027)
                    break;
                seed += 7;
                dt_result(dt_allreduce(t, o, counts[i], k, 0, 0, seed), "allreduce %c %s %s count %zu", kind_arg,
                          dt_op_names[o], dt_type_names[t], counts[i]);
            }
            seed += 7;
            dt_result(dt_allreduce(t, o, big, k, 0, 1, seed), "allreduce %c %s %s count %zu in place", kind_arg,
                      dt_op_names[o], dt_type_names[t], big);
            seed += 7;
            dt_result(reduce_case(t, o, big, k, seed), "reduce %c %s %s count %zu root %d", kind_arg, dt_op_names[o],
                      dt_type_names[t], big, nranks - 1);
        }
    if (rank_ == 0)
        printf("dt_ops: %d (type, op) pairs\n", pairs);
    int rc = dt_summary();
    MPI_Finalize();
    dt_cuda_teardown();
    return rc;
}
