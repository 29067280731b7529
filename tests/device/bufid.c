/*
 * dt_bufid: what btl-ib's registration cache of GPU memory stands on, asked
 * of the driver directly by every rank (MPI only reduces the verdicts). The cache serves a request from a kept
 * registration only under the allocation's CUDA buffer id, and registers
 * whole allocations through a dma-buf of their range:
 *
 * - an address freed and allocated again (cuMemAlloc, and stream-ordered
 *   cuMemAllocAsync, which every cudarc CudaSlice uses) must come back with
 *   another CU_POINTER_ATTRIBUTE_BUFFER_ID: PASS or FAIL (and a "NOTE" where
 *   the driver never hands the address out again in 16 tries);
 * - whether cuMemGetHandleForAddressRange exports each kind's whole
 *   allocation, odd sizes included, rounded out to 64 KiB as gmpi asks:
 *   "NOTE" lines only, from rank 0 (GPUs without dma-buf say why).
 *
 *   dt_bufid
 */
#include "dt.h"

#include <unistd.h>

enum { ATTR_BUFFER_ID = 7, ATTR_RANGE_START = 11, ATTR_RANGE_SIZE = 12 };

static CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
static CUresult (*GetHandleForAddressRange)(void *, CUdeviceptr, size_t, int, unsigned long long);

static CUdeviceptr alloc(char kind, size_t n) {
    CUdeviceptr p = 0;
    if (kind == 'A') {
        cu_check(cu.MemAllocAsync(&p, n, cu.stream), "cuMemAllocAsync");
        cu_check(cu.StreamSynchronize(cu.stream), "cuStreamSynchronize");
    } else {
        cu_check(cu.MemAlloc(&p, n), "cuMemAlloc");
    }
    return p;
}

static void release(char kind, CUdeviceptr p) {
    if (kind == 'A') {
        cu_check(cu.MemFreeAsync(p, cu.stream), "cuMemFreeAsync");
        cu_check(cu.StreamSynchronize(cu.stream), "cuStreamSynchronize");
    } else {
        cu_check(cu.MemFree(p), "cuMemFree");
    }
}

static unsigned long long buffer_id(CUdeviceptr p) {
    unsigned long long id = 0;
    cu_check(PointerGetAttribute(&id, ATTR_BUFFER_ID, p), "cuPointerGetAttribute(BUFFER_ID)");
    return id;
}

static const char *kind_name(char kind) { return kind == 'A' ? "cuMemAllocAsync" : "cuMemAlloc"; }

static void reallocated_address_has_new_id(char kind) {
    const size_t n = 4u << 20;
    CUdeviceptr p = alloc(kind, n), held[16], q = 0;
    unsigned long long id = buffer_id(p);
    release(kind, p);
    int k = 0;
    for (; k < 16; k++) {
        q = alloc(kind, n);
        if (q == p)
            break;
        held[k] = q;
    }
    size_t bad = 0;
    if (k == 16) {
        printf("NOTE rank %d %s: %#llx not handed out again in 16 allocations\n", dt_rank(), kind_name(kind), p);
    } else {
        unsigned long long again = buffer_id(q);
        if (again == id) {
            printf("rank %d %s: %#llx allocated again with the same buffer id %llu\n", dt_rank(), kind_name(kind), p,
                   id);
            bad = 1;
        }
        release(kind, q);
    }
    while (k-- > 0)
        release(kind, held[k]);
    dt_result(bad, "%s: an address freed and allocated again has a new buffer id", kind_name(kind));
}

static void whole_allocation_exports(char kind, size_t n) {
    CUdeviceptr p = alloc(kind, n), start = 0;
    size_t size = 0;
    cu_check(PointerGetAttribute(&start, ATTR_RANGE_START, p + n / 2), "cuPointerGetAttribute(RANGE_START_ADDR)");
    cu_check(PointerGetAttribute(&size, ATTR_RANGE_SIZE, p + n / 2), "cuPointerGetAttribute(RANGE_SIZE)");
    const unsigned long long page = 1u << 16;
    unsigned long long lo = start & ~(page - 1), hi = (start + size + page - 1) & ~(page - 1);
    if (dt_rank() != 0) {
        /* rank 0 says it */
    } else if (!GetHandleForAddressRange) {
        printf("NOTE %s %zu B: no cuMemGetHandleForAddressRange in this driver\n", kind_name(kind), n);
    } else {
        int fd = -1;
        CUresult rc = GetHandleForAddressRange(&fd, lo, hi - lo, 1 /* DMA_BUF_FD */, 0);
        const char *s = NULL;
        if (rc && cu.GetErrorString)
            cu.GetErrorString(rc, &s);
        printf("NOTE %s %zu B (range %#llx + %zu): dma-buf of the whole allocation, %llu B from %#llx: %s%s\n",
               kind_name(kind), n, start, size, hi - lo, lo, rc ? "refused: " : "exported",
               rc ? (s ? s : "unknown error") : "");
        if (fd >= 0)
            close(fd);
    }
    release(kind, p);
}

int main(int argc, char **argv) {
    dt_prog = "dt_bufid";
    dt_cuda_setup(0);
    MPI_Init(&argc, &argv);
    void *lib = dlopen(getenv("DT_LIBCUDA") && *getenv("DT_LIBCUDA") ? getenv("DT_LIBCUDA") : "libcuda.so.1",
                       RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        dt_die("cannot load the CUDA driver: %s", dlerror());
    PointerGetAttribute = (__typeof__(PointerGetAttribute))cu_sym(lib, "cuPointerGetAttribute", 1);
    GetHandleForAddressRange = (__typeof__(GetHandleForAddressRange))cu_sym(lib, "cuMemGetHandleForAddressRange", 0);
    reallocated_address_has_new_id('D');
    if (cu.MemAllocAsync && cu.MemFreeAsync && cu.stream)
        reallocated_address_has_new_id('A');
    else if (dt_rank() == 0)
        printf("NOTE cuMemAllocAsync: not in this driver\n");
    whole_allocation_exports('D', (1u << 20) + 12345);
    whole_allocation_exports('D', 64u << 20);
    if (cu.MemAllocAsync && cu.MemFreeAsync && cu.stream) {
        whole_allocation_exports('A', (1u << 20) + 12345);
        whole_allocation_exports('A', 64u << 20);
    }
    fflush(stdout);
    int rc = dt_summary();
    MPI_Finalize();
    dt_cuda_teardown();
    return rc;
}
