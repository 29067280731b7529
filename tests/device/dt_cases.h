/*
 * tests/device: test cases shared by several programs (ring exchange,
 * allreduce against a host reference). Include after dt.h.
 */
#ifndef DT_CASES_H
#define DT_CASES_H

#include "dt.h"

#define DT_GUARD 64   /* bytes after each receive buffer that must stay untouched */
#define DT_GUARD_BYTE 0xa5

/* One ring exchange: every rank sends `size` bytes of kind `sk` to rank+1 and
 * receives into kind `rk` from rank-1 (blocking: even ranks send first, odd
 * ranks receive first, MPI_Sendrecv when the world is odd; non-blocking:
 * Irecv + Isend + Waitall). Checks every byte, the received count and a guard
 * after the receive buffer. Returns the local error count. */
static size_t dt_ring(size_t size, char sk, char rk, int nonblocking, uint32_t seed) {
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int to = (r + 1) % n, from = (r + n - 1) % n;
    char *s = dt_alloc(size, sk);
    char *d = dt_alloc(size + DT_GUARD, rk);
    dt_fill(s, size, sk, seed + (uint32_t)r);
    dt_memset(d, DT_GUARD_BYTE, size + DT_GUARD, rk);
    if (size > (size_t)INT32_MAX)
        dt_die("size too large");
    int cnt = (int)size;
    MPI_Status st;
    if (nonblocking) {
        MPI_Request q[2];
        MPI_Status sts[2];
        MPI_Irecv(d, cnt, MPI_BYTE, from, 7, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(s, cnt, MPI_BYTE, to, 7, MPI_COMM_WORLD, &q[1]);
        MPI_Waitall(2, q, sts);
        st = sts[0];
    } else if (n % 2) {
        MPI_Sendrecv(s, cnt, MPI_BYTE, to, 7, d, cnt, MPI_BYTE, from, 7, MPI_COMM_WORLD, &st);
    } else if (r % 2 == 0) {
        MPI_Send(s, cnt, MPI_BYTE, to, 7, MPI_COMM_WORLD);
        MPI_Recv(d, cnt, MPI_BYTE, from, 7, MPI_COMM_WORLD, &st);
    } else {
        MPI_Recv(d, cnt, MPI_BYTE, from, 7, MPI_COMM_WORLD, &st);
        MPI_Send(s, cnt, MPI_BYTE, to, 7, MPI_COMM_WORLD);
    }
    size_t bad = 0;
    int got = -1;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (got != cnt || st.MPI_SOURCE != from || st.MPI_TAG != 7) {
        fprintf(stderr, "%s: rank %d: status count %d source %d tag %d, expected %d %d 7\n", dt_prog, r, got,
                st.MPI_SOURCE, st.MPI_TAG, cnt, from);
        bad++;
    }
    bad += dt_check(d, size, rk, seed + (uint32_t)from, "received data");
    /* the guard: read back separately (dt_check used the scratch buffer) */
    unsigned char g[DT_GUARD];
    dt_get(g, d + size, DT_GUARD, rk);
    bad += dt_check_value(g, DT_GUARD, 'H', DT_GUARD_BYTE, "guard after the receive buffer");
    /* the send buffer must be unchanged */
    bad += dt_check(s, size, sk, seed + (uint32_t)r, "send buffer after the send");
    dt_free(s, sk);
    dt_free(d, rk);
    return bad;
}

/* ---- typed reductions ----------------------------------------------------- */

/* The first T_NBASIC types are the set most programs sweep (int, long, float,
 * double); dt_ops sweeps them all: every C integer type of fixed width,
 * MPI_C_BOOL, both floating-point types, MPICH's half precision
 * MPIX_C_FLOAT16 (C's _Float16) and bfloat16 MPIX_BFLOAT16 (the upper half
 * of a float, kept as its bits): gmpi's device kernels cover exactly these. */
enum dt_type {
    T_INT, T_LONG, T_FLOAT, T_DOUBLE,
    T_INT8, T_UINT8, T_INT16, T_UINT16, T_INT32, T_UINT32, T_INT64, T_UINT64, T_BOOL, T_F16, T_BF16,
    T_NTYPES
};
#define T_NBASIC 4
enum dt_op { O_SUM, O_PROD, O_MIN, O_MAX, O_LAND, O_LOR, O_LXOR, O_BAND, O_BOR, O_BXOR, O_NOPS };

static const char *dt_type_names[] = {"int",    "long",  "float",  "double", "int8",   "uint8", "int16",
                                      "uint16", "int32", "uint32", "int64",  "uint64", "bool", "f16", "bf16"};
static const char *dt_op_names[] = {"sum", "prod", "min", "max", "land", "lor", "lxor", "band", "bor", "bxor"};
static const size_t dt_type_sizes[] = {sizeof(int),      sizeof(long),     sizeof(float),   sizeof(double),
                                       sizeof(int8_t),   sizeof(uint8_t),  sizeof(int16_t), sizeof(uint16_t),
                                       sizeof(int32_t),  sizeof(uint32_t), sizeof(int64_t), sizeof(uint64_t),
                                       sizeof(_Bool),    sizeof(_Float16), sizeof(uint16_t)};

static MPI_Datatype dt_mpi_type(int t) {
    switch (t) {
    case T_INT:
        return MPI_INT;
    case T_LONG:
        return MPI_LONG;
    case T_FLOAT:
        return MPI_FLOAT;
    case T_DOUBLE:
        return MPI_DOUBLE;
    case T_INT8:
        return MPI_INT8_T;
    case T_UINT8:
        return MPI_UINT8_T;
    case T_INT16:
        return MPI_INT16_T;
    case T_UINT16:
        return MPI_UINT16_T;
    case T_INT32:
        return MPI_INT32_T;
    case T_UINT32:
        return MPI_UINT32_T;
    case T_INT64:
        return MPI_INT64_T;
    case T_UINT64:
        return MPI_UINT64_T;
    case T_F16:
        return MPIX_C_FLOAT16;
    case T_BF16:
        return MPIX_BFLOAT16;
    default:
        return MPI_C_BOOL;
    }
}

static MPI_Op dt_mpi_op(int o) {
    static MPI_Op ops[O_NOPS];
    ops[O_SUM] = MPI_SUM, ops[O_PROD] = MPI_PROD, ops[O_MIN] = MPI_MIN, ops[O_MAX] = MPI_MAX;
    ops[O_LAND] = MPI_LAND, ops[O_LOR] = MPI_LOR, ops[O_LXOR] = MPI_LXOR;
    ops[O_BAND] = MPI_BAND, ops[O_BOR] = MPI_BOR, ops[O_BXOR] = MPI_BXOR;
    return ops[o];
}

static int dt_is_float(int t) {
    return t == T_FLOAT || t == T_DOUBLE || t == T_F16 || t == T_BF16;
}

static int dt_is_unsigned(int t) {
    return t == T_UINT8 || t == T_UINT16 || t == T_UINT32 || t == T_UINT64;
}

/* Whether MPI defines op on type (MPI 4.1, 6.9.2): sum, prod, min, max on
 * integers and floating point; logical ops on integers and C_BOOL (C_BOOL:
 * logical ops only); bitwise ops on integers. */
static int dt_op_valid(int o, int t) {
    if (t == T_BOOL)
        return o == O_LAND || o == O_LOR || o == O_LXOR;
    return o <= O_MAX || !dt_is_float(t);
}

/* The contribution of `rank` at element i: an integer value exact in type t
 * whose reduction over up to 16 ranks stays in range (no overflow, and exact
 * in float and double), so a host reference in long long is the answer. */
static long long dt_value(int t, int o, int rank, size_t i, uint32_t seed) {
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)rank * 40503u ^ seed * 97u;
    h ^= h >> 13;
    if (t == T_F16 || t == T_BF16) {
        /* half precision holds every integer up to 2048 exactly, bfloat16
         * up to 256 */
        int bf = t == T_BF16;
        switch (o) {
        case O_SUM:
            return bf ? (long long)(h % 15) - 7 : (long long)(h % 201) - 100;
        case O_PROD: {
            long long f = rank < 10 ? (long long)(1 + h % 2) : 1;
            return h % 5 == 0 ? -f : f;
        }
        default:
            return bf ? (long long)(h % 513) - 256 : (long long)(h % 4001) - 2000;
        }
    }
    int u = dt_is_unsigned(t);
    int bits = (int)dt_type_sizes[t] * 8;
    switch (o) {
    case O_SUM:
        if (bits == 8)
            return u ? (long long)(h % 16) : (long long)(h % 15) - 7;
        return u ? (long long)(h % 2001) : (long long)(h % 2001) - 1000;
    case O_PROD: {
        /* factors 1 and 2 (and -1 for signed types); a 2 only from the first
         * ranks, few enough that the product fits the type */
        int twos = t == T_FLOAT ? 23 : t == T_DOUBLE ? 52 : bits - 2 + u;
        long long f = rank < twos ? (long long)(1 + h % 2) : 1;
        return !u && h % 5 == 0 ? -f : f;
    }
    case O_MIN:
    case O_MAX:
        if (bits == 8)
            return u ? (long long)(h % 251) : (long long)(h % 201) - 100;
        if (bits == 16)
            return u ? (long long)(h % 65001) : (long long)(h % 60001) - 30000;
        return u ? (long long)(h % 100001) : (long long)(h % 100001) - 50000;
    case O_LAND:
    case O_LOR:
    case O_LXOR:
        if (t == T_BOOL)
            return (h % 4) != 0; /* C_BOOL holds 0 or 1 */
        return (h % 4) != 0 ? (long long)(h % 3) : 0; /* mostly true, some false */
    default:
        /* bitwise: every bit of the type, the sign bit included */
        if (bits == 8)
            return u ? (long long)(h & 0xff) : (long long)(int8_t)(h & 0xff);
        if (bits == 16)
            return u ? (long long)(h & 0xffff) : (long long)(int16_t)(h & 0xffff);
        if (bits == 32)
            return u ? (long long)h : (long long)(int32_t)h;
        return (long long)((uint64_t)h << 32 ^ (uint64_t)(h * 2246822519u));
    }
}

static long long dt_combine(int o, long long a, long long b) {
    switch (o) {
    case O_SUM:
        return a + b;
    case O_PROD:
        return a * b;
    case O_MIN:
        return a < b ? a : b;
    case O_MAX:
        return a > b ? a : b;
    case O_LAND:
        return a && b;
    case O_LOR:
        return a || b;
    case O_LXOR:
        return !a != !b;
    case O_BAND:
        return a & b;
    case O_BOR:
        return a | b;
    default:
        return a ^ b;
    }
}

/* Writes v as element i of a typed array. */
static void dt_store(void *p, int t, size_t i, long long v) {
    switch (t) {
    case T_INT:
        ((int *)p)[i] = (int)v;
        break;
    case T_LONG:
        ((long *)p)[i] = (long)v;
        break;
    case T_FLOAT:
        ((float *)p)[i] = (float)v;
        break;
    case T_DOUBLE:
        ((double *)p)[i] = (double)v;
        break;
    case T_INT8:
        ((int8_t *)p)[i] = (int8_t)v;
        break;
    case T_UINT8:
        ((uint8_t *)p)[i] = (uint8_t)v;
        break;
    case T_INT16:
        ((int16_t *)p)[i] = (int16_t)v;
        break;
    case T_UINT16:
        ((uint16_t *)p)[i] = (uint16_t)v;
        break;
    case T_INT32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    case T_UINT32:
        ((uint32_t *)p)[i] = (uint32_t)v;
        break;
    case T_INT64:
        ((int64_t *)p)[i] = (int64_t)v;
        break;
    case T_UINT64:
        ((uint64_t *)p)[i] = (uint64_t)v;
        break;
    case T_F16:
        ((_Float16 *)p)[i] = (_Float16)v;
        break;
    case T_BF16: {
        float f = (float)v; /* exact: |v| <= 256 or a power of two */
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        break;
    }
    default:
        ((_Bool *)p)[i] = v != 0;
    }
}

/* Element i of a typed array, printed (for error messages). */
static const char *dt_show(const void *p, int t, size_t i, char *buf, size_t len) {
    switch (t) {
    case T_FLOAT:
        snprintf(buf, len, "%g", (double)((const float *)p)[i]);
        break;
    case T_DOUBLE:
        snprintf(buf, len, "%g", ((const double *)p)[i]);
        break;
    case T_F16:
        snprintf(buf, len, "%g", (double)((const _Float16 *)p)[i]);
        break;
    case T_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        snprintf(buf, len, "%g", (double)f);
        break;
    }
    case T_UINT64:
        snprintf(buf, len, "%llu", (unsigned long long)((const uint64_t *)p)[i]);
        break;
    default: {
        long long v = 0;
        switch (t) {
        case T_INT:
            v = ((const int *)p)[i];
            break;
        case T_LONG:
            v = ((const long *)p)[i];
            break;
        case T_INT8:
            v = ((const int8_t *)p)[i];
            break;
        case T_UINT8:
            v = ((const uint8_t *)p)[i];
            break;
        case T_INT16:
            v = ((const int16_t *)p)[i];
            break;
        case T_UINT16:
            v = ((const uint16_t *)p)[i];
            break;
        case T_INT32:
            v = ((const int32_t *)p)[i];
            break;
        case T_UINT32:
            v = ((const uint32_t *)p)[i];
            break;
        case T_INT64:
            v = ((const int64_t *)p)[i];
            break;
        default: /* bool: the byte, so a 2 shows */
            v = ((const unsigned char *)p)[i];
        }
        snprintf(buf, len, "%lld", v);
    }
    }
    return buf;
}

/* Fills a host array with rank's contributions. */
static void dt_fill_values(void *p, int t, int o, int rank, size_t count, uint32_t seed) {
    for (size_t i = 0; i < count; i++)
        dt_store(p, t, i, dt_value(t, o, rank, i, seed));
}

/* The reduction over ranks [0, upto] of element i. Logical ops give 0/1. */
static long long dt_reference(int t, int o, int upto, size_t i, uint32_t seed) {
    long long acc = dt_value(t, o, 0, i, seed);
    if (o >= O_LAND && o <= O_LXOR)
        acc = acc != 0;
    for (int r = 1; r <= upto; r++)
        acc = dt_combine(o, acc, dt_value(t, o, r, i, seed));
    return acc;
}

/* Elements of a received host array differing from the reference of ranks
 * [0, upto] (starting at element `first` of the full vector). */
static size_t dt_check_values(const void *p, int t, int o, int upto, size_t first, size_t count, uint32_t seed,
                              const char *what) {
    size_t bad = 0;
    unsigned char want[sizeof(double)];
    for (size_t i = 0; i < count; i++) {
        dt_store(want, t, 0, dt_reference(t, o, upto, first + i, seed));
        const unsigned char *got = (const unsigned char *)p + i * dt_type_sizes[t];
        if (memcmp(got, want, dt_type_sizes[t])) {
            if (!bad) {
                char g[32], w[32];
                fprintf(stderr, "%s: rank %d: %s: element %zu of %zu is %s, expected %s\n", dt_prog, dt_rank(), what,
                        i, count, dt_show(got, t, 0, g, sizeof g), dt_show(want, t, 0, w, sizeof w));
            }
            bad++;
        }
    }
    return bad;
}

/* MPI_Allreduce (or with `nonblocking` MPI_Iallreduce + MPI_Wait; with
 * `in_place` MPI_IN_PLACE) of `count` elements in memory of kind `k`, checked
 * against the host reference. Returns the local error count. */
static size_t dt_allreduce(int t, int o, size_t count, char k, int nonblocking, int in_place, uint32_t seed) {
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t bytes = count * dt_type_sizes[t];
    unsigned char *h = malloc(bytes ? bytes : 1);
    if (!h)
        dt_die("out of host memory");
    dt_fill_values(h, t, o, r, count, seed);
    void *s = dt_alloc(bytes, k);
    void *d = in_place ? s : dt_alloc(bytes + DT_GUARD, k);
    dt_put(s, h, bytes, k);
    if (!in_place)
        dt_memset(d, DT_GUARD_BYTE, bytes + DT_GUARD, k);
    const void *sb = in_place ? MPI_IN_PLACE : s;
    if (nonblocking) {
        MPI_Request q;
        MPI_Iallreduce(sb, d, (int)count, dt_mpi_type(t), dt_mpi_op(o), MPI_COMM_WORLD, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
    } else {
        MPI_Allreduce(sb, d, (int)count, dt_mpi_type(t), dt_mpi_op(o), MPI_COMM_WORLD);
    }
    dt_get(h, d, bytes, k);
    char what[128];
    snprintf(what, sizeof what, "allreduce %s %s", dt_op_names[o], dt_type_names[t]);
    size_t bad = dt_check_values(h, t, o, n - 1, 0, count, seed, what);
    if (!in_place) {
        unsigned char g[DT_GUARD];
        dt_get(g, (char *)d + bytes, DT_GUARD, k);
        bad += dt_check_value(g, DT_GUARD, 'H', DT_GUARD_BYTE, "guard after the result");
        dt_free(d, k);
    }
    dt_free(s, k);
    free(h);
    return bad;
}

#endif
