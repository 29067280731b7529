/* One-sided communication on GPU memory: windows of MPI_Win_create over
 * device buffers (on every rank, or on even ranks only: mixed host and
 * device targets), with host origin buffers and device ones: put and get
 * under fence, accumulate, fetch-and-op (exact under contention) and
 * compare-and-swap under passive-target locks, and get of what others put.
 * The CUDA driver is whatever libcuda.so.1 the process loads (the test runs
 * on the fake driver with FAKE_CUDA_SHARED_IPC=1, where device memory is
 * shared memory that CUDA IPC maps across processes); the program reaches
 * it by dlopen, as gmpi does, so both use the same driver instance.
 * Environment: RMA_DEVICE_MIXED=1 puts only even ranks' windows on the
 * device. Any np >= 1. */
#define _POSIX_C_SOURCE 200809L
#define TEST_NAME "rma_device"
#include "check.h"

#include <dlfcn.h>

typedef unsigned long long CUdeviceptr;
static int (*cuInit)(unsigned);
static int (*cuDeviceGet)(int *, int);
static int (*cuDevicePrimaryCtxRetain)(void **, int);
static int (*cuDevicePrimaryCtxRelease)(int);
static int (*cuCtxSetCurrent)(void *);
static int (*cuMemAlloc)(CUdeviceptr *, size_t);
static int (*cuMemFree)(CUdeviceptr);
static int (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
static int (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);

#define N 64

/* Data checks that passed (tests/device/run.sh reads the SUMMARY line). */
static int passed;
#define VERIFY(cond, ...)          \
    do {                           \
        CHECK(cond, __VA_ARGS__);  \
        passed++;                  \
    } while (0)

static void load_cuda(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    CHECK(h != NULL, "dlopen libcuda.so.1: %s", dlerror());
#define SYM(v, name)                                              \
    do {                                                          \
        *(void **)(&v) = dlsym(h, name);                          \
        CHECK(v != NULL, "%s missing from libcuda.so.1", name);   \
    } while (0)
    SYM(cuInit, "cuInit");
    SYM(cuDeviceGet, "cuDeviceGet");
    SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
    SYM(cuMemAlloc, "cuMemAlloc_v2");
    SYM(cuMemFree, "cuMemFree_v2");
    SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
}

int main(int argc, char **argv)
{
    load_cuda();
    int dev;
    void *ctx;
    CHECK(cuInit(0) == 0 && cuDeviceGet(&dev, 0) == 0, "cuInit");
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev) == 0 && cuCtxSetCurrent(ctx) == 0, "context");
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mixed = getenv("RMA_DEVICE_MIXED");
    int on_device = !(mixed && *mixed == '1') || rank % 2 == 0;

    /* The window's memory: N longs, zero. */
    long host_mem[N], zero[N], out[N];
    memset(zero, 0, sizeof zero);
    memcpy(host_mem, zero, sizeof zero);
    CUdeviceptr dmem = 0;
    void *base = host_mem;
    if (on_device) {
        CHECK(cuMemAlloc(&dmem, sizeof zero) == 0, "cuMemAlloc");
        CHECK(cuMemcpyHtoD(dmem, zero, sizeof zero) == 0, "zero the window");
        base = (void *)dmem;
    }
    MPI_Win win;
    CHECK_MPI(MPI_Win_create(base, sizeof zero, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    /* Read this rank's window memory. */
#define MINE(buf)                                                              \
    do {                                                                       \
        if (on_device)                                                         \
            CHECK(cuMemcpyDtoH(buf, dmem, sizeof zero) == 0, "cuMemcpyDtoH"); \
        else                                                                   \
            memcpy(buf, host_mem, sizeof zero);                                \
    } while (0)

    /* A device origin buffer too. */
    CUdeviceptr dorig;
    CHECK(cuMemAlloc(&dorig, 4 * sizeof(long)) == 0, "cuMemAlloc origin");

    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    /* Fence: put rank+1 into slot `rank` of the right neighbour (host
     * origin), and 100+rank into slot N/2+rank from a device origin. */
    CHECK_MPI(MPI_Win_fence(0, win));
    long v = rank + 1;
    CHECK_MPI(MPI_Put(&v, 1, MPI_LONG, right, rank, 1, MPI_LONG, win));
    long dv[4] = {100 + rank, 0, 0, 0};
    CHECK(cuMemcpyHtoD(dorig, dv, sizeof dv) == 0, "origin");
    CHECK_MPI(MPI_Put((void *)dorig, 1, MPI_LONG, right, N / 2 + rank, 1, MPI_LONG, win));
    CHECK_MPI(MPI_Win_fence(0, win));
    MINE(out);
    VERIFY(out[left] == left + 1, "fence put from %d: %ld", left, out[left]);
    VERIFY(out[N / 2 + left] == 100 + left, "device-origin put from %d: %ld", left, out[N / 2 + left]);
    /* Get them back from the right neighbour into host and device buffers. */
    long back = -1;
    CHECK_MPI(MPI_Get(&back, 1, MPI_LONG, right, rank, 1, MPI_LONG, win));
    CHECK_MPI(MPI_Get((void *)dorig, 1, MPI_LONG, right, N / 2 + rank, 1, MPI_LONG, win));
    CHECK_MPI(MPI_Win_fence(0, win));
    VERIFY(back == rank + 1, "get back %ld", back);
    CHECK(cuMemcpyDtoH(dv, dorig, sizeof dv) == 0, "origin back");
    VERIFY(dv[0] == 100 + rank, "device get back %ld", dv[0]);
    CHECK_MPI(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));

    /* Passive target on rank 0: 20 accumulates and fetch-and-ops each. */
    const int K = 20;
    long one = 1, old = -1, total = 0;
    for (int i = 0; i < K; i++) {
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK_MPI(MPI_Accumulate(&one, 1, MPI_LONG, 0, N - 1, 1, MPI_LONG, MPI_SUM, win));
        CHECK_MPI(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, N - 2, MPI_SUM, win));
        CHECK_MPI(MPI_Win_unlock(0, win));
        total += old;
    }
    /* Each rank sets bit `rank` of slot N-3 by compare-and-swap. */
    for (;;) {
        long cur, want, was;
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        CHECK_MPI(MPI_Get(&cur, 1, MPI_LONG, 0, N - 3, 1, MPI_LONG, win));
        CHECK_MPI(MPI_Win_flush(0, win));
        want = cur | (1L << rank);
        CHECK_MPI(MPI_Compare_and_swap(&want, &cur, &was, MPI_LONG, 0, N - 3, win));
        CHECK_MPI(MPI_Win_unlock(0, win));
        if (was == cur)
            break;
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        MINE(out);
        VERIFY(out[N - 1] == (long)K * size, "accumulated %ld, want %ld", out[N - 1], (long)K * size);
        VERIFY(out[N - 2] == (long)K * size, "fetch-and-op counter %ld", out[N - 2]);
        VERIFY(out[N - 3] == (1L << size) - 1, "compare-and-swap bits %#lx", out[N - 3]);
    }
    /* Every fetched value is distinct: their sum is that of 0..K*size-1. */
    long sum = 0;
    CHECK_MPI(MPI_Allreduce(&total, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    long n = (long)K * size;
    VERIFY(sum == n * (n - 1) / 2, "fetched values sum to %ld, want %ld", sum, n * (n - 1) / 2);

    CHECK_MPI(MPI_Win_free(&win));
    CHECK(cuMemFree(dorig) == 0, "cuMemFree origin");
    REPORT_OK();
    if (rank == 0)
        printf("SUMMARY rma_device np=%d: %d passed, 0 failed\n", size, passed);
    MPI_Finalize();
    if (on_device)
        CHECK(cuMemFree(dmem) == 0, "cuMemFree");
    cuDevicePrimaryCtxRelease(dev);
    return 0;
}
