/* The layout of every predefined datatype, printed one line per type so
 * that two MPI libraries can be compared line by line (the test runs it on
 * MPICH and on gmpi and diffs the output): MPI_Type_size, MPI_Type_get_extent,
 * MPI_Type_get_true_extent, the extent of struct { char; T; char } built with
 * MPI_Type_create_struct from offsetof (with and without the resize to
 * sizeof, MPI's alignment "epsilon"), MPI_Pack_size and MPI_Pack's output
 * length for one element, and MPI_Get_count / MPI_Get_elements after a self
 * send-receive of two elements. Then MINLOC/MAXLOC on arrays of
 * MPI_DOUBLE_INT, MPI_SHORT_INT and MPI_LONG_DOUBLE_INT, self-checked.
 * Prints "OK type_layout" at the end; run on one process. */
#include <mpi.h>
#include <complex.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed = 0;
#define FAIL(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "FAIL type_layout: " __VA_ARGS__);                     \
        fputc('\n', stderr);                                                   \
        failed = 1;                                                            \
    } while (0)

#define SWRAP(T) struct s_##T { char a; T v; char b; }

typedef struct { double v; int i; } double_int;
typedef struct { long v; int i; } long_int;
typedef struct { short v; int i; } short_int;
typedef struct { float v; int i; } float_int;
typedef struct { int v; int i; } two_int;
typedef struct { long double v; int i; } long_double_int;
typedef long double long_double;
typedef long long long_long;
typedef unsigned long long unsigned_long_long;
typedef unsigned char unsigned_char;
typedef signed char signed_char;
typedef unsigned short unsigned_short;
typedef unsigned long unsigned_long;
typedef float _Complex float_complex;
typedef double _Complex double_complex;
typedef long double _Complex long_double_complex;

static void layout(const char *name, MPI_Datatype t, MPI_Aint soff,
                   MPI_Aint boff, MPI_Aint ssize) {
    int size, psize, pos = 0, count, elems;
    MPI_Aint lb, ext, tlb, text, slb, sext, rlb, rext;
    MPI_Type_size(t, &size);
    MPI_Type_get_extent(t, &lb, &ext);
    MPI_Type_get_true_extent(t, &tlb, &text);

    /* struct { char a; T v; char b; } */
    int bl[3] = {1, 1, 1};
    MPI_Aint disp[3] = {0, soff, boff};
    MPI_Datatype types[3] = {MPI_CHAR, t, MPI_CHAR};
    MPI_Datatype st, rs;
    MPI_Type_create_struct(3, bl, disp, types, &st);
    MPI_Type_create_resized(st, 0, ssize, &rs);
    MPI_Type_commit(&st);
    MPI_Type_commit(&rs);
    MPI_Type_get_extent(st, &slb, &sext);
    MPI_Type_get_extent(rs, &rlb, &rext);

    MPI_Pack_size(1, t, MPI_COMM_WORLD, &psize);
    char in[256], out[256], buf[512];
    for (int i = 0; i < 256; i++) in[i] = (char)i;
    MPI_Pack(in, 1, t, out, sizeof out, &pos, MPI_COMM_WORLD);

    MPI_Status st1;
    MPI_Sendrecv(in, 2, t, 0, 7, buf, 4, t, 0, 7, MPI_COMM_WORLD, &st1);
    MPI_Get_count(&st1, t, &count);
    /* MPICH 4.0.2 divides by zero in MPI_Get_elements on these two */
    if (strcmp(name, "MPI_FLOAT_INT") && strcmp(name, "MPI_2INT"))
        MPI_Get_elements(&st1, t, &elems);
    else
        elems = -1;

    printf("%-28s size %2d lb %ld extent %2ld true_lb %ld true_extent %2ld "
           "struct %2ld resized %2ld c_sizeof %2ld pack_size_ge_size %d "
           "packed %2d count %d elements %d\n",
           name, size, (long)lb, (long)ext, (long)tlb, (long)text, (long)sext,
           (long)rext, (long)ssize, psize >= size, pos, count, elems);
    MPI_Type_free(&st);
    MPI_Type_free(&rs);
}

#define L(T, H)                                                                \
    layout(#H, H, offsetof(struct s_##T, v), offsetof(struct s_##T, b),        \
           sizeof(struct s_##T))

SWRAP(char);
SWRAP(signed_char);
SWRAP(unsigned_char);
SWRAP(short);
SWRAP(unsigned_short);
SWRAP(int);
SWRAP(unsigned);
SWRAP(long);
SWRAP(unsigned_long);
SWRAP(long_long);
SWRAP(unsigned_long_long);
SWRAP(float);
SWRAP(double);
SWRAP(long_double);
SWRAP(float_complex);
SWRAP(double_complex);
SWRAP(long_double_complex);
SWRAP(double_int);
SWRAP(long_int);
SWRAP(short_int);
SWRAP(float_int);
SWRAP(two_int);
SWRAP(long_double_int);

/* MINLOC/MAXLOC on n pairs of each padded pair type (MPI_Allreduce on one
 * process, and MPI_Reduce_local). */
#define LOC_CHECK(PT, VT, H)                                                   \
    do {                                                                       \
        enum { N = 5 };                                                        \
        PT a[N], b[N], r[N];                                                   \
        memset(a, 0x5a, sizeof a);                                             \
        memset(b, 0x5a, sizeof b);                                             \
        for (int k = 0; k < N; k++) {                                          \
            a[k].v = (VT)(k * 3 % 5); a[k].i = 10 + k;                         \
            b[k].v = (VT)(k * 2 % 5); b[k].i = 20 + k;                         \
        }                                                                      \
        memset(r, 0, sizeof r);                                                \
        MPI_Allreduce(a, r, N, H, MPI_MINLOC, MPI_COMM_WORLD);                 \
        for (int k = 0; k < N; k++)                                            \
            if (r[k].v != a[k].v || r[k].i != a[k].i)                          \
                FAIL(#H " allreduce minloc [%d]: %g/%d", k, (double)r[k].v,    \
                     r[k].i);                                                  \
        memcpy(r, b, sizeof r);                                                \
        MPI_Reduce_local(a, r, N, H, MPI_MINLOC);                              \
        for (int k = 0; k < N; k++) {                                          \
            int ua = a[k].v < b[k].v || (a[k].v == b[k].v && a[k].i < b[k].i); \
            PT *w = ua ? &a[k] : &b[k];                                        \
            if (r[k].v != w->v || r[k].i != w->i)                              \
                FAIL(#H " minloc [%d]: %g/%d", k, (double)r[k].v, r[k].i);     \
        }                                                                      \
        memcpy(r, b, sizeof r);                                                \
        MPI_Reduce_local(a, r, N, H, MPI_MAXLOC);                              \
        for (int k = 0; k < N; k++) {                                          \
            int ua = a[k].v > b[k].v || (a[k].v == b[k].v && a[k].i < b[k].i); \
            PT *w = ua ? &a[k] : &b[k];                                        \
            if (r[k].v != w->v || r[k].i != w->i)                              \
                FAIL(#H " maxloc [%d]: %g/%d", k, (double)r[k].v, r[k].i);     \
        }                                                                      \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    L(char, MPI_CHAR);
    L(signed_char, MPI_SIGNED_CHAR);
    L(unsigned_char, MPI_UNSIGNED_CHAR);
    L(unsigned_char, MPI_BYTE);
    L(short, MPI_SHORT);
    L(unsigned_short, MPI_UNSIGNED_SHORT);
    L(int, MPI_INT);
    L(unsigned, MPI_UNSIGNED);
    L(long, MPI_LONG);
    L(unsigned_long, MPI_UNSIGNED_LONG);
    L(long_long, MPI_LONG_LONG_INT);
    L(unsigned_long_long, MPI_UNSIGNED_LONG_LONG);
    L(float, MPI_FLOAT);
    L(double, MPI_DOUBLE);
    L(long_double, MPI_LONG_DOUBLE);
    L(float_complex, MPI_C_FLOAT_COMPLEX);
    L(double_complex, MPI_C_DOUBLE_COMPLEX);
    L(long_double_complex, MPI_C_LONG_DOUBLE_COMPLEX);
    L(float_complex, MPI_C_COMPLEX);
    L(double_int, MPI_DOUBLE_INT);
    L(long_int, MPI_LONG_INT);
    L(short_int, MPI_SHORT_INT);
    L(float_int, MPI_FLOAT_INT);
    L(two_int, MPI_2INT);
    L(long_double_int, MPI_LONG_DOUBLE_INT);
    L(char, MPI_INT8_T);
    L(short, MPI_INT16_T);
    L(int, MPI_INT32_T);
    L(long, MPI_INT64_T);
    L(unsigned_char, MPI_UINT8_T);
    L(unsigned_short, MPI_UINT16_T);
    L(unsigned, MPI_UINT32_T);
    L(unsigned_long, MPI_UINT64_T);
    L(unsigned_char, MPI_C_BOOL);
    L(long, MPI_AINT);
    L(long, MPI_OFFSET);
    L(long, MPI_COUNT);
    LOC_CHECK(double_int, double, MPI_DOUBLE_INT);
    LOC_CHECK(short_int, short, MPI_SHORT_INT);
    LOC_CHECK(long_int, long, MPI_LONG_INT);
    LOC_CHECK(long_double_int, long double, MPI_LONG_DOUBLE_INT);
    MPI_Finalize();
    if (failed) return 1;
    printf("OK type_layout\n");
    return 0;
}
