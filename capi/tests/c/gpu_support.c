/* The GPU-support queries: MPIX_Query_cuda_support (Open MPI's extension)
 * and MPIX_GPU_query_support (MPICH 4.x), before MPI_Init, after it and
 * after MPI_Finalize, and MPIX_GPU_query_support's argument errors.
 *
 * The expected CUDA answer (0 or 1) comes from the environment variable
 * GPU_SUPPORT_EXPECT (tests/tests/capi.rs sets it with GMPI_CUDA and the
 * fake driver).  Built with -DWITH_MPI_EXT (gmpicc), it also includes
 * <mpi-ext.h> and checks Open MPI's compile-time MPIX_CUDA_AWARE_SUPPORT;
 * without it (MPICH's mpicc and mpi.h) it uses only what MPICH declares.
 *
 * Each rank prints "OK gpu_support rank R cuda=E". */
#define TEST_NAME "gpu_support"
#include "check.h"
#include <string.h>

#ifdef WITH_MPI_EXT
#include <mpi-ext.h>
#if !defined(MPIX_CUDA_AWARE_SUPPORT) || !MPIX_CUDA_AWARE_SUPPORT
#error "<mpi-ext.h> must define MPIX_CUDA_AWARE_SUPPORT to 1"
#endif
#endif

#ifndef MPIX_GPU_SUPPORT_CUDA
#error "<mpi.h> must define MPIX_GPU_SUPPORT_CUDA"
#endif

static void check_answers(int expect, const char *when)
{
    int got = MPIX_Query_cuda_support();
    CHECK(got == expect, "%s: MPIX_Query_cuda_support() = %d, expected %d", when, got, expect);

    const int types[3] = {MPIX_GPU_SUPPORT_CUDA, MPIX_GPU_SUPPORT_ZE, MPIX_GPU_SUPPORT_HIP};
    const int want[3] = {expect, 0, 0};
    for (int i = 0; i < 3; i++) {
        int s = -1;
        int rc = MPIX_GPU_query_support(types[i], &s);
        CHECK(rc == MPI_SUCCESS, "%s: MPIX_GPU_query_support(%d) returned %d", when, types[i], rc);
        CHECK(s == want[i], "%s: MPIX_GPU_query_support(%d) said %d, expected %d", when, types[i], s,
              want[i]);
    }
}

/* rc is an MPI_ERR_ARG error whose message names the call and `what`. */
static void expect_arg_error(int rc, const char *what)
{
    int cls = -1, len = 0;
    char msg[MPI_MAX_ERROR_STRING];
    CHECK(rc != MPI_SUCCESS, "%s: returned MPI_SUCCESS", what);
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_ARG, "%s: error class %d, expected MPI_ERR_ARG", what, cls);
    msg[0] = '\0';
    CHECK_MPI(MPI_Error_string(rc, msg, &len));
    CHECK(strstr(msg, "MPIX_GPU_query_support") && strstr(msg, what),
          "the message names the call and %s: '%s'", what, msg);
}

int main(int argc, char **argv)
{
    const char *e = getenv("GPU_SUPPORT_EXPECT");
    if (!e || (strcmp(e, "0") != 0 && strcmp(e, "1") != 0)) {
        fprintf(stderr, "gpu_support: set GPU_SUPPORT_EXPECT to 0 or 1\n");
        return 2;
    }
    const int expect = e[0] - '0';

    check_answers(expect, "before MPI_Init");

    CHECK_MPI(MPI_Init(&argc, &argv));
    int rank = -1;
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    check_answers(expect, "after MPI_Init");

    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int s = 7;
    expect_arg_error(MPIX_GPU_query_support(3, &s), "gpu_type");
    expect_arg_error(MPIX_GPU_query_support(-1, &s), "gpu_type");
    CHECK(s == 7, "a failed query wrote is_supported (%d)", s);
    expect_arg_error(MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, NULL), "is_supported");
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_MPI(MPI_Finalize());

    check_answers(expect, "after MPI_Finalize");
    printf("OK %s rank %d cuda=%d\n", TEST_NAME, rank, expect);
    fflush(stdout);
    return 0;
}
