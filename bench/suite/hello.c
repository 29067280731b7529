/*
 * gb_hello: the smallest MPI program (init, one line per rank, finalize). Its
 * figure is the launcher's wall time for N ranks, which bench/compare measures
 * from outside.
 */
#include "util.h"

#include <stdio.h>

int main(int argc, char **argv) {
    struct gb_opts o = {.name = "hello", .iters = 1, .iters_large = 1, .side = {GB_HOST, GB_HOST},
                        .flags = GB_NOSIZE};
    gb_parse(argc, argv, &o);
    MPI_Init(&argc, &argv);
    int rank, n, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Get_processor_name(host, &len);
    printf("hello from rank %d of %d on %s\n", rank, n, host);
    MPI_Finalize();
    return 0;
}
