/*
 * dt_copybw: the copy rates gmpi's device paths are measured against, on
 * one GPU without MPI: cuMemcpyDtoD between two device buffers, and
 * cuMemcpyHtoD / cuMemcpyDtoH from / to pinned host memory (cuMemHostAlloc),
 * and from / to pageable memory, at each size given (default 8 B, 4 MiB,
 * 64 MiB). Prints "copy KIND SIZE GB/s us-per-copy" lines (best of 5 runs of
 * N copies).
 *
 *   dt_copybw [SIZE...]
 */
#define DT_NO_MPI
#include "dt.h"

static double rate(const char *what, size_t size, void *dst, void *src) {
    int n = size <= 4096 ? 2000 : size <= (4u << 20) ? 100 : 20;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
        double t0 = dt_now();
        for (int i = 0; i < n; i++) {
            CUresult rc;
            if (!strcmp(what, "DtoD"))
                rc = cu.MemcpyDtoD((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, size);
            else if (!strncmp(what, "HtoD", 4))
                rc = cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, size);
            else
                rc = cu.MemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, size);
            cu_check(rc, what);
        }
        cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
        double t = (dt_now() - t0) / n;
        if (t < best)
            best = t;
    }
    printf("copy %-13s %10zu %10.2f GB/s %10.2f us\n", what, size, (double)size / best / 1e9, best * 1e6);
    fflush(stdout);
    return best;
}

int main(int argc, char **argv) {
    dt_prog = "dt_copybw";
    size_t def[] = {8, 4u << 20, 64u << 20}, sizes[32];
    int ns = 0;
    for (int i = 1; i < argc && ns < 32; i++)
        sizes[ns++] = dt_parse_size(argv[i]);
    if (!ns)
        for (; ns < 3; ns++)
            sizes[ns] = def[ns];
    dt_cuda_setup(0);
    if (!cu.MemcpyDtoD)
        dt_die("the CUDA driver library has no cuMemcpyDtoD_v2");
    printf("# dt_copybw: best of 5, CUDA driver API, synchronous copies on one GPU\n");
    for (int i = 0; i < ns; i++) {
        size_t s = sizes[i];
        void *a = dt_alloc(s, 'D'), *b = dt_alloc(s, 'D'), *p = dt_alloc(s, 'P'), *h = dt_alloc(s, 'H');
        memset(p, 1, s);
        memset(h, 1, s);
        rate("DtoD", s, a, b);
        rate("HtoD-pinned", s, a, p);
        rate("DtoH-pinned", s, p, a);
        rate("HtoD-pageable", s, a, h);
        rate("DtoH-pageable", s, h, a);
        dt_free(a, 'D'), dt_free(b, 'D'), dt_free(p, 'P'), dt_free(h, 'H');
    }
    dt_cuda_teardown();
    return 0;
}
