/*
 * gmpi-bench: shared helpers of the benchmark suite (options, buffers in host
 * or CUDA memory, validation patterns, timing, OSU-style output).
 *
 * The suite is plain C over mpi.h, so the same sources build with gmpicc and
 * with any other MPI's mpicc. CUDA buffers are allocated through the CUDA
 * driver API loaded with dlopen at run time (util.c), so the suite builds on
 * machines without CUDA headers and runs without CUDA unless `-d cuda` asks.
 */
#ifndef GB_UTIL_H
#define GB_UTIL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* Where one side's buffers live. */
enum gb_mem { GB_HOST = 'H', GB_DEVICE = 'D', GB_MANAGED = 'M' };

/* What a program accepts beyond the common options. */
enum {
    GB_PT2PT = 1 << 0,  /* -d takes a placement per side (rank 0, rank 1) */
    GB_WINDOW = 1 << 1, /* -W window */
    GB_NOSIZE = 1 << 2, /* no -m (barrier, init, hello) */
    GB_COMPUTE = 1 << 3 /* -t: MPI_Test calls during compute (iallreduce) */
};

struct gb_opts {
    const char *name;      /* program name, e.g. "latency" */
    size_t min_size;       /* -m MIN:MAX, bytes */
    size_t max_size;
    int iters;             /* -i ITERS[:LARGE] */
    int iters_large;       /* iterations above GB_LARGE bytes */
    int warmup;            /* -x WARMUP[:LARGE] */
    int warmup_large;
    int validate;          /* -c: check every byte of every message */
    int window;            /* -W: messages in flight (bw, bibw, mbw_mr) */
    int tests;             /* -t: MPI_Test calls per compute phase (iallreduce) */
    enum gb_mem side[2];   /* -d: placement of rank 0's and rank 1's buffers (pt2pt),
                              side[0] for every rank in collectives */
    int flags;
};

#define GB_LARGE 8192

/* Parses argv (before or after MPI_Init; prints usage and exits on -h or a bad
 * option, from rank 0 only when MPI is initialized). Defaults are given by the
 * caller in *o before the call. Initializes CUDA when -d asks for it, before
 * MPI_Init, as applications do. */
void gb_parse(int argc, char **argv, struct gb_opts *o);

/* MPI_Init plus the checks every program wants (at least `min_ranks`,
 * an even number of ranks when `even`). */
void gb_init(int *argc, char ***argv, const struct gb_opts *o, int min_ranks, int even);

/* Prints the common header (rank 0 only): "# gmpi-bench NAME", the MPI library,
 * the options, then the given column line. */
void gb_header(const struct gb_opts *o, const char *columns);

/* Iterations and warm-up for a size. */
int gb_iters(const struct gb_opts *o, size_t size);
int gb_warmup(const struct gb_opts *o, size_t size);

/* The size sweep: MIN (0, or rounded up to a power of two), then doubling to MAX. */
size_t gb_next_size(size_t size);
size_t gb_first_size(const struct gb_opts *o);
#define GB_SIZES(o, s) for (size_t s = gb_first_size(o); s <= (o)->max_size; s = gb_next_size(s))

/* Buffers in the given memory (aligned to 4 KiB on the host). Never NULL:
 * exits with a message on failure. */
void *gb_alloc(size_t size, enum gb_mem mem);
void gb_free(void *buf, enum gb_mem mem);

/* Fills `size` bytes with the pattern of (seed), or checks them against it;
 * gb_check returns the number of wrong bytes and reports the first one. */
void gb_fill(void *buf, size_t size, enum gb_mem mem, uint32_t seed);
size_t gb_check(const void *buf, size_t size, enum gb_mem mem, uint32_t seed, const char *what);
/* Sets every byte to `value` (to make a missing write visible). */
void gb_set(void *buf, size_t size, enum gb_mem mem, int value);
/* The pattern byte at offset i for seed s. */
static inline unsigned char gb_pattern(uint32_t s, size_t i) {
    return (unsigned char)((s * 2654435761u) >> 24) ^ (unsigned char)(i * 31u + (i >> 8) + s);
}

/* Float arrays for the reductions: gb_fill_floats sets element i to a small
 * integer from (seed, i) so that sums are exact; gb_check_floats compares. */
void gb_fill_floats(void *buf, size_t count, enum gb_mem mem, uint32_t seed);
float gb_float_value(uint32_t seed, size_t i);
size_t gb_check_floats(const void *buf, size_t count, enum gb_mem mem, const float *expect, const char *what);
/* Copies device or host data to host memory (for checks). */
void gb_to_host(void *dst, const void *src, size_t size, enum gb_mem mem);

/* Reports a failure from this rank and aborts the job. */
void gb_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Collective latency summary: every rank passes its average time per call (s);
 * rank 0 prints "size avg min max" in µs. */
void gb_print_coll(size_t size, double per_call, MPI_Comm comm);

/* Busy compute for `seconds`, calling MPI_Test on *req `tests` times spread
 * over it (0: none). Returns the time it took. */
double gb_compute(double seconds, MPI_Request *req, int tests);

/* Exits with the number of validation errors seen on any rank (0 = success). */
int gb_finish(size_t errors);

#endif

/* The bandwidth loop of gb_bw and gb_mbw_mr for one size, between this rank and
 * `peer`: each iteration the sender posts `window` MPI_Isend and the receiver
 * `window` MPI_Irecv, both wait for all, and the receiver answers with a 4-byte
 * acknowledgement. `bufs` holds `nbufs` buffers of at least `size` bytes (one
 * per window slot when validating; otherwise one, reused by every slot as OSU
 * does). Returns the seconds the timed iterations took (the fill and check of
 * validation excluded) and adds wrong bytes to *errors. */
double gb_bw_loop(const struct gb_opts *o, int sender, int peer, char **bufs, int nbufs, enum gb_mem mem,
                  size_t size, size_t *errors);

/* A collective benchmark: `call` runs the operation once on `size` bytes;
 * with validation, `prep` sets the inputs for iteration seed `seed` before each
 * call and `check` returns the wrong bytes/elements after it. */
struct gb_coll_ops {
    void (*call)(void *ctx, size_t size);
    void (*prep)(void *ctx, size_t size, uint32_t seed);
    size_t (*check)(void *ctx, size_t size, uint32_t seed);
};

/* Warm-up, then the timed calls (each rank's average per call, seconds), as
 * OSU's collective benchmarks do; validation fills and checks around each
 * call, outside the timing. */
double gb_coll_loop(const struct gb_opts *o, size_t size, const struct gb_coll_ops *ops, void *ctx,
                    size_t *errors);

/* The element-wise sum over ranks 0..n-1 of gb_float_value(seed + r, i). */
void gb_float_sums(float *out, size_t count, uint32_t seed, int n);

/* The whole size sweep of a collective benchmark: gb_coll_loop and
 * gb_print_coll for every size. */
void gb_coll_sweep(const struct gb_opts *o, const struct gb_coll_ops *ops, void *ctx, size_t *errors);
