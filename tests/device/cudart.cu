/*
 * dt_cudart: the CUDA runtime API (cudaMalloc, cudaMallocAsync,
 * cudaMallocManaged) with gmpi, built on the GPU machine by run.sh:
 *   nvcc -O2 -I$PREFIX/include cudart.cu -o dt_cudart -L$PREFIX/lib -lmpi
 * A ring exchange and an allreduce (sum of floats), every byte checked.
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "dt_cudart: %s failed: %s\n", #x, cudaGetErrorString(e_));           \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
        }                                                                                        \
    } while (0)

static int rank_, nranks, passed, failed;
static cudaStream_t stream;

static void result(size_t bad, const char *name, size_t size) {
    unsigned long long mine = bad, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0) {
        printf("%s dt_cudart %s %zu B%s\n", all ? "FAIL" : "PASS", name, size, all ? " (wrong bytes)" : "");
        fflush(stdout);
    }
    all ? failed++ : passed++;
}

static void *alloc(int kind, size_t n) {
    void *p = NULL;
    if (kind == 0)
        CK(cudaMalloc(&p, n));
    else if (kind == 1) {
        CK(cudaMallocAsync(&p, n, stream));
        CK(cudaStreamSynchronize(stream));
    } else
        CK(cudaMallocManaged(&p, n));
    return p;
}

static void release(int kind, void *p) {
    if (kind == 1) {
        CK(cudaFreeAsync(p, stream));
        CK(cudaStreamSynchronize(stream));
    } else
        CK(cudaFree(p));
}

static unsigned char pat(unsigned seed, size_t i) {
    unsigned x = (unsigned)i * 2654435761u + seed * 40503u;
    return (unsigned char)(x >> 24 ^ x >> 8 ^ seed);
}

int main(int argc, char **argv) {
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    const char *lr = getenv("GMPI_LOCAL_RANK");
    CK(cudaSetDevice((lr ? atoi(lr) : 0) % (ndev ? ndev : 1)));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *names[] = {"cudaMalloc", "cudaMallocAsync", "cudaMallocManaged"};
    const size_t sizes[] = {1, 8 << 10, 64 << 10, 1 << 20, 64 << 20};
    unsigned seed = 1;
    for (int k = 0; k < 3; k++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t n = sizes[si];
            std::vector<unsigned char> h(n);
            seed += 7;
            for (size_t i = 0; i < n; i++)
                h[i] = pat(seed + rank_, i);
            void *s = alloc(k, n), *d = alloc(k, n);
            CK(cudaMemcpy(s, h.data(), n, cudaMemcpyHostToDevice));
            CK(cudaMemset(d, 0, n));
            CK(cudaDeviceSynchronize());
            MPI_Sendrecv(s, (int)n, MPI_BYTE, (rank_ + 1) % nranks, 1, d, (int)n, MPI_BYTE,
                         (rank_ + nranks - 1) % nranks, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CK(cudaDeviceSynchronize()); /* before the readback: nothing of the call may be in flight */
            CK(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost));
            size_t bad = 0;
            unsigned from = (unsigned)((rank_ + nranks - 1) % nranks);
            for (size_t i = 0; i < n; i++)
                bad += h[i] != pat(seed + from, i);
            char name[64];
            snprintf(name, sizeof name, "%s sendrecv", names[k]);
            result(bad, name, n);
            /* allreduce sum of floats (small integers: exact) */
            size_t cnt = n / sizeof(float);
            std::vector<float> f(cnt);
            for (size_t i = 0; i < cnt; i++)
                f[i] = (float)((i + rank_) % 100);
            CK(cudaMemcpy(s, f.data(), cnt * sizeof(float), cudaMemcpyHostToDevice));
            /* a pageable cudaMemcpy may return before its DMA lands: finish it before MPI reads s */
            CK(cudaDeviceSynchronize());
            MPI_Allreduce(s, d, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(f.data(), d, cnt * sizeof(float), cudaMemcpyDeviceToHost));
            bad = 0;
            for (size_t i = 0; i < cnt; i++) {
                float want = 0;
                for (int r = 0; r < nranks; r++)
                    want += (float)((i + r) % 100);
                bad += f[i] != want;
            }
            snprintf(name, sizeof name, "%s allreduce", names[k]);
            result(bad, name, n);
            release(k, s);
            release(k, d);
        }
    if (rank_ == 0)
        printf("SUMMARY dt_cudart np=%d: %d passed, %d failed\n", nranks, passed, failed);
    MPI_Finalize();
    CK(cudaStreamDestroy(stream));
    return failed ? 1 : 0;
}
