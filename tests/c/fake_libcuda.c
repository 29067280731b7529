/*
 * A stand-in for libcuda.so.1 with the few driver calls bench/suite uses,
 * for machines without a GPU: "device" memory is host memory from malloc,
 * tagged so that every copy and free can be checked against the allocations.
 * Only the suite's CUDA plumbing is exercised (dlopen, context set-up,
 * allocation, copies, validation through device copies); gmpi and the other
 * MPIs see host memory. At exit it prints the calls it served to stderr,
 * "fake-cuda: alloc A free F htod H dtoh D memset M", and any misuse
 * (unknown pointer, out-of-range copy, leak) as "fake-cuda: ERROR ...".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
#define MAX_ALLOCS 4096

static struct {
    char *base;
    size_t size;
} allocs[MAX_ALLOCS];
static unsigned long n_alloc, n_free, n_htod, n_dtoh, n_memset, errors;
static int initialized, ctx_current;

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
    return 0;
}

int cuCtxSetCurrent(void *ctx) {
    ctx_current = ctx == (void *)&ctx_current;
    return ctx_current ? 0 : 201;
}

int cuCtxSynchronize(void) {
    return ready() ? 0 : 3;
}

static int alloc(CUdeviceptr *p, size_t n) {
    if (!ready())
        return 3;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocs[i].base) {
            allocs[i].base = malloc(n ? n : 1);
            allocs[i].size = n;
            *p = (CUdeviceptr)allocs[i].base;
            n_alloc++;
            return allocs[i].base ? 0 : 2;
        }
    }
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
}

int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    return alloc(p, n);
}

int cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags) {
    return alloc(p, n);
}

int cuMemFree_v2(CUdeviceptr p) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].base && (CUdeviceptr)allocs[i].base == p) {
            free(allocs[i].base);
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

int cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
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

__attribute__((destructor)) static void report(void) {
    if (!initialized)
        return;
    if (n_alloc != n_free)
        errors++, fprintf(stderr, "fake-cuda: ERROR %lu allocations, %lu freed\n", n_alloc, n_free);
    fprintf(stderr, "fake-cuda: alloc %lu free %lu htod %lu dtoh %lu memset %lu errors %lu\n", n_alloc, n_free,
            n_htod, n_dtoh, n_memset, errors);
}
