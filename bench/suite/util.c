/*
 * gmpi-bench shared helpers: see util.h.
 *
 * CUDA: the driver API is loaded with dlopen("libcuda.so.1") (or the path in
 * GB_LIBCUDA) only when `-d` names device or managed memory. Each rank uses
 * device (local rank % device count), the local rank read from the variables
 * gmpirun, Open MPI, MPICH/Hydra, MVAPICH and Slurm export.
 */
#define _GNU_SOURCE
#include "util.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- CUDA driver API, loaded at run time -------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static struct {
    int loaded;
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*CtxSynchronize)(void);
    CUresult (*GetErrorString)(CUresult, const char **);
} cu;

static int mpi_rank(void) {
    int init = 0, fin = 0, r = -1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

void gb_die(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int r = mpi_rank();
    if (r >= 0)
        fprintf(stderr, "gmpi-bench: rank %d: %s\n", r, msg);
    else
        fprintf(stderr, "gmpi-bench: %s\n", msg);
    fflush(stderr);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void cu_check(CUresult rc, const char *call) {
    if (rc == 0)
        return;
    const char *s = NULL;
    if (cu.GetErrorString)
        cu.GetErrorString(rc, &s);
    gb_die("%s failed: CUDA error %d (%s)", call, rc, s ? s : "unknown");
}

static void *cu_sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p)
        gb_die("the CUDA driver library has no %s", name);
    return p;
}

static int local_rank(void) {
    static const char *vars[] = {"GMPI_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                 "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return 0;
}

static void cuda_setup(void) {
    if (cu.loaded)
        return;
    const char *path = getenv("GB_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        gb_die("-d cuda: cannot load the CUDA driver (%s): %s", path, dlerror());
    cu.Init = (CUresult(*)(unsigned))cu_sym(lib, "cuInit");
    cu.DeviceGetCount = (CUresult(*)(int *))cu_sym(lib, "cuDeviceGetCount");
    cu.DeviceGet = (CUresult(*)(CUdevice *, int))cu_sym(lib, "cuDeviceGet");
    cu.DevicePrimaryCtxRetain = (CUresult(*)(CUcontext *, CUdevice))cu_sym(lib, "cuDevicePrimaryCtxRetain");
    cu.CtxSetCurrent = (CUresult(*)(CUcontext))cu_sym(lib, "cuCtxSetCurrent");
    cu.MemAlloc = (CUresult(*)(CUdeviceptr *, size_t))cu_sym(lib, "cuMemAlloc_v2");
    cu.MemAllocManaged = (CUresult(*)(CUdeviceptr *, size_t, unsigned))cu_sym(lib, "cuMemAllocManaged");
    cu.MemFree = (CUresult(*)(CUdeviceptr))cu_sym(lib, "cuMemFree_v2");
    cu.MemcpyHtoD = (CUresult(*)(CUdeviceptr, const void *, size_t))cu_sym(lib, "cuMemcpyHtoD_v2");
    cu.MemcpyDtoH = (CUresult(*)(void *, CUdeviceptr, size_t))cu_sym(lib, "cuMemcpyDtoH_v2");
    cu.MemsetD8 = (CUresult(*)(CUdeviceptr, unsigned char, size_t))cu_sym(lib, "cuMemsetD8_v2");
    cu.CtxSynchronize = (CUresult(*)(void))cu_sym(lib, "cuCtxSynchronize");
    cu.GetErrorString = (CUresult(*)(CUresult, const char **))dlsym(lib, "cuGetErrorString");
    cu_check(cu.Init(0), "cuInit");
    int n = 0;
    cu_check(cu.DeviceGetCount(&n), "cuDeviceGetCount");
    if (n < 1)
        gb_die("-d cuda: no CUDA device");
    CUdevice dev;
    cu_check(cu.DeviceGet(&dev, local_rank() % n), "cuDeviceGet");
    CUcontext ctx;
    cu_check(cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    cu_check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu.loaded = 1;
}

/* ---- options ------------------------------------------------------------ */

static void usage(const struct gb_opts *o, FILE *f) {
    fprintf(f, "usage: gb_%s [options]\n", o->name);
    if (!(o->flags & GB_NOSIZE))
        fprintf(f, "  -m MIN:MAX      message sizes in bytes, powers of two from MIN (default %zu:%zu)\n",
                o->min_size, o->max_size);
    fprintf(f, "  -i ITERS[:LARGE] timed iterations; LARGE above %d bytes (default %d:%d)\n", GB_LARGE, o->iters,
            o->iters_large);
    fprintf(f, "  -x WARM[:LARGE] untimed warm-up iterations (default %d:%d)\n", o->warmup, o->warmup_large);
    if (o->flags & GB_WINDOW)
        fprintf(f, "  -W WINDOW       non-blocking messages in flight per iteration (default %d)\n", o->window);
    if (o->flags & GB_COMPUTE)
        fprintf(f, "  -t TESTS        MPI_Test calls spread over each compute phase (default %d)\n", o->tests);
    fprintf(f, "  -c              validate: check every byte of every message (timing excludes the checks)\n");
    if (o->flags & GB_PT2PT)
        fprintf(f, "  -d host|cuda|managed [X Y]  buffer placement; X, Y in {H,D,M} give rank 0's and\n"
                   "                  rank 1's side (default: host = H H; cuda = D D; managed = M M)\n");
    else
        fprintf(f, "  -d host|cuda|managed  buffer placement of every rank (default host)\n");
    fprintf(f, "  -h              this help\n"
               "CUDA buffers use the driver API loaded at run time (libcuda.so.1, or GB_LIBCUDA);\n"
               "each rank uses device (local rank %% devices).\n");
}

static enum gb_mem mem_letter(const char *s, const struct gb_opts *o) {
    if (!strcmp(s, "H") || !strcmp(s, "h"))
        return GB_HOST;
    if (!strcmp(s, "D") || !strcmp(s, "d"))
        return GB_DEVICE;
    if (!strcmp(s, "M") || !strcmp(s, "m"))
        return GB_MANAGED;
    fprintf(stderr, "gb_%s: buffer side '%s' is not H, D or M\n", o->name, s);
    exit(2);
}

static int parse_pair(const char *s, long *a, long *b, int allow_single) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || x < 0)
        return -1;
    if (*end == 0) {
        if (!allow_single)
            return -1;
        *b = x;
        return 1;
    }
    if (*end != ':')
        return -1;
    const char *t = end + 1;
    long y = strtol(t, &end, 10);
    if (errno || end == t || *end || y < 0)
        return -1;
    *a = x;
    *b = y;
    return 2;
}

void gb_parse(int argc, char **argv, struct gb_opts *o) {
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(o, stdout);
            exit(0);
        } else if (!strcmp(a, "-c")) {
            o->validate = 1;
        } else if (!strcmp(a, "-m") && v && !(o->flags & GB_NOSIZE)) {
            long lo = (long)o->min_size, hi;
            int n = parse_pair(v, &lo, &hi, 1);
            if (n < 0 || lo > hi) {
                fprintf(stderr, "gb_%s: -m wants MIN:MAX bytes with MIN <= MAX, not '%s'\n", o->name, v);
                exit(2);
            }
            if (n == 1 && lo > hi)
                lo = hi;
            o->min_size = (size_t)lo;
            o->max_size = (size_t)hi;
            i++;
        } else if (!strcmp(a, "-m") && v) {
            i++; /* no message size here (barrier, init, hello): accepted so that drivers can pass
                    the same options to every program, and ignored */
        } else if ((!strcmp(a, "-i") || !strcmp(a, "-x")) && v) {
            long x = -1, y;
            int n = parse_pair(v, &x, &y, 1);
            if (n < 0 || (n == 2 && x < 0) || y < 0 || y > 1000000000L ||
                (a[1] == 'i' && (y < 1 || (n == 2 && x < 1)))) {
                fprintf(stderr, "gb_%s: %s wants a count or COUNT:LARGE, not '%s'\n", o->name, a, v);
                exit(2);
            }
            if (n == 1)
                x = y, y = a[1] == 'i' ? (x / 10 > 0 ? x / 10 : 1) : x / 10;
            if (a[1] == 'i')
                o->iters = (int)x, o->iters_large = (int)y;
            else
                o->warmup = (int)x, o->warmup_large = (int)y;
            i++;
        } else if (!strcmp(a, "-W") && v && (o->flags & GB_WINDOW)) {
            long w = strtol(v, NULL, 10);
            if (w < 1 || w > 4096) {
                fprintf(stderr, "gb_%s: -W wants 1..4096, not '%s'\n", o->name, v);
                exit(2);
            }
            o->window = (int)w;
            i++;
        } else if (!strcmp(a, "-t") && v && (o->flags & GB_COMPUTE)) {
            long t = strtol(v, NULL, 10);
            if (t < 0 || t > 1000000) {
                fprintf(stderr, "gb_%s: -t wants 0..1000000, not '%s'\n", o->name, v);
                exit(2);
            }
            o->tests = (int)t;
            i++;
        } else if (!strcmp(a, "-d") && v) {
            enum gb_mem m;
            if (!strcmp(v, "host"))
                m = GB_HOST;
            else if (!strcmp(v, "cuda"))
                m = GB_DEVICE;
            else if (!strcmp(v, "managed"))
                m = GB_MANAGED;
            else {
                fprintf(stderr, "gb_%s: -d wants host, cuda or managed, not '%s'\n", o->name, v);
                exit(2);
            }
            o->side[0] = o->side[1] = m;
            i++;
            if ((o->flags & GB_PT2PT) && i + 2 < argc && argv[i + 1][0] != '-' && argv[i + 2][0] != '-') {
                o->side[0] = mem_letter(argv[i + 1], o);
                o->side[1] = mem_letter(argv[i + 2], o);
                i += 2;
            }
        } else {
            fprintf(stderr, "gb_%s: unknown or incomplete option '%s'\n", o->name, a);
            bad = 1;
        }
    }
    if (bad) {
        usage(o, stderr);
        exit(2);
    }
    if (o->side[0] != GB_HOST || o->side[1] != GB_HOST)
        cuda_setup();
}

void gb_init(int *argc, char ***argv, const struct gb_opts *o, int min_ranks, int even) {
    MPI_Init(argc, argv);
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n < min_ranks)
        gb_die("gb_%s needs at least %d ranks (has %d)", o->name, min_ranks, n);
    if (even && n % 2)
        gb_die("gb_%s needs an even number of ranks (has %d)", o->name, n);
}

static const char *mem_name(enum gb_mem m) {
    return m == GB_HOST ? "H" : m == GB_DEVICE ? "D" : "M";
}

void gb_header(const struct gb_opts *o, const char *columns) {
    if (mpi_rank() != 0)
        return;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[len < 0 ? 0 : len > MPI_MAX_LIBRARY_VERSION_STRING ? MPI_MAX_LIBRARY_VERSION_STRING : len] = 0;
    char *nl = strpbrk(lib, "\r\n");
    if (nl)
        *nl = 0;
    for (char *p = lib; *p; p++)
        if (*p == '\t')
            *p = ' ';
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    printf("# gmpi-bench %s\n# MPI: %s\n", o->name, lib);
    printf("# ranks %d, iterations %d (%d above %d B), warm-up %d (%d)", n, o->iters, o->iters_large, GB_LARGE,
           o->warmup, o->warmup_large);
    if (o->flags & GB_WINDOW)
        printf(", window %d", o->window);
    if (o->flags & GB_PT2PT)
        printf(", buffers %s %s", mem_name(o->side[0]), mem_name(o->side[1]));
    else
        printf(", buffers %s", mem_name(o->side[0]));
    if (o->validate)
        printf(", validating");
    printf("\n# %s\n", columns);
    fflush(stdout);
}

int gb_iters(const struct gb_opts *o, size_t size) {
    return size > GB_LARGE ? o->iters_large : o->iters;
}

int gb_warmup(const struct gb_opts *o, size_t size) {
    return size > GB_LARGE ? o->warmup_large : o->warmup;
}

size_t gb_next_size(size_t size) {
    return size == 0 ? 1 : size * 2;
}

size_t gb_first_size(const struct gb_opts *o) {
    if (o->min_size == 0)
        return 0;
    size_t s = 1;
    while (s < o->min_size)
        s *= 2;
    return s;
}

/* ---- buffers ------------------------------------------------------------ */

void *gb_alloc(size_t size, enum gb_mem mem) {
    size_t n = size ? size : 1;
    if (mem == GB_HOST) {
        void *p = NULL;
        if (posix_memalign(&p, 4096, n))
            gb_die("cannot allocate %zu bytes of host memory", n);
        memset(p, 0, n);
        return p;
    }
    CUdeviceptr d = 0;
    if (mem == GB_DEVICE)
        cu_check(cu.MemAlloc(&d, n), "cuMemAlloc");
    else
        cu_check(cu.MemAllocManaged(&d, n, 1 /* CU_MEM_ATTACH_GLOBAL */), "cuMemAllocManaged");
    cu_check(cu.MemsetD8(d, 0, n), "cuMemsetD8");
    cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
    return (void *)(uintptr_t)d;
}

void gb_free(void *buf, enum gb_mem mem) {
    if (mem == GB_HOST)
        free(buf);
    else
        cu_check(cu.MemFree((CUdeviceptr)(uintptr_t)buf), "cuMemFree");
}

static unsigned char *scratch(size_t size) {
    static unsigned char *s;
    static size_t cap;
    if (size > cap) {
        free(s);
        s = malloc(size ? size : 1);
        if (!s)
            gb_die("cannot allocate %zu bytes of host memory", size);
        cap = size;
    }
    return s;
}

static void from_host(void *dst, const void *src, size_t size, enum gb_mem mem) {
    if (mem == GB_HOST) {
        memcpy(dst, src, size);
        return;
    }
    if (size) {
        cu_check(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, size), "cuMemcpyHtoD");
        /* From pageable memory cuMemcpyHtoD may return before the bytes
         * reach the device: the MPI call that follows (another process's
         * CUDA IPC copy, say) must see them. */
        cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
    }
}

void gb_to_host(void *dst, const void *src, size_t size, enum gb_mem mem) {
    if (mem == GB_HOST) {
        memcpy(dst, src, size);
        return;
    }
    if (size)
        cu_check(cu.MemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, size), "cuMemcpyDtoH");
}

void gb_fill(void *buf, size_t size, enum gb_mem mem, uint32_t seed) {
    unsigned char *p = mem == GB_HOST ? buf : scratch(size);
    for (size_t i = 0; i < size; i++)
        p[i] = gb_pattern(seed, i);
    if (mem != GB_HOST)
        from_host(buf, p, size, mem);
}

void gb_set(void *buf, size_t size, enum gb_mem mem, int value) {
    if (mem == GB_HOST)
        memset(buf, value, size);
    else if (size) {
        cu_check(cu.MemsetD8((CUdeviceptr)(uintptr_t)buf, (unsigned char)value, size), "cuMemsetD8");
        /* A memset is asynchronous: it must be done before MPI writes the
         * buffer, or it would overwrite what arrives. */
        cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
    }
}

size_t gb_check(const void *buf, size_t size, enum gb_mem mem, uint32_t seed, const char *what) {
    const unsigned char *p = buf;
    if (mem != GB_HOST) {
        unsigned char *s = scratch(size);
        gb_to_host(s, buf, size, mem);
        p = s;
    }
    size_t bad = 0;
    for (size_t i = 0; i < size; i++) {
        unsigned char want = gb_pattern(seed, i);
        if (p[i] != want) {
            if (!bad)
                fprintf(stderr, "gmpi-bench: rank %d: %s, %zu B: byte %zu is %u, expected %u\n", mpi_rank(), what,
                        size, i, p[i], want);
            bad++;
        }
    }
    return bad;
}

float gb_float_value(uint32_t seed, size_t i) {
    return (float)((seed * 7u + (uint32_t)i * 13u) % 64u);
}

void gb_fill_floats(void *buf, size_t count, enum gb_mem mem, uint32_t seed) {
    float *p = mem == GB_HOST ? buf : (float *)(void *)scratch(count * sizeof(float));
    for (size_t i = 0; i < count; i++)
        p[i] = gb_float_value(seed, i);
    if (mem != GB_HOST)
        from_host(buf, p, count * sizeof(float), mem);
}

size_t gb_check_floats(const void *buf, size_t count, enum gb_mem mem, const float *expect, const char *what) {
    const float *p = buf;
    if (mem != GB_HOST) {
        float *s = (float *)(void *)scratch(count * sizeof(float));
        gb_to_host(s, buf, count * sizeof(float), mem);
        p = s;
    }
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        if (p[i] != expect[i]) {
            if (!bad)
                fprintf(stderr, "gmpi-bench: rank %d: %s, %zu floats: element %zu is %g, expected %g\n", mpi_rank(),
                        what, count, i, (double)p[i], (double)expect[i]);
            bad++;
        }
    }
    return bad;
}

/* ---- timing and output -------------------------------------------------- */

void gb_print_coll(size_t size, double per_call, MPI_Comm comm) {
    double sum = 0, mn = 0, mx = 0;
    int n, r;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &r);
    MPI_Reduce(&per_call, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
    MPI_Reduce(&per_call, &mn, 1, MPI_DOUBLE, MPI_MIN, 0, comm);
    MPI_Reduce(&per_call, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
    if (r == 0) {
        printf("%-10zu %12.3f %12.3f %12.3f\n", size, sum / n * 1e6, mn * 1e6, mx * 1e6);
        fflush(stdout);
    }
}

double gb_compute(double seconds, MPI_Request *req, int tests) {
    double t0 = MPI_Wtime(), next = t0, step = tests > 0 ? seconds / tests : 0;
    volatile double x = 1.0;
    int done = 0, left = tests;
    for (;;) {
        double now = MPI_Wtime();
        if (now - t0 >= seconds)
            break;
        for (int k = 0; k < 64; k++)
            x = x * 1.0000001 + 1e-9;
        if (left > 0 && now >= next && req && *req != MPI_REQUEST_NULL && !done) {
            MPI_Test(req, &done, MPI_STATUS_IGNORE);
            left--;
            next += step;
        }
    }
    return MPI_Wtime() - t0;
}

int gb_finish(size_t errors) {
    unsigned long long mine = errors, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    int r = mpi_rank();
    if (all && r == 0)
        fprintf(stderr, "gmpi-bench: validation FAILED: %llu wrong bytes or elements in all\n", all);
    MPI_Finalize();
    return all ? 1 : 0;
}

/* ---- the bandwidth loop (gb_bw, gb_mbw_mr) ------------------------------ */

static void bw_window(const struct gb_opts *o, int sender, int peer, char **bufs, int nbufs, size_t size,
                      MPI_Request *reqs) {
    for (int k = 0; k < o->window; k++) {
        char *b = bufs[k % nbufs];
        if (sender)
            MPI_Isend(b, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k]);
        else
            MPI_Irecv(b, (int)size, MPI_CHAR, peer, 100, MPI_COMM_WORLD, &reqs[k]);
    }
    MPI_Waitall(o->window, reqs, MPI_STATUSES_IGNORE);
    int ack = 0;
    if (sender)
        MPI_Recv(&ack, 1, MPI_INT, peer, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
        MPI_Send(&ack, 1, MPI_INT, peer, 101, MPI_COMM_WORLD);
}

double gb_bw_loop(const struct gb_opts *o, int sender, int peer, char **bufs, int nbufs, enum gb_mem mem,
                  size_t size, size_t *errors) {
    int iters = gb_iters(o, size), warm = gb_warmup(o, size);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)o->window);
    if (!reqs)
        gb_die("out of memory");
    double t = 0;
    if (!o->validate) {
        for (int i = 0; i < warm; i++)
            bw_window(o, sender, peer, bufs, nbufs, size, reqs);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            bw_window(o, sender, peer, bufs, nbufs, size, reqs);
        t = MPI_Wtime() - t0;
    } else {
        for (int i = -warm; i < iters; i++) {
            for (int k = 0; k < nbufs; k++) {
                uint32_t seed = (uint32_t)((i + warm) * o->window + k);
                if (sender)
                    gb_fill(bufs[k], size, mem, seed);
                else
                    gb_set(bufs[k], size, mem, 0xa5);
            }
            double t0 = MPI_Wtime();
            bw_window(o, sender, peer, bufs, nbufs, size, reqs);
            if (i >= 0)
                t += MPI_Wtime() - t0;
            if (!sender)
                for (int k = 0; k < nbufs; k++)
                    *errors += gb_check(bufs[k], size, mem, (uint32_t)((i + warm) * o->window + k), "bw");
        }
    }
    free(reqs);
    return t;
}

/* ---- collectives -------------------------------------------------------- */

double gb_coll_loop(const struct gb_opts *o, size_t size, const struct gb_coll_ops *ops, void *ctx,
                    size_t *errors) {
    int iters = gb_iters(o, size), warm = gb_warmup(o, size);
    double t = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (!o->validate) {
        for (int i = 0; i < warm; i++)
            ops->call(ctx, size);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            ops->call(ctx, size);
        t = MPI_Wtime() - t0;
    } else {
        for (int i = -warm; i < iters; i++) {
            uint32_t seed = (uint32_t)(i + warm) * 7919u + (uint32_t)size;
            ops->prep(ctx, size, seed);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            ops->call(ctx, size);
            if (i >= 0)
                t += MPI_Wtime() - t0;
            *errors += ops->check(ctx, size, seed);
        }
    }
    return t / iters;
}

void gb_float_sums(float *out, size_t count, uint32_t seed, int n) {
    for (size_t i = 0; i < count; i++) {
        float s = 0;
        for (int r = 0; r < n; r++)
            s += gb_float_value(seed + (uint32_t)r, i);
        out[i] = s;
    }
}

void gb_coll_sweep(const struct gb_opts *o, const struct gb_coll_ops *ops, void *ctx, size_t *errors) {
    gb_header(o, "Size       Avg(us)      Min(us)      Max(us)");
    GB_SIZES(o, size) gb_print_coll(size, gb_coll_loop(o, size, ops, ctx, errors), MPI_COMM_WORLD);
}
