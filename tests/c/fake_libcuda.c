/*
 * A stand-in for libcuda.so.1 with the few driver calls bench/suite uses,
 * for machines without a GPU: "device" memory is host memory from malloc,
 * tagged so that every copy and free can be checked against the allocations.
 * Only the suite's CUDA plumbing is exercised (dlopen, context set-up,
 * allocation, copies, validation through device copies); gmpi and the other
 * MPIs see host memory. At exit it prints the calls it served to stderr,
 * "fake-cuda: alloc A free F htod H dtoh D memset M", and any misuse
 * (unknown pointer, out-of-range copy, leak) as "fake-cuda: ERROR ...".
 *
 * It also serves the calls gmpi-gpu's real backend (gpu/src/cuda/) needs,
 * so that backend's classification, copy, pinned-memory and IPC plumbing is
 * tested end to end without a GPU (gpu/src/cuda/mod.rs, test
 * `fake_driver_end_to_end`): pointer attributes with buffer ids, address
 * ranges, pinned host memory (memory type HOST), context queries, IPC
 * handles (opened as an alias of the same memory, reference counted) and
 * device facts. Kernels are not supported (CUDA_ERROR_NOT_SUPPORTED).
 * IPC handles carry the pid of the process that made them. As with real
 * CUDA, the exporting process cannot open its own handle
 * (CUDA_ERROR_INVALID_CONTEXT); and since the fake's memory is private to
 * its process, another process cannot map it either (CUDA_ERROR_INVALID_HANDLE,
 * counted as "ipc-foreign"): every open fails, and gmpi must fall back to its
 * staged protocol (or, to itself, copy directly) instead of aliasing memory.
 * With FAKE_CUDA_SHARED_IPC=1, device allocations are shared memory (a
 * memfd each) and another process of the same user opens a handle as real
 * CUDA IPC does: it maps the exporter's allocation (through
 * /proc/PID/fd/FD) as an allocation of its own, until cuIpcCloseMemHandle;
 * so device memory one process writes, the other reads.
 *
 * And the calls `cudarc`'s safe API makes (CudaContext::new, streams,
 * events, alloc_zeros, clone_htod/clone_dtoh, synchronize, drop): streams
 * and events are handles checked on every use and counted (a leak is an
 * ERROR); "async" copies and memsets run at once.
 * For tests/device it also has own contexts (cuCtxCreate_v2, the same fake
 * context), streams and stream-ordered allocations (cuMemAllocAsync: not
 * exportable by IPC, as pool memory on a real driver) and cuMemcpyDtoD_v2.
 * With FAKE_CUDA_MEMORY_POOLS=1 the device reports memory pools, so that
 * cudarc allocates its CudaSlices from them as it does on real GPUs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

typedef unsigned long long CUdeviceptr;
#define MAX_ALLOCS 4096

static struct {
    char *base;
    size_t size;
    unsigned long long id; /* buffer id, unique per allocation */
    int managed;
    int pool; /* from cuMemAllocAsync: not exportable by legacy IPC */
    int ipc_opens;
    int fd;       /* FAKE_CUDA_SHARED_IPC: the memfd behind the allocation */
    int imported; /* a mapping of another process's allocation (cuIpcOpenMemHandle) */
} allocs[MAX_ALLOCS];
static unsigned long long next_id = 1;
static unsigned long n_alloc, n_free, n_htod, n_dtoh, n_memset, errors;
static int initialized, ctx_current, ctx_retains;
/* The primary context was released by its last holder: as on the driver, it
 * is destroyed, and calls in it fail until someone retains it again. */
static int ctx_destroyed;

static void error(const char *what, CUdeviceptr p, size_t n) {
    errors++;
    fprintf(stderr, "fake-cuda: ERROR %s (pointer %#llx, %zu bytes)\n", what, p, n);
}

/* Whether [p, p+n) lies inside one allocation. */
static int valid(CUdeviceptr p, size_t n) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
        char *b = allocs[i].base;
        if (b && (char *)p >= b && (char *)p + n <= b + allocs[i].size)
            return 1;
    }
    return 0;
}

static int ready(void) {
    if (ctx_destroyed) {
        errors++;
        fprintf(stderr, "fake-cuda: ERROR call in a destroyed context (its last holder released it)\n");
        return 0;
    }
    if (!initialized || !ctx_current) {
        errors++;
        fprintf(stderr, "fake-cuda: ERROR call before cuInit/cuCtxSetCurrent\n");
        return 0;
    }
    return 1;
}

int cuInit(unsigned flags) {
    initialized = flags == 0;
    return flags == 0 ? 0 : 1;
}

int cuDeviceGetCount(int *n) {
    *n = 1;
    return 0;
}

int cuDeviceGet(int *dev, int ordinal) {
    if (ordinal != 0)
        return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *dev = 0;
    return 0;
}

int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    *ctx = (void *)&ctx_current;
    ctx_retains++;
    ctx_destroyed = 0;
    return 0;
}

int cuCtxSetCurrent(void *ctx) {
    ctx_current = ctx == (void *)&ctx_current;
    return ctx_current ? 0 : 201;
}

int cuCtxSynchronize(void) {
    return ready() ? 0 : 3;
}

/*
 * "Device" memory: each allocation is its own mapping, returned to the kernel
 * when freed, as the H200 driver (580) does: a freed device range can be the
 * next large malloc's, and a freed malloc'd range the next allocation's, so
 * a classification cache that trusts an old answer is caught here. (The
 * bytes stay CPU-accessible: a device pointer taken for host memory is
 * caught by the checks of the copies, not by a fault.)
 */
#define GRAIN (64 << 10)

static int shared_ipc(void) {
    const char *e = getenv("FAKE_CUDA_SHARED_IPC");
    return e && *e == '1';
}

static char *arena_alloc(size_t n) {
    size_t size = ((n ? n : 1) + GRAIN - 1) / GRAIN * GRAIN;
    void *a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return a == MAP_FAILED ? NULL : a;
}

/* FAKE_CUDA_SHARED_IPC: an allocation another process can map. */
static char *shared_alloc(size_t n, int *fd) {
    size_t size = ((n ? n : 1) + GRAIN - 1) / GRAIN * GRAIN;
    *fd = memfd_create("fake-cuda", 0);
    if (*fd < 0)
        return NULL;
    if (ftruncate(*fd, (off_t)size) != 0) {
        close(*fd);
        *fd = -1;
        return NULL;
    }
    void *a = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    return a == MAP_FAILED ? NULL : a;
}

static void arena_free(char *p, size_t n) {
    size_t size = ((n ? n : 1) + GRAIN - 1) / GRAIN * GRAIN;
    munmap(p, size);
}

static int alloc(CUdeviceptr *p, size_t n, int managed) {
    if (!ready())
        return 3;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocs[i].base) {
            allocs[i].fd = -1;
            allocs[i].imported = 0;
            allocs[i].base = shared_ipc() && !managed ? shared_alloc(n, &allocs[i].fd) : arena_alloc(n);
            allocs[i].size = n;
            allocs[i].id = next_id++;
            allocs[i].managed = managed;
            allocs[i].pool = 0;
            allocs[i].ipc_opens = 0;
            *p = (CUdeviceptr)allocs[i].base;
            n_alloc++;
            return allocs[i].base ? 0 : 2;
        }
    }
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
}

int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    return alloc(p, n, 0);
}

int cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags) {
    return alloc(p, n, 1);
}

int cuMemFree_v2(CUdeviceptr p) {
    if (ctx_destroyed) {
        error("cuMemFree in a destroyed context", p, 0);
        return 709; /* CUDA_ERROR_CONTEXT_IS_DESTROYED */
    }
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].base && (CUdeviceptr)allocs[i].base == p && !allocs[i].imported) {
            arena_free(allocs[i].base, allocs[i].size);
            if (allocs[i].fd >= 0)
                close(allocs[i].fd);
            allocs[i].base = NULL;
            n_free++;
            return 0;
        }
    }
    error("cuMemFree of an unknown pointer", p, 0);
    return 1;
}

int cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    if (!ready() || !valid(dst, n)) {
        error("cuMemcpyHtoD outside an allocation", dst, n);
        return 1;
    }
    memcpy((void *)dst, src, n);
    n_htod++;
    return 0;
}

/* FAKE_CUDA_FAIL_DTOH_BYTES=N: every cuMemcpyDtoH_v2 (and so
 * cuMemcpyDtoHAsync_v2) of exactly N bytes fails with
 * CUDA_ERROR_ILLEGAL_ADDRESS and copies nothing, as after a sticky error;
 * with FAKE_CUDA_FAIL_RANK=R, only in the process whose GMPI_RANK is R. For
 * the tests of how gmpi reports a failed device copy (an injected failure,
 * not a misuse: no ERROR is printed). */
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
static int dtoh_fails(size_t n) {
    static int known;
    static long long bytes = -1;
    if (!known) {
        const char *b = getenv("FAKE_CUDA_FAIL_DTOH_BYTES");
        const char *r = getenv("FAKE_CUDA_FAIL_RANK");
        const char *me = getenv("GMPI_RANK");
        if (b && (!r || (me && strcmp(r, me) == 0)))
            bytes = atoll(b);
        known = 1;
    }
    return bytes >= 0 && (size_t)bytes == n;
}

int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    if (dtoh_fails(n))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (!ready() || !valid(src, n)) {
        error("cuMemcpyDtoH outside an allocation", src, n);
        return 1;
    }
    memcpy(dst, (void *)src, n);
    n_dtoh++;
    return 0;
}

int cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    if (!ready() || !valid(dst, n)) {
        error("cuMemsetD8 outside an allocation", dst, n);
        return 1;
    }
    memset((void *)dst, v, n);
    n_memset++;
    return 0;
}

int cuGetErrorString(int rc, const char **s) {
    *s = rc == 0 ? "no error" : "fake-cuda error";
    return 0;
}

/* ---- the calls of gmpi-gpu's real backend ---- */

#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_SUPPORTED 801
#define MAX_PINNED 256

static struct {
    char *base;
    size_t size;
} pinned[MAX_PINNED];
static unsigned long n_pinned, n_pinned_free, n_ipc_open, n_ipc_close, n_ipc_foreign;
static int valid_stream(void *s);

/* The allocation holding p, or -1. */
static int find(CUdeviceptr p) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
        char *b = allocs[i].base;
        if (b && (char *)p >= b && (char *)p < b + (allocs[i].size ? allocs[i].size : 1))
            return i;
    }
    return -1;
}

static int find_pinned(CUdeviceptr p) {
    for (int i = 0; i < MAX_PINNED; i++) {
        char *b = pinned[i].base;
        if (b && (char *)p >= b && (char *)p < b + pinned[i].size)
            return i;
    }
    return -1;
}

int cuGetErrorName(int rc, const char **s) {
    switch (rc) {
    case 0: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    default: *s = "CUDA_ERROR_FAKE";
    }
    return 0;
}

int cuDriverGetVersion(int *v) {
    *v = 12080;
    return 0;
}

int cuDeviceGetName(char *name, int len, int dev) {
    snprintf(name, len, "Fake GPU %d", dev);
    return 0;
}

int cuDeviceTotalMem_v2(size_t *bytes, int dev) {
    *bytes = (size_t)1 << 30;
    return 0;
}

int cuDeviceGetPCIBusId(char *id, int len, int dev) {
    snprintf(id, len, "0000:%02x:00.0", dev + 1);
    return 0;
}

int cuDeviceGetAttribute(int *v, int attr, int dev) {
    /* CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED only where
     * FAKE_CUDA_MEMORY_POOLS is set: cudarc then allocates every CudaSlice
     * with cuMemAllocAsync, as on a real GPU (memory legacy IPC cannot
     * export). No dma-buf; nothing else asked. */
    const char *pools = getenv("FAKE_CUDA_MEMORY_POOLS");
    *v = attr == 115 && pools && *pools && strcmp(pools, "0");
    return 0;
}

int cuDeviceCanAccessPeer(int *v, int a, int b) {
    *v = 0;
    return 0;
}

int cuDevicePrimaryCtxRelease_v2(int dev) {
    if (ctx_retains <= 0) {
        error("cuDevicePrimaryCtxRelease without a retain", 0, 0);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (--ctx_retains == 0)
        ctx_destroyed = 1;
    return 0;
}

int cuCtxGetCurrent(void **ctx) {
    *ctx = ctx_current ? (void *)&ctx_current : NULL;
    return 0;
}

int cuCtxGetDevice(int *dev) {
    if (!ready())
        return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    *dev = 0;
    return 0;
}

int cuCtxPushCurrent_v2(void *ctx) {
    return cuCtxSetCurrent(ctx);
}

int cuCtxPopCurrent_v2(void **ctx) {
    if (ctx)
        *ctx = ctx_current ? (void *)&ctx_current : NULL;
    ctx_current = 0;
    return 0;
}

enum {
    ATTR_CONTEXT = 1,
    ATTR_MEMORY_TYPE = 2,
    ATTR_SYNC_MEMOPS = 6,
    ATTR_BUFFER_ID = 7,
    ATTR_IS_MANAGED = 8,
    ATTR_DEVICE_ORDINAL = 9,
    ATTR_IPC_CAPABLE = 10,
    ATTR_RANGE_START = 11,
    ATTR_RANGE_SIZE = 12,
};

/* One attribute, written with the width the CUDA documentation gives it. */
static int attr(void *data, int a, CUdeviceptr p) {
    int i = find(p), h = i < 0 ? find_pinned(p) : -1;
    switch (a) {
    case ATTR_CONTEXT:
        *(void **)data = i >= 0 || h >= 0 ? (void *)&ctx_current : NULL;
        return 0;
    case ATTR_MEMORY_TYPE:
        *(unsigned *)data = i >= 0 ? 2 : h >= 0 ? 1 : 0; /* DEVICE, HOST */
        return 0;
    case ATTR_BUFFER_ID:
        *(unsigned long long *)data = i >= 0 ? allocs[i].id : h >= 0 ? 1000000 + h : 0;
        return 0;
    case ATTR_IS_MANAGED:
        *(unsigned char *)data = i >= 0 && allocs[i].managed; /* a C bool */
        return 0;
    case ATTR_DEVICE_ORDINAL:
        *(int *)data = 0;
        return 0;
    case ATTR_IPC_CAPABLE:
        *(unsigned char *)data = i >= 0 && !allocs[i].managed && !allocs[i].pool;
        return 0;
    case ATTR_RANGE_START:
        *(CUdeviceptr *)data = i >= 0 ? (CUdeviceptr)allocs[i].base : h >= 0 ? (CUdeviceptr)pinned[h].base : 0;
        return 0;
    case ATTR_RANGE_SIZE:
        *(size_t *)data = i >= 0 ? allocs[i].size : h >= 0 ? pinned[h].size : 0;
        return 0;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

int cuPointerGetAttribute(void *data, int a, CUdeviceptr p) {
    if (!initialized)
        return 3;
    if (find(p) < 0 && find_pinned(p) < 0)
        return CUDA_ERROR_INVALID_VALUE; /* as the driver: not a CUDA pointer */
    return attr(data, a, p);
}

/* Unlike cuPointerGetAttribute, succeeds for unknown pointers (zeros). */
int cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p) {
    if (!initialized)
        return 3;
    for (unsigned k = 0; k < n; k++)
        if (attr(data[k], attrs[k], p))
            return CUDA_ERROR_INVALID_VALUE;
    return 0;
}

int cuPointerSetAttribute(const void *v, int a, CUdeviceptr p) {
    return a == ATTR_SYNC_MEMOPS && find(p) >= 0 ? 0 : CUDA_ERROR_INVALID_VALUE;
}

int cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
    int i = find(p);
    if (i < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (base)
        *base = (CUdeviceptr)allocs[i].base;
    if (size)
        *size = allocs[i].size;
    return 0;
}

int cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    if (!ready() || !valid(dst, n) || !valid(src, n)) {
        error("cuMemcpy outside an allocation", dst, n);
        return 1;
    }
    memmove((void *)dst, (void *)src, n);
    return 0;
}

int cuStreamSynchronize(void *stream) {
    if (!ready())
        return 3;
    if (!valid_stream(stream)) {
        error("cuStreamSynchronize of an unknown stream", (CUdeviceptr)stream, 0);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    return 0;
}

int cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    if (!ready())
        return 3;
    for (int i = 0; i < MAX_PINNED; i++) {
        if (!pinned[i].base) {
            pinned[i].base = malloc(n ? n : 1);
            pinned[i].size = n ? n : 1;
            *p = pinned[i].base;
            n_pinned++;
            return 0;
        }
    }
    return 2;
}

int cuMemFreeHost(void *p) {
    if (ctx_destroyed) {
        error("cuMemFreeHost in a destroyed context", (CUdeviceptr)p, 0);
        return 709; /* CUDA_ERROR_CONTEXT_IS_DESTROYED */
    }
    for (int i = 0; i < MAX_PINNED; i++) {
        if (pinned[i].base && pinned[i].base == p) {
            free(pinned[i].base);
            pinned[i].base = NULL;
            n_pinned_free++;
            return 0;
        }
    }
    error("cuMemFreeHost of an unknown pointer", (CUdeviceptr)p, 0);
    return 1;
}

/* A handle is "FAKEIPC" + the allocation's index, buffer id and the pid. */
int cuIpcGetMemHandle(char *h, CUdeviceptr p) {
    int i = find(p);
    if (!ready() || i < 0 || (CUdeviceptr)allocs[i].base != p || allocs[i].managed || allocs[i].pool)
        return CUDA_ERROR_INVALID_VALUE;
    memset(h, 0, 64);
    memcpy(h, "FAKEIPC", 8);
    memcpy(h + 8, &i, sizeof i);
    memcpy(h + 16, &allocs[i].id, sizeof allocs[i].id);
    pid_t pid = getpid();
    memcpy(h + 24, &pid, sizeof pid);
    memcpy(h + 32, &allocs[i].fd, sizeof allocs[i].fd);
    memcpy(h + 40, &allocs[i].size, sizeof allocs[i].size);
    return 0;
}

typedef struct {
    char reserved[64];
} ipc_handle;

int cuIpcOpenMemHandle_v2(CUdeviceptr *p, ipc_handle h, unsigned flags) {
    int i;
    unsigned long long id;
    pid_t pid;
    (void)p;
    memcpy(&i, h.reserved + 8, sizeof i);
    memcpy(&id, h.reserved + 16, sizeof id);
    memcpy(&pid, h.reserved + 24, sizeof pid);
    if (!ready() || memcmp(h.reserved, "FAKEIPC", 8) || flags != 1)
        return CUDA_ERROR_INVALID_HANDLE;
    if (pid == getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* CUDA: not in the exporter */
    int fd;
    size_t size;
    memcpy(&fd, h.reserved + 32, sizeof fd);
    memcpy(&size, h.reserved + 40, sizeof size);
    if (!shared_ipc() || fd < 0) {
        n_ipc_foreign++; /* another process's memory: not reachable here */
        return CUDA_ERROR_INVALID_HANDLE;
    }
    /* Map the exporter's memfd, as the driver maps the exporter's memory. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
    int mine = open(path, O_RDWR);
    if (mine < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    size_t len = ((size ? size : 1) + GRAIN - 1) / GRAIN * GRAIN;
    void *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mine, 0);
    close(mine);
    if (a == MAP_FAILED)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int k = 0; k < MAX_ALLOCS; k++) {
        if (!allocs[k].base) {
            allocs[k].base = a;
            allocs[k].size = size;
            allocs[k].id = next_id++;
            allocs[k].managed = 0;
            allocs[k].pool = 0;
            allocs[k].ipc_opens = 1;
            allocs[k].fd = -1;
            allocs[k].imported = 1;
            *p = (CUdeviceptr)a;
            n_ipc_open++;
            return 0;
        }
    }
    munmap(a, len);
    return 2;
}

int cuIpcCloseMemHandle(CUdeviceptr p) {
    int i = find(p);
    if (!ready() || i < 0 || allocs[i].ipc_opens <= 0) {
        error("cuIpcCloseMemHandle of an address not opened", p, 0);
        return CUDA_ERROR_INVALID_VALUE;
    }
    allocs[i].ipc_opens--;
    n_ipc_close++;
    if (allocs[i].imported && allocs[i].ipc_opens == 0) {
        arena_free(allocs[i].base, allocs[i].size);
        allocs[i].base = NULL;
        allocs[i].imported = 0;
    }
    return 0;
}

/* ---- the calls of cudarc's safe API (streams, events, async copies) ---- */

#define MAX_HANDLES 4096

/* Streams and events are addresses of slots here; NULL is the legacy
 * default stream and 0x1/0x2 the legacy and per-thread stream handles. */
static char stream_slots[MAX_HANDLES], event_slots[MAX_HANDLES];
static unsigned long n_stream, n_stream_free, n_event, n_event_free, n_event_record, n_wait, n_async;

static int valid_stream(void *s) {
    if (s == NULL || s == (void *)0x1 || s == (void *)0x2)
        return 1;
    char *c = s;
    return c >= stream_slots && c < stream_slots + MAX_HANDLES && *c;
}

static int valid_event(void *e) {
    char *c = e;
    return c >= event_slots && c < event_slots + MAX_HANDLES && *c;
}

static int new_handle(char *slots, void **out) {
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (!slots[i]) {
            slots[i] = 1;
            *out = &slots[i];
            return 0;
        }
    }
    return 2;
}

int cuStreamCreate(void **s, unsigned flags) {
    if (!ready())
        return 3;
    int rc = new_handle(stream_slots, s);
    n_stream += rc == 0;
    return rc;
}

int cuStreamDestroy_v2(void *s) {
    if (!ready() || s == NULL || !valid_stream(s) || s == (void *)0x1 || s == (void *)0x2) {
        error("cuStreamDestroy of an unknown stream", (CUdeviceptr)s, 0);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *(char *)s = 0;
    n_stream_free++;
    return 0;
}

int cuEventCreate(void **e, unsigned flags) {
    if (!ready())
        return 3;
    int rc = new_handle(event_slots, e);
    n_event += rc == 0;
    return rc;
}

int cuEventDestroy_v2(void *e) {
    if (!valid_event(e)) {
        error("cuEventDestroy of an unknown event", (CUdeviceptr)e, 0);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *(char *)e = 0;
    n_event_free++;
    return 0;
}

int cuEventRecord(void *e, void *s) {
    if (!ready() || !valid_event(e) || !valid_stream(s)) {
        error("cuEventRecord with an unknown event or stream", (CUdeviceptr)e, 0);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    n_event_record++;
    return 0;
}

/* Everything runs at once here: every event has completed. */
int cuEventQuery(void *e) {
    if (!valid_event(e)) {
        error("cuEventQuery of an unknown event", (CUdeviceptr)e, 0);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    return 0;
}

int cuEventSynchronize(void *e) {
    return cuEventQuery(e);
}

int cuStreamWaitEvent(void *s, void *e, unsigned flags) {
    if (!ready() || !valid_stream(s) || !valid_event(e)) {
        error("cuStreamWaitEvent with an unknown stream or event", (CUdeviceptr)e, 0);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    n_wait++;
    return 0;
}

int cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s) {
    if (!valid_stream(s)) {
        error("cuMemsetD8Async on an unknown stream", dst, n);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    n_async++;
    return cuMemsetD8_v2(dst, v, n);
}

int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
    if (!valid_stream(s)) {
        error("cuMemcpyHtoDAsync on an unknown stream", dst, n);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    n_async++;
    return cuMemcpyHtoD_v2(dst, src, n);
}

int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
    if (!valid_stream(s)) {
        error("cuMemcpyDtoHAsync on an unknown stream", src, n);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    n_async++;
    return cuMemcpyDtoH_v2(dst, src, n);
}

int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) {
    if (!valid_stream(s)) {
        error("cuMemcpyDtoDAsync on an unknown stream", dst, n);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    n_async++;
    return cuMemcpy(dst, src, n);
}

/* ---- the calls of tests/device (own contexts, stream-ordered memory) ---- */

static unsigned long n_ctx_create, n_ctx_destroy;

/* An own context is the same fake context, made current. */
int cuCtxCreate_v2(void **ctx, unsigned flags, int dev) {
    if (!initialized || dev != 0)
        return !initialized ? 3 : 101;
    *ctx = (void *)&ctx_current;
    ctx_current = 1;
    n_ctx_create++;
    return 0;
}

int cuCtxDestroy_v2(void *ctx) {
    if (ctx != (void *)&ctx_current || n_ctx_destroy >= n_ctx_create) {
        error("cuCtxDestroy of a context not created", (CUdeviceptr)ctx, 0);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n_ctx_destroy++;
    ctx_current = 0;
    return 0;
}

int cuMemAllocAsync(CUdeviceptr *p, size_t n, void *stream) {
    if (!valid_stream(stream)) {
        error("cuMemAllocAsync on an unknown stream", 0, n);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    int rc = alloc(p, n, 0);
    if (rc == 0)
        allocs[find(*p)].pool = 1;
    return rc;
}

int cuMemFreeAsync(CUdeviceptr p, void *stream) {
    if (!valid_stream(stream)) {
        error("cuMemFreeAsync on an unknown stream", p, 0);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    return cuMemFree_v2(p);
}

int cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    return cuMemcpy(dst, src, n);
}

int cuModuleLoadData(void **m, const void *image) {
    return CUDA_ERROR_NOT_SUPPORTED;
}

int cuModuleGetFunction(void **f, void *m, const char *name) {
    return CUDA_ERROR_NOT_SUPPORTED;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    return CUDA_ERROR_NOT_SUPPORTED;
}

__attribute__((destructor)) static void report(void) {
    if (!initialized)
        return;
    if (n_alloc != n_free)
        errors++, fprintf(stderr, "fake-cuda: ERROR %lu allocations, %lu freed\n", n_alloc, n_free);
    if (n_pinned != n_pinned_free)
        errors++, fprintf(stderr, "fake-cuda: ERROR %lu pinned allocations, %lu freed\n", n_pinned, n_pinned_free);
    if (n_ctx_create != n_ctx_destroy)
        errors++, fprintf(stderr, "fake-cuda: ERROR %lu contexts created, %lu destroyed\n", n_ctx_create, n_ctx_destroy);
    if (n_ipc_open != n_ipc_close)
        errors++, fprintf(stderr, "fake-cuda: ERROR %lu IPC opens, %lu closed\n", n_ipc_open, n_ipc_close);
    if (n_stream != n_stream_free)
        errors++, fprintf(stderr, "fake-cuda: ERROR %lu streams, %lu destroyed\n", n_stream, n_stream_free);
    if (n_event != n_event_free)
        errors++, fprintf(stderr, "fake-cuda: ERROR %lu events, %lu destroyed\n", n_event, n_event_free);
    if (n_stream || n_event || n_async || n_ipc_foreign)
        fprintf(stderr,
                "fake-cuda: streams %lu events %lu records %lu waits %lu async %lu foreign-ipc %lu\n",
                n_stream, n_event, n_event_record, n_wait, n_async, n_ipc_foreign);
    fprintf(stderr, "fake-cuda: alloc %lu free %lu htod %lu dtoh %lu memset %lu errors %lu\n", n_alloc, n_free,
            n_htod, n_dtoh, n_memset, errors);
}
