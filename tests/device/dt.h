/*
 * tests/device: shared helpers of the GPU test programs (see README.md).
 *
 * The CUDA driver API is loaded with dlopen("libcuda.so.1") (or the file named
 * by DT_LIBCUDA) at run time, as bench/suite/util.c does, so the programs
 * build with gmpicc on machines without CUDA headers. Header-only: each
 * program is one translation unit (`gmpicc -O2 prog.c -o dt_prog -ldl`).
 *
 * Memory kinds: 'H' host (malloc), 'D' device (cuMemAlloc), 'M' managed
 * (cuMemAllocManaged), 'A' stream-ordered (cuMemAllocAsync on a stream,
 * synchronized before use), 'P' pinned host (cuMemHostAlloc); 'X', mixed,
 * is not a kind of its own: dt_rank_kind() makes it 'D' on even ranks and
 * 'H' on odd ranks, so every exchange pairs device and host ranks.
 *
 * Results: dt_result() reduces one case's error count over all ranks; rank 0
 * prints "PASS name" or "FAIL name (N wrong)"; dt_summary() prints
 * "SUMMARY prog: P passed, F failed" and returns the exit status.
 */
#ifndef DT_H
#define DT_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifndef DT_NO_MPI
#include <mpi.h>
#endif

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

static struct {
    int loaded;
    CUcontext ctx;
    CUstream stream;
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxCreate)(CUcontext *, unsigned, CUdevice);
    CUresult (*CtxCreate4)(CUcontext *, void *, unsigned, CUdevice);
    CUresult (*CtxDestroy)(CUcontext);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*CtxSynchronize)(void);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*GetErrorString)(CUresult, const char **);
} cu;

static const char *dt_prog = "dt";

static int dt_rank(void) {
#ifndef DT_NO_MPI
    int init = 0, fin = 0, r = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
#else
    return -1;
#endif
}

__attribute__((format(printf, 1, 2), noreturn)) static void dt_die(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: rank %d: FATAL %s\n", dt_prog, dt_rank(), msg);
    fflush(stderr);
#ifndef DT_NO_MPI
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    exit(1);
}

static void cu_check(CUresult rc, const char *call) {
    if (rc == 0)
        return;
    const char *s = NULL;
    if (cu.GetErrorString)
        cu.GetErrorString(rc, &s);
    dt_die("%s failed: CUDA error %d (%s)", call, rc, s ? s : "unknown");
}

static void *cu_sym(void *lib, const char *name, int required) {
    void *p = dlsym(lib, name);
    if (!p && required)
        dt_die("the CUDA driver library has no %s", name);
    return p;
}

static int dt_local_rank(void) {
    static const char *vars[] = {"GMPI_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                 "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return 0;
}

#define DT_SYM(field, name, req) cu.field = (__typeof__(cu.field))cu_sym(lib, name, req)

/* Loads the driver and makes a context current: the primary context of GPU
 * (local rank % count), or with `own_ctx` a new context (cuCtxCreate), as
 * some applications do before MPI_Init. Also creates one stream. */
static CUdevice dt_cuda_setup(int own_ctx) {
    const char *path = getenv("DT_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        dt_die("cannot load the CUDA driver (%s): %s", path, dlerror());
    DT_SYM(Init, "cuInit", 1);
    DT_SYM(DeviceGetCount, "cuDeviceGetCount", 1);
    DT_SYM(DeviceGet, "cuDeviceGet", 1);
    DT_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 1);
    DT_SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 0);
    DT_SYM(CtxSetCurrent, "cuCtxSetCurrent", 1);
    DT_SYM(CtxCreate, "cuCtxCreate_v2", 0);
    DT_SYM(CtxCreate4, "cuCtxCreate_v4", 0);
    DT_SYM(CtxDestroy, "cuCtxDestroy_v2", 0);
    DT_SYM(MemAlloc, "cuMemAlloc_v2", 1);
    DT_SYM(MemAllocManaged, "cuMemAllocManaged", 1);
    DT_SYM(MemAllocAsync, "cuMemAllocAsync", 0);
    DT_SYM(MemFreeAsync, "cuMemFreeAsync", 0);
    DT_SYM(MemFree, "cuMemFree_v2", 1);
    DT_SYM(MemHostAlloc, "cuMemHostAlloc", 1);
    DT_SYM(MemFreeHost, "cuMemFreeHost", 1);
    DT_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2", 1);
    DT_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2", 1);
    DT_SYM(MemcpyDtoD, "cuMemcpyDtoD_v2", 0);
    DT_SYM(MemsetD8, "cuMemsetD8_v2", 1);
    DT_SYM(CtxSynchronize, "cuCtxSynchronize", 1);
    DT_SYM(StreamCreate, "cuStreamCreate", 0);
    DT_SYM(StreamDestroy, "cuStreamDestroy_v2", 0);
    DT_SYM(StreamSynchronize, "cuStreamSynchronize", 1);
    DT_SYM(GetErrorString, "cuGetErrorString", 0);
    cu_check(cu.Init(0), "cuInit");
    int n = 0;
    cu_check(cu.DeviceGetCount(&n), "cuDeviceGetCount");
    if (n < 1)
        dt_die("no CUDA device");
    CUdevice dev;
    cu_check(cu.DeviceGet(&dev, dt_local_rank() % n), "cuDeviceGet");
    if (own_ctx) {
        if (cu.CtxCreate)
            cu_check(cu.CtxCreate(&cu.ctx, 0, dev), "cuCtxCreate_v2");
        else if (cu.CtxCreate4)
            cu_check(cu.CtxCreate4(&cu.ctx, NULL, 0, dev), "cuCtxCreate_v4");
        else
            dt_die("the CUDA driver library has no cuCtxCreate");
    } else {
        CUcontext ctx;
        cu_check(cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
        cu_check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
    }
    if (cu.StreamCreate)
        cu_check(cu.StreamCreate(&cu.stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
    cu.loaded = 1;
    return dev;
}

/* Destroys the stream (and an own context): after MPI_Finalize. */
static void dt_cuda_teardown(void) {
    if (!cu.loaded)
        return;
    if (cu.stream && cu.StreamDestroy)
        cu_check(cu.StreamDestroy(cu.stream), "cuStreamDestroy");
    cu.stream = NULL;
    if (cu.ctx && cu.CtxDestroy)
        cu_check(cu.CtxDestroy(cu.ctx), "cuCtxDestroy");
    cu.ctx = NULL;
}

/* ---- buffers ------------------------------------------------------------ */

static const char *dt_kind_name(char k) {
    switch (k) {
    case 'H':
        return "host";
    case 'D':
        return "device";
    case 'M':
        return "managed";
    case 'A':
        return "async";
    case 'P':
        return "pinned";
    case 'X':
        return "mixed";
    }
    return "?";
}

/* The kind this rank uses for `k`: 'X' (mixed) is device memory on even
 * ranks and host memory on odd ranks; any other kind is itself. After
 * MPI_Init. */
static char dt_rank_kind(char k) {
    if (k != 'X')
        return k;
    return dt_rank() % 2 ? 'H' : 'D';
}

static int dt_kind_available(char k) {
    return k != 'A' || (cu.MemAllocAsync && cu.MemFreeAsync && cu.stream);
}

static void *dt_alloc(size_t size, char kind) {
    size_t n = size ? size : 1;
    CUdeviceptr d = 0;
    void *p = NULL;
    switch (kind) {
    case 'H':
        if (posix_memalign(&p, 64, n))
            dt_die("cannot allocate %zu bytes of host memory", n);
        return p;
    case 'P':
        cu_check(cu.MemHostAlloc(&p, n, 0), "cuMemHostAlloc");
        return p;
    case 'D':
        cu_check(cu.MemAlloc(&d, n), "cuMemAlloc");
        break;
    case 'M':
        cu_check(cu.MemAllocManaged(&d, n, 1 /* CU_MEM_ATTACH_GLOBAL */), "cuMemAllocManaged");
        break;
    case 'A':
        if (!dt_kind_available('A'))
            dt_die("this driver has no cuMemAllocAsync");
        cu_check(cu.MemAllocAsync(&d, n, cu.stream), "cuMemAllocAsync");
        cu_check(cu.StreamSynchronize(cu.stream), "cuStreamSynchronize");
        break;
    default:
        dt_die("unknown memory kind '%c'", kind);
    }
    return (void *)(uintptr_t)d;
}

static void dt_free(void *buf, char kind) {
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)buf;
    switch (kind) {
    case 'H':
        free(buf);
        return;
    case 'P':
        cu_check(cu.MemFreeHost(buf), "cuMemFreeHost");
        return;
    case 'A':
        cu_check(cu.MemFreeAsync(d, cu.stream), "cuMemFreeAsync");
        cu_check(cu.StreamSynchronize(cu.stream), "cuStreamSynchronize");
        return;
    default:
        cu_check(cu.MemFree(d), "cuMemFree");
    }
}

static int dt_on_host(char kind) {
    return kind == 'H' || kind == 'P';
}

/* Copies between a buffer of any kind and host memory.
 *
 * Both synchronize the context around the copy. cuMemcpyHtoD from pageable
 * memory may return before the DMA into device memory has finished, so
 * without the synchronization a fill could still be in flight when the MPI
 * call (or a peer, through CUDA IPC, on another stream) reads the buffer:
 * the test's race, not gmpi's. Likewise a readback after the MPI call must
 * not overtake work the runtime queued on its own (non-blocking) streams. */
static void dt_put(void *dst, const void *src, size_t n, char kind) {
    if (!n)
        return;
    if (dt_on_host(kind)) {
        memcpy(dst, src, n);
        return;
    }
    cu_check(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, n), "cuMemcpyHtoD");
    cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
}

static void dt_get(void *dst, const void *src, size_t n, char kind) {
    if (!n)
        return;
    if (dt_on_host(kind)) {
        memcpy(dst, src, n);
        return;
    }
    cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
    cu_check(cu.MemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, n), "cuMemcpyDtoH");
}

static void dt_memset(void *dst, int v, size_t n, char kind) {
    if (!n)
        return;
    if (dt_on_host(kind))
        memset(dst, v, n);
    else {
        cu_check(cu.MemsetD8((CUdeviceptr)(uintptr_t)dst, (unsigned char)v, n), "cuMemsetD8");
        cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
    }
}

/* A host scratch buffer reused between calls. */
static unsigned char *dt_scratch(size_t n) {
    static unsigned char *s;
    static size_t cap;
    if (n > cap) {
        free(s);
        s = malloc(n ? n : 1);
        if (!s)
            dt_die("out of host memory (%zu bytes)", n);
        cap = n;
    }
    return s;
}

/* The byte pattern of (seed, i): changes in every byte position and seed. */
static inline unsigned char dt_pattern(uint32_t seed, size_t i) {
    uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u + (uint32_t)(i >> 16) * 97u;
    return (unsigned char)(x >> 24 ^ x >> 8 ^ seed);
}

static void dt_fill(void *buf, size_t n, char kind, uint32_t seed) {
    unsigned char *p = dt_on_host(kind) ? buf : dt_scratch(n);
    for (size_t i = 0; i < n; i++)
        p[i] = dt_pattern(seed, i);
    if (!dt_on_host(kind))
        dt_put(buf, p, n, kind);
}

/* Number of bytes of [buf, buf+n) that differ from the pattern of seed; the
 * first one is reported with `what`. */
static size_t dt_check(const void *buf, size_t n, char kind, uint32_t seed, const char *what) {
    const unsigned char *p = buf;
    if (!dt_on_host(kind)) {
        unsigned char *s = dt_scratch(n);
        dt_get(s, buf, n, kind);
        p = s;
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char want = dt_pattern(seed, i);
        if (p[i] != want) {
            if (!bad)
                fprintf(stderr, "%s: rank %d: %s: byte %zu of %zu is %u, expected %u\n", dt_prog, dt_rank(), what, i,
                        n, p[i], want);
            bad++;
        }
    }
    return bad;
}

/* Bytes of [buf, buf+n) not equal to v. */
static size_t dt_check_value(const void *buf, size_t n, char kind, unsigned char v, const char *what) {
    const unsigned char *p = buf;
    if (!dt_on_host(kind)) {
        unsigned char *s = dt_scratch(n);
        dt_get(s, buf, n, kind);
        p = s;
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) {
            if (!bad)
                fprintf(stderr, "%s: rank %d: %s: byte %zu of %zu is %u, expected %u (untouched)\n", dt_prog,
                        dt_rank(), what, i, n, p[i], v);
            bad++;
        }
    return bad;
}

static double dt_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Parses a size with an optional K/M/G suffix (powers of two). */
static size_t dt_parse_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'k':
    case 'K':
        v <<= 10;
        break;
    case 'm':
    case 'M':
        v <<= 20;
        break;
    case 'g':
    case 'G':
        v <<= 30;
        break;
    case 0:
        break;
    default:
        fprintf(stderr, "%s: bad size '%s'\n", dt_prog, s);
        exit(2);
    }
    return (size_t)v;
}

/* ---- results ------------------------------------------------------------ */

#ifndef DT_NO_MPI
static int dt_passed, dt_failed;

/* Reduces one case's local error count over the world; rank 0 prints. */
static int dt_result(size_t local_errors, const char *fmt, ...) {
    unsigned long long mine = local_errors, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (r == 0) {
        char name[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(name, sizeof name, fmt, ap);
        va_end(ap);
        if (all)
            printf("FAIL %s %s (%llu wrong)\n", dt_prog, name, all);
        else
            printf("PASS %s %s\n", dt_prog, name);
        fflush(stdout);
    }
    if (all)
        dt_failed++;
    else
        dt_passed++;
    return all != 0;
}

/* Prints the summary (rank 0) and returns the exit status. Call before MPI_Finalize. */
static int dt_summary(void) {
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r == 0) {
        printf("SUMMARY %s np=%d: %d passed, %d failed\n", dt_prog, n, dt_passed, dt_failed);
        fflush(stdout);
    }
    return dt_failed ? 1 : 0;
}
#endif

#endif
