/* Predefined reductions on the types with no plain C arithmetic in the
 * runtime: long double (x87 extended: values that need more than 53 bits
 * prove its precision is kept), float/double/long double complex, and the
 * MINLOC/MAXLOC pair types MPI_2REAL, MPI_2DOUBLE_PRECISION and
 * MPI_LONG_DOUBLE_INT (ties go to the lower index); through MPI_Allreduce
 * (also in place), MPI_Reduce and MPI_Reduce_local, on predefined and
 * contiguous derived types; and MPI_ERR_OP for operations the standard does
 * not define on them (MPI_MAX on complex, …). Expected values are computed
 * locally with C's own arithmetic in rank order, with values chosen so that
 * any association order gives the same bits. Any np >= 1. */
#define TEST_NAME "ext_reduce"
#include "check.h"
#include <complex.h>
#include <string.h>

static int rank, size;

/* Element k of rank r's buffer. */
typedef void (*gen_fn)(int r, int k, void *e);
/* inout = in op inout, one element. */
typedef void (*comb_fn)(const void *in, void *inout);
/* Whether two elements of sz bytes hold the same value. */
typedef int (*eq_fn)(const void *a, const void *b, size_t sz);

static int eq_mem(const void *a, const void *b, size_t sz) { return memcmp(a, b, sz) == 0; }

/* Long double slots: the 10 significant bytes of each 16-byte slot. */
static int eq_ld(const void *a, const void *b, size_t sz)
{
    for (size_t o = 0; o < sz; o += 16)
        if (memcmp((const char *)a + o, (const char *)b + o, 10)) return 0;
    return 1;
}

typedef struct { long double v; int i; } ldi_t;

static int eq_ldi(const void *a, const void *b, size_t sz)
{
    (void)sz;
    const ldi_t *x = a, *y = b;
    return memcmp(&x->v, &y->v, 10) == 0 && x->i == y->i;
}

#define MAXE 8
#define MAXSZ 32
static _Alignas(16) unsigned char sbuf[MAXE * MAXSZ], rbuf[MAXE * MAXSZ], expect[MAXE * MAXSZ],
    tmp[MAXSZ];

static void show(const char *what, const char *how, int k, const void *got, const void *want,
                 size_t sz)
{
    char g[3 * MAXSZ + 1] = "", w[3 * MAXSZ + 1] = "";
    for (size_t i = 0; i < sz; i++) {
        sprintf(g + 2 * i, "%02x", ((const unsigned char *)got)[i]);
        sprintf(w + 2 * i, "%02x", ((const unsigned char *)want)[i]);
    }
    CHECK(0, "%s via %s: element %d is %s, expected %s", what, how, k, g, w);
}

static void compare(const char *what, const char *how, const void *got, const void *want,
                    int n, size_t sz, eq_fn eq)
{
    for (int k = 0; k < n; k++)
        if (!eq((const char *)got + k * sz, (const char *)want + k * sz, sz))
            show(what, how, k, (const char *)got + k * sz, (const char *)want + k * sz, sz);
}

/* Reduce n elements of sz bytes, sent as dtcount items of dt, with op. */
static void run(const char *what, MPI_Datatype dt, int dtcount, MPI_Op op, size_t sz, int n,
                gen_fn gen, comb_fn comb, eq_fn eq)
{
    /* The expected result, in rank order. */
    for (int k = 0; k < n; k++) {
        void *e = expect + k * sz;
        gen(0, k, e);
        for (int r = 1; r < size; r++) {
            gen(r, k, tmp);
            comb(e, tmp);
            memcpy(e, tmp, sz);
        }
        gen(rank, k, sbuf + k * sz);
    }
    memset(rbuf, 0xa5, sizeof rbuf);
    CHECK_MPI(MPI_Allreduce(sbuf, rbuf, dtcount, dt, op, MPI_COMM_WORLD));
    compare(what, "MPI_Allreduce", rbuf, expect, n, sz, eq);

    memcpy(rbuf, sbuf, n * sz);
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, rbuf, dtcount, dt, op, MPI_COMM_WORLD));
    compare(what, "MPI_Allreduce in place", rbuf, expect, n, sz, eq);

    int root = size - 1;
    memset(rbuf, 0x5a, sizeof rbuf);
    CHECK_MPI(MPI_Reduce(sbuf, rbuf, dtcount, dt, op, root, MPI_COMM_WORLD));
    if (rank == root) compare(what, "MPI_Reduce", rbuf, expect, n, sz, eq);

    /* Local: in = rank r's values, inout = rank r+1's. */
    for (int k = 0; k < n; k++) {
        gen(rank + 1, k, rbuf + k * sz);
        memcpy(expect + k * sz, rbuf + k * sz, sz);
        comb(sbuf + k * sz, expect + k * sz);
    }
    CHECK_MPI(MPI_Reduce_local(sbuf, rbuf, dtcount, dt, op));
    compare(what, "MPI_Reduce_local", rbuf, expect, n, sz, eq);
}

/* ---- long double ---- */

#define E60 0x1p-60L

static void put_ld(void *e, long double v)
{
    memset(e, 0, 16);
    memcpy(e, &v, sizeof v);
}
static long double get_ld(const void *e)
{
    long double v;
    memcpy(&v, e, sizeof v);
    return v;
}

/* 1 + m·2^-60: needs 61+ significant bits. */
static void ld_gen_sum(int r, int k, void *e) { put_ld(e, 1.0L + (long double)(r + 1 + k) * E60); }
static void ld_gen_prod(int r, int k, void *e)
{
    put_ld(e, r == 0 ? 1.0L + (long double)(k + 1) * E60 : (long double)(r + 1) * (k % 2 ? -0.5L : 1.0L));
}
static void ld_gen_mm(int r, int k, void *e)
{
    put_ld(e, (k % 2 ? -1.0L : 1.0L) * (1.0L + (long double)((r * 5 + k * 3) % 7) * E60));
}
static void ld_sum(const void *a, void *b) { put_ld(b, get_ld(a) + get_ld(b)); }
static void ld_prod(const void *a, void *b) { put_ld(b, get_ld(a) * get_ld(b)); }
static void ld_max(const void *a, void *b)
{
    if (get_ld(a) > get_ld(b)) put_ld(b, get_ld(a));
}
static void ld_min(const void *a, void *b)
{
    if (get_ld(a) < get_ld(b)) put_ld(b, get_ld(a));
}

/* ---- complex ---- */

#define CPLX(T, name)                                                                     \
    static T name##_get(const void *e) { T v; memcpy(&v, e, sizeof v); return v; }        \
    static void name##_put(void *e, T v) { memset(e, 0, sizeof v); memcpy(e, &v, sizeof v); } \
    static void name##_sum(const void *a, void *b) { name##_put(b, name##_get(a) + name##_get(b)); } \
    static void name##_prod(const void *a, void *b) { name##_put(b, name##_get(a) * name##_get(b)); } \
    /* Small dyadic values: every product and sum is exact. */                           \
    static void name##_gen(int r, int k, void *e)                                          \
    {                                                                                     \
        T v;                                                                              \
        __real__ v = (r + 1) * (k + 1) * 0.5;                                             \
        __imag__ v = (r - k) * 0.25;                                                      \
        name##_put(e, v);                                                                 \
    }
CPLX(float _Complex, cf)
CPLX(double _Complex, cd)
CPLX(long double _Complex, cld)

/* Long double complex values that need more than 53 bits (sums only). */
static void cld_gen_wide(int r, int k, void *e)
{
    long double _Complex v;
    __real__ v = 1.0L + (long double)(r + 1) * E60;
    __imag__ v = -2.0L + (long double)(r + k) * E60;
    cld_put(e, v);
}

/* ---- MINLOC / MAXLOC pairs ---- */

/* Pair k of rank r: value and index, with ties. */
static void pair_of(int r, int k, int *v, int *i)
{
    switch (k % 4) {
    case 0: *v = 7; *i = r + 10; break;               /* all equal */
    case 1: *v = r % 2; *i = r; break;                /* two classes */
    case 2: *v = -(r / 2); *i = 100 - r; break;       /* ties, indices descending */
    default: *v = (r * 5 + 3) % 4; *i = 3 * r; break;
    }
}

#define PAIR(T, name)                                                                    \
    static void name##_gen(int r, int k, void *e)                                        \
    {                                                                                    \
        int v, i;                                                                        \
        pair_of(r, k, &v, &i);                                                           \
        T p[2] = {(T)v, (T)i};                                                           \
        memcpy(e, p, sizeof p);                                                          \
    }                                                                                    \
    static void name##_minloc(const void *a, void *b)                                    \
    {                                                                                    \
        T x[2], y[2];                                                                    \
        memcpy(x, a, sizeof x);                                                          \
        memcpy(y, b, sizeof y);                                                          \
        if (x[0] < y[0] || (x[0] == y[0] && x[1] < y[1])) memcpy(b, x, sizeof x);        \
    }                                                                                    \
    static void name##_maxloc(const void *a, void *b)                                    \
    {                                                                                    \
        T x[2], y[2];                                                                    \
        memcpy(x, a, sizeof x);                                                          \
        memcpy(y, b, sizeof y);                                                          \
        if (x[0] > y[0] || (x[0] == y[0] && x[1] < y[1])) memcpy(b, x, sizeof x);        \
    }
PAIR(float, p2r)
PAIR(double, p2d)

static void ldi_gen(int r, int k, void *e)
{
    int v, i;
    pair_of(r, k, &v, &i);
    ldi_t p;
    memset(&p, 0, sizeof p);
    /* Distinct only beyond 53 bits. */
    p.v = 1.0L + (long double)v * E60;
    p.i = i;
    memcpy(e, &p, sizeof p);
}
static void ldi_minloc(const void *a, void *b)
{
    ldi_t x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    if (x.v < y.v || (x.v == y.v && x.i < y.i)) memcpy(b, &x, sizeof x);
}
static void ldi_maxloc(const void *a, void *b)
{
    ldi_t x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    if (x.v > y.v || (x.v == y.v && x.i < y.i)) memcpy(b, &x, sizeof x);
}

static void expect_op_error(const char *what, int rc)
{
    int cls = -1;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OP, "%s returned %d (class %d), expected MPI_ERR_OP", what, rc, cls);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(sizeof(ldi_t) == 32 && sizeof(long double) == 16, "unexpected long double layout");

    /* long double */
    run("long double SUM", MPI_LONG_DOUBLE, 5, MPI_SUM, 16, 5, ld_gen_sum, ld_sum, eq_ld);
    run("long double PROD", MPI_LONG_DOUBLE, 4, MPI_PROD, 16, 4, ld_gen_prod, ld_prod, eq_ld);
    run("long double MAX", MPI_LONG_DOUBLE, 6, MPI_MAX, 16, 6, ld_gen_mm, ld_max, eq_ld);
    run("long double MIN", MPI_LONG_DOUBLE, 6, MPI_MIN, 16, 6, ld_gen_mm, ld_min, eq_ld);
    {
        /* The sum of 1 + (r+1)·2^-60 over ranks is not the sum of doubles. */
        long double v = 1.0L + (long double)(rank + 1) * E60, s = 0;
        CHECK_MPI(MPI_Allreduce(&v, &s, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        long double want = (long double)size + (long double)(size * (size + 1) / 2) * E60;
        CHECK(s == want && s != (long double)size, "long double sum %La, expected %La", s, want);
    }

    /* complex */
    run("float complex SUM", MPI_C_FLOAT_COMPLEX, 4, MPI_SUM, 8, 4, cf_gen, cf_sum, eq_mem);
    run("float complex PROD", MPI_C_COMPLEX, 4, MPI_PROD, 8, 4, cf_gen, cf_prod, eq_mem);
    run("Fortran COMPLEX PROD", MPI_COMPLEX, 3, MPI_PROD, 8, 3, cf_gen, cf_prod, eq_mem);
    run("double complex SUM", MPI_C_DOUBLE_COMPLEX, 4, MPI_SUM, 16, 4, cd_gen, cd_sum, eq_mem);
    run("double complex PROD", MPI_C_DOUBLE_COMPLEX, 4, MPI_PROD, 16, 4, cd_gen, cd_prod, eq_mem);
    run("DOUBLE COMPLEX SUM", MPI_DOUBLE_COMPLEX, 4, MPI_SUM, 16, 4, cd_gen, cd_sum, eq_mem);
    run("COMPLEX16 PROD", MPI_COMPLEX16, 2, MPI_PROD, 16, 2, cd_gen, cd_prod, eq_mem);
    run("CXX double complex PROD", MPI_CXX_DOUBLE_COMPLEX, 2, MPI_PROD, 16, 2, cd_gen, cd_prod,
        eq_mem);
    run("long double complex SUM", MPI_C_LONG_DOUBLE_COMPLEX, 3, MPI_SUM, 32, 3, cld_gen_wide,
        cld_sum, eq_ld);
    run("long double complex PROD", MPI_C_LONG_DOUBLE_COMPLEX, 3, MPI_PROD, 32, 3, cld_gen,
        cld_prod, eq_ld);

    /* MINLOC / MAXLOC */
    run("2REAL MINLOC", MPI_2REAL, 8, MPI_MINLOC, 8, 8, p2r_gen, p2r_minloc, eq_mem);
    run("2REAL MAXLOC", MPI_2REAL, 8, MPI_MAXLOC, 8, 8, p2r_gen, p2r_maxloc, eq_mem);
    run("2DOUBLE_PRECISION MINLOC", MPI_2DOUBLE_PRECISION, 8, MPI_MINLOC, 16, 8, p2d_gen,
        p2d_minloc, eq_mem);
    run("2DOUBLE_PRECISION MAXLOC", MPI_2DOUBLE_PRECISION, 8, MPI_MAXLOC, 16, 8, p2d_gen,
        p2d_maxloc, eq_mem);
    run("LONG_DOUBLE_INT MINLOC", MPI_LONG_DOUBLE_INT, 8, MPI_MINLOC, 32, 8, ldi_gen, ldi_minloc,
        eq_ldi);
    run("LONG_DOUBLE_INT MAXLOC", MPI_LONG_DOUBLE_INT, 8, MPI_MAXLOC, 32, 8, ldi_gen, ldi_maxloc,
        eq_ldi);

    /* Contiguous derived types of them, where the implementation applies
     * predefined operations to derived types of one basic type (MPI leaves
     * this open: MPICH rejects it, gmpi accepts it). */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int derived_ok;
    {
        MPI_Datatype i2;
        int a[2] = {1, 2}, b[2] = {3, 4};
        CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &i2));
        CHECK_MPI(MPI_Type_commit(&i2));
        derived_ok = MPI_Reduce_local(a, b, 1, i2, MPI_SUM) == MPI_SUCCESS;
        MPI_Type_free(&i2);
    }
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    if (!derived_ok && rank == 0)
        printf("note: predefined ops on derived types not supported here; skipped\n");
    if (derived_ok) {
        MPI_Datatype t3, c2, p2;
        CHECK_MPI(MPI_Type_contiguous(3, MPI_LONG_DOUBLE, &t3));
        CHECK_MPI(MPI_Type_commit(&t3));
        run("contiguous(3, long double) SUM", t3, 2, MPI_SUM, 16, 6, ld_gen_sum, ld_sum, eq_ld);
        run("contiguous(3, long double) MAX", t3, 2, MPI_MAX, 16, 6, ld_gen_mm, ld_max, eq_ld);
        CHECK_MPI(MPI_Type_contiguous(2, MPI_C_DOUBLE_COMPLEX, &c2));
        CHECK_MPI(MPI_Type_commit(&c2));
        run("contiguous(2, double complex) PROD", c2, 2, MPI_PROD, 16, 4, cd_gen, cd_prod, eq_mem);
        CHECK_MPI(MPI_Type_contiguous(2, MPI_2DOUBLE_PRECISION, &p2));
        CHECK_MPI(MPI_Type_commit(&p2));
        run("contiguous(2, 2DOUBLE_PRECISION) MINLOC", p2, 4, MPI_MINLOC, 16, 8, p2d_gen,
            p2d_minloc, eq_mem);
        MPI_Type_free(&t3);
        MPI_Type_free(&c2);
        MPI_Type_free(&p2);
    }

    /* Operations the standard does not define on these types. */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    {
        double _Complex a[2] = {1, 2}, b[2] = {3, 4};
        float _Complex fa = 1, fb = 2;
        long double la = 1, lb = 2;
        expect_op_error("MPI_Allreduce(MPI_C_DOUBLE_COMPLEX, MPI_MAX)",
                        MPI_Allreduce(a, b, 2, MPI_C_DOUBLE_COMPLEX, MPI_MAX, MPI_COMM_WORLD));
        expect_op_error("MPI_Reduce(MPI_DOUBLE_COMPLEX, MPI_MIN)",
                        MPI_Reduce(a, b, 2, MPI_DOUBLE_COMPLEX, MPI_MIN, 0, MPI_COMM_WORLD));
        expect_op_error("MPI_Reduce_local(MPI_C_FLOAT_COMPLEX, MPI_MAX)",
                        MPI_Reduce_local(&fa, &fb, 1, MPI_C_FLOAT_COMPLEX, MPI_MAX));
        expect_op_error("MPI_Reduce_local(MPI_C_FLOAT_COMPLEX, MPI_MAXLOC)",
                        MPI_Reduce_local(&fa, &fb, 1, MPI_C_FLOAT_COMPLEX, MPI_MAXLOC));
        expect_op_error("MPI_Reduce_local(MPI_LONG_DOUBLE, MPI_BAND)",
                        MPI_Reduce_local(&la, &lb, 1, MPI_LONG_DOUBLE, MPI_BAND));
        expect_op_error("MPI_Reduce_local(MPI_LONG_DOUBLE, MPI_MINLOC)",
                        MPI_Reduce_local(&la, &lb, 1, MPI_LONG_DOUBLE, MPI_MINLOC));
        expect_op_error("MPI_Reduce_local(MPI_2REAL, MPI_MAX)",
                        MPI_Reduce_local(&fa, &fb, 1, MPI_2REAL, MPI_MAX));
        /* The error leaves inout alone; a valid op afterwards still works. */
        CHECK_MPI(MPI_Reduce_local(&la, &lb, 1, MPI_LONG_DOUBLE, MPI_SUM));
        CHECK(lb == 3.0L, "long double 1 + 2 = %Lg", lb);
    }
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));

    MPI_Barrier(MPI_COMM_WORLD);
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
