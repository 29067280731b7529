/* Tiny self-check helpers shared by the gmpi C ABI test programs.
 * Plain MPI standard only; no implementation-specific behaviour. */
#ifndef GMPI_CAPI_TEST_CHECK_H
#define GMPI_CAPI_TEST_CHECK_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* GCC >= 11 raises a false -Wstringop-overflow on MPI_STATUSES_IGNORE, which
 * mpi.h defines as the constant pointer (MPI_Status *)1 (MPICH ABI); passing
 * it is correct MPI, so silence that one diagnostic. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 7
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

#ifndef TEST_NAME
#error "define TEST_NAME before including check.h"
#endif

static inline int check_rank_(void)
{
    int init = 0, fin = 0, r = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

#include <stdarg.h>
#include <string.h>

/* Format the whole line first and write it with one call, so that lines from
 * different ranks do not interleave. */
static inline void check_report_(const char *kind, const char *file, int line, const char *expr,
                          const char *fmt, ...)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "%s %s rank %d: ", kind, TEST_NAME, check_rank_());
    if (n < 0 || n >= (int)sizeof buf) n = 0;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (m > 0) n += m;
    if (n >= (int)sizeof buf) n = (int)sizeof buf - 1;
    snprintf(buf + n, sizeof buf - (size_t)n, " [%s:%d: %s]\n", file, line, expr);
    fputs(buf, stderr);
    fflush(stderr);
}

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            check_report_("FAIL", __FILE__, __LINE__, #cond, __VA_ARGS__); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                  \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

/* A check that the MPI standard mandates but that a known bug of the reference
 * implementation (MPICH 4.0.x) violates.  It is strict unless the environment
 * variable CAPI_TEST_ALLOW_KNOWN_BUGS is set to a non-empty value other than
 * "0"; then a failure prints a "QUIRK" line to stderr and the test continues.
 * run_mpich.sh sets it; runs against gmpi must not. */
static inline int allow_known_bugs_(void)
{
    const char *e = getenv("CAPI_TEST_ALLOW_KNOWN_BUGS");
    return e && *e && strcmp(e, "0") != 0;
}

#define CHECK_KNOWN_BUG(cond, ...)                                         \
    do {                                                                   \
        if (!(cond)) {                                                     \
            if (allow_known_bugs_()) {                                     \
                static int reported_ = 0; /* report each site once */      \
                if (!reported_++)                                          \
                    check_report_("QUIRK", __FILE__, __LINE__, #cond, __VA_ARGS__); \
            } else {                                                       \
                check_report_("FAIL", __FILE__, __LINE__, #cond, __VA_ARGS__); \
                MPI_Abort(MPI_COMM_WORLD, 1);                              \
                exit(1);                                                   \
            }                                                              \
        }                                                                  \
    } while (0)

/* Check an MPI call returned MPI_SUCCESS. */
#define CHECK_MPI(call)                                                    \
    do {                                                                   \
        int rc_ = (call);                                                  \
        CHECK(rc_ == MPI_SUCCESS, "%s returned %d", #call, rc_);           \
    } while (0)

#define REPORT_OK()                                                        \
    do {                                                                   \
        int r_, n_;                                                        \
        MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                \
        MPI_Comm_size(MPI_COMM_WORLD, &n_);                                \
        if (r_ == 0) {                                                     \
            printf("OK %s np=%d\n", TEST_NAME, n_);                        \
            fflush(stdout);                                                \
        }                                                                  \
    } while (0)

#endif
