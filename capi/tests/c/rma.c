/* One-sided communication (MPI-3 RMA), every window flavor and every
 * synchronisation mode, checked against expected data at any np >= 1:
 * - Win_create + fence: Put around a ring, Get back, a vector target type;
 * - Win_allocate + lock/unlock: Accumulate(SUM) from every rank, exclusive
 *   and shared locks, Get_accumulate (SUM, NO_OP, REPLACE);
 * - Fetch_and_op under contention on one counter: the total is exact;
 *   Compare_and_swap as a ticket lock;
 * - post/start/complete/wait (and Win_test) around a ring;
 * - lock_all + Rput/Rget/Raccumulate/Rget_accumulate + flush;
 * - Win_allocate_shared: Win_shared_query, load/store, contiguity;
 * - Win_create_dynamic + Win_attach/detach, addressed by MPI_Get_address;
 * - passive-target progress: rank 0 polls its own memory with no MPI call
 *   while the others lock, put and unlock on it;
 * - accumulates of double complex and long double under contention (the
 *   C ABI's own kernels): exact totals;
 * - attributes, name, group, info, error handler, and the errors
 *   (MPI_ERR_RMA_SYNC, MPI_ERR_RMA_RANGE, MPI_ERR_LOCKTYPE, MPI_ERR_WIN).
 * Plain MPI-3; built by MPICH's mpicc and by gmpicc. */
#define _POSIX_C_SOURCE 200809L
#define TEST_NAME "rma"
#include "check.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

static int rank, np;

static int err_class(int rc)
{
    int c = -1;
    MPI_Error_class(rc, &c);
    return c;
}

static void fence_ring(void)
{
    int *buf = malloc(4 * sizeof(int));
    MPI_Win win;
    for (int i = 0; i < 4; i++)
        buf[i] = -1;
    CHECK_MPI(MPI_Win_create(buf, 4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                             &win));
    int right = (rank + 1) % np, left = (rank + np - 1) % np;
    int mine[2] = {rank * 10, rank * 10 + 1};
    CHECK_MPI(MPI_Win_fence(0, win));
    CHECK_MPI(MPI_Put(mine, 2, MPI_INT, right, 1, 2, MPI_INT, win));
    CHECK_MPI(MPI_Win_fence(0, win));
    CHECK(buf[0] == -1 && buf[1] == left * 10 && buf[2] == left * 10 + 1 && buf[3] == -1,
          "after the put ring: %d %d %d %d", buf[0], buf[1], buf[2], buf[3]);
    /* Get the right neighbour's slots 1..2 back. */
    int got[2] = {0, 0};
    CHECK_MPI(MPI_Get(got, 2, MPI_INT, right, 1, 2, MPI_INT, win));
    CHECK_MPI(MPI_Win_fence(0, win));
    CHECK(got[0] == rank * 10 && got[1] == rank * 10 + 1, "get: %d %d", got[0], got[1]);
    /* A strided target: slots 0 and 2 of the right neighbour. */
    MPI_Datatype vec;
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int two[2] = {100 + rank, 200 + rank};
    CHECK_MPI(MPI_Put(two, 2, MPI_INT, right, 0, 1, vec, win));
    CHECK_MPI(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    CHECK(buf[0] == 100 + left && buf[1] == left * 10 && buf[2] == 200 + left &&
              buf[3] == -1,
          "vector put: %d %d %d %d", buf[0], buf[1], buf[2], buf[3]);
    MPI_Type_free(&vec);

    /* Attributes of a created window. */
    void *base;
    MPI_Aint *size;
    int *du, *flavor, *model, flag;
    CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
    CHECK(flag && base == buf, "MPI_WIN_BASE");
    CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_SIZE, &size, &flag));
    CHECK(flag && *size == 4 * (MPI_Aint)sizeof(int), "MPI_WIN_SIZE %ld", (long)*size);
    CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &du, &flag));
    CHECK(flag && *du == (int)sizeof(int), "MPI_WIN_DISP_UNIT");
    CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_CREATE, "MPI_WIN_CREATE_FLAVOR %d", *flavor);
    CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag));
    CHECK(flag && (*model == MPI_WIN_UNIFIED || *model == MPI_WIN_SEPARATE), "MPI_WIN_MODEL");

    MPI_Group g, wg;
    int cmp;
    CHECK_MPI(MPI_Win_get_group(win, &g));
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_compare(g, wg, &cmp);
    CHECK(cmp == MPI_IDENT, "window group");
    MPI_Group_free(&g);
    MPI_Group_free(&wg);

    char name[MPI_MAX_OBJECT_NAME];
    int len;
    CHECK_MPI(MPI_Win_set_name(win, "ring"));
    CHECK_MPI(MPI_Win_get_name(win, name, &len));
    CHECK(len == 4 && strcmp(name, "ring") == 0, "name %s", name);
    MPI_Info info;
    CHECK_MPI(MPI_Win_get_info(win, &info));
    MPI_Info_free(&info);

    CHECK_MPI(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL, "Win_free sets MPI_WIN_NULL");
    free(buf);
}

static void locks_and_accumulates(void)
{
    long *mem;
    MPI_Win win;
    CHECK_MPI(MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                               &win));
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win));
    for (int i = 0; i < 8; i++)
        mem[i] = 0;
    CHECK_MPI(MPI_Win_unlock(rank, win));
    MPI_Barrier(MPI_COMM_WORLD);

    /* Every rank adds (rank+1) to slots 0..3 of rank 0, under a shared lock. */
    long add[4];
    for (int i = 0; i < 4; i++)
        add[i] = rank + 1;
    for (int k = 0; k < 5; k++) {
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK_MPI(MPI_Accumulate(add, 4, MPI_LONG, 0, 0, 4, MPI_LONG, MPI_SUM, win));
        CHECK_MPI(MPI_Win_unlock(0, win));
    }
    /* Fetch_and_op on one counter: exact under contention. */
    long one = 1, old;
    for (int k = 0; k < 50; k++) {
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK_MPI(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 4, MPI_SUM, win));
        CHECK_MPI(MPI_Win_unlock(0, win));
        CHECK(old >= 0 && old < 50L * np, "fetched %ld", old);
    }
    /* Compare_and_swap: each rank claims slot 5 once, in some order. */
    long want = rank + 1, cmpv, res;
    int tries = 0;
    for (;;) {
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        CHECK_MPI(MPI_Get(&cmpv, 1, MPI_LONG, 0, 5, 1, MPI_LONG, win));
        CHECK_MPI(MPI_Win_unlock(0, win));
        long next = cmpv * 100 + want;
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        CHECK_MPI(MPI_Compare_and_swap(&next, &cmpv, &res, MPI_LONG, 0, 5, win));
        CHECK_MPI(MPI_Win_unlock(0, win));
        if (res == cmpv)
            break;
        CHECK(++tries < 100000, "compare and swap never won");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        long want_sum = 5L * np * (np + 1) / 2;
        for (int i = 0; i < 4; i++)
            CHECK(mem[i] == want_sum, "slot %d: %ld, want %ld", i, mem[i], want_sum);
        CHECK(mem[4] == 50L * np, "counter %ld, want %ld", mem[4], 50L * np);
        /* Slot 5 holds each rank's id once, as base-100 digits. */
        long v = mem[5], seen = 0;
        for (int i = 0; i < np; i++) {
            long d = v % 100;
            v /= 100;
            CHECK(d >= 1 && d <= np && !(seen & (1L << d)), "CAS digits %ld", mem[5]);
            seen |= 1L << d;
        }
        CHECK_MPI(MPI_Win_unlock(0, win));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* Get_accumulate: SUM returns the old value, NO_OP reads, REPLACE swaps. */
    if (rank == np - 1) {
        long v[2] = {7, 8}, r[2] = {0, 0};
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        CHECK_MPI(MPI_Get_accumulate(v, 2, MPI_LONG, r, 2, MPI_LONG, 0, 6, 2, MPI_LONG, MPI_SUM,
                                     win));
        CHECK_MPI(MPI_Win_flush(0, win));
        CHECK(r[0] == 0 && r[1] == 0, "get_accumulate old %ld %ld", r[0], r[1]);
        CHECK_MPI(MPI_Get_accumulate(NULL, 0, MPI_LONG, r, 2, MPI_LONG, 0, 6, 2, MPI_LONG,
                                     MPI_NO_OP, win));
        CHECK_MPI(MPI_Win_flush(0, win));
        CHECK(r[0] == 7 && r[1] == 8, "no_op %ld %ld", r[0], r[1]);
        long z[2] = {-1, -2};
        CHECK_MPI(MPI_Get_accumulate(z, 2, MPI_LONG, r, 2, MPI_LONG, 0, 6, 2, MPI_LONG,
                                     MPI_REPLACE, win));
        CHECK_MPI(MPI_Win_flush(0, win));
        CHECK(r[0] == 7 && r[1] == 8, "replace returned %ld %ld", r[0], r[1]);
        CHECK_MPI(MPI_Get(r, 2, MPI_LONG, 0, 6, 2, MPI_LONG, win));
        CHECK_MPI(MPI_Win_flush(0, win));
        CHECK(r[0] == -1 && r[1] == -2, "after replace %ld %ld", r[0], r[1]);
        CHECK_MPI(MPI_Win_unlock(0, win));
    }
    int *flavor, flag;
    CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE, "allocate flavor %d", *flavor);
    CHECK_MPI(MPI_Win_free(&win));
}

static void pscw_ring(void)
{
    int buf[2] = {-1, -1};
    MPI_Win win;
    CHECK_MPI(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Group world, left_g, right_g;
    int right = (rank + 1) % np, left = (rank + np - 1) % np;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &left, &left_g);
    MPI_Group_incl(world, 1, &right, &right_g);
    for (int round = 0; round < 3; round++) {
        /* Expose to the left neighbour, access the right one. */
        CHECK_MPI(MPI_Win_post(left_g, 0, win));
        CHECK_MPI(MPI_Win_start(right_g, 0, win));
        int v = rank * 100 + round;
        CHECK_MPI(MPI_Put(&v, 1, MPI_INT, right, round % 2, 1, MPI_INT, win));
        CHECK_MPI(MPI_Win_complete(win));
        if (round == 2) {
            int flag = 0;
            while (!flag)
                CHECK_MPI(MPI_Win_test(win, &flag));
        } else {
            CHECK_MPI(MPI_Win_wait(win));
        }
        CHECK(buf[round % 2] == left * 100 + round, "pscw round %d: %d", round, buf[round % 2]);
    }
    MPI_Group_free(&left_g);
    MPI_Group_free(&right_g);
    MPI_Group_free(&world);
    CHECK_MPI(MPI_Win_free(&win));
}

static void lock_all_requests(void)
{
    double *mem;
    MPI_Win win;
    CHECK_MPI(MPI_Win_allocate(np * sizeof(double), sizeof(double), MPI_INFO_NULL,
                               MPI_COMM_WORLD, &mem, &win));
    for (int i = 0; i < np; i++)
        mem[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_Win_lock_all(0, win));
    MPI_Request reqs[4];
    double v = rank + 0.5, got = -1, acc = 1.0, old = -1;
    for (int t = 0; t < np; t++) {
        CHECK_MPI(MPI_Rput(&v, 1, MPI_DOUBLE, t, rank, 1, MPI_DOUBLE, win, &reqs[0]));
        CHECK_MPI(MPI_Wait(&reqs[0], MPI_STATUS_IGNORE));
    }
    CHECK_MPI(MPI_Win_flush_all(win));
    MPI_Barrier(MPI_COMM_WORLD);
    int t = (rank + 1) % np;
    CHECK_MPI(MPI_Rget(&got, 1, MPI_DOUBLE, t, rank, 1, MPI_DOUBLE, win, &reqs[0]));
    CHECK_MPI(MPI_Wait(&reqs[0], MPI_STATUS_IGNORE));
    /* MPICH 4.0.2 at np 3 shifts rank 1's 24-byte MPI_Win_allocate memory by
     * one element for remote origins (rank 1 sees 1.5 2.5 0 where the others
     * put 0.5 1.5 2.5); np 1, 2, 4 pass. */
    CHECK_KNOWN_BUG(got == rank + 0.5, "rget %g", got);
    /* (A get and an accumulate on one location must not overlap.) */
    CHECK_MPI(MPI_Raccumulate(&acc, 1, MPI_DOUBLE, t, rank, 1, MPI_DOUBLE, MPI_SUM, win,
                              &reqs[1]));
    CHECK_MPI(MPI_Wait(&reqs[1], MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Win_flush(t, win));
    CHECK_MPI(MPI_Rget_accumulate(NULL, 0, MPI_DOUBLE, &old, 1, MPI_DOUBLE, t, rank, 1,
                                  MPI_DOUBLE, MPI_NO_OP, win, &reqs[2]));
    CHECK_MPI(MPI_Wait(&reqs[2], MPI_STATUS_IGNORE));
    CHECK_KNOWN_BUG(old == rank + 1.5, "rget_accumulate %g", old);
    CHECK_MPI(MPI_Win_flush_local(t, win));
    CHECK_MPI(MPI_Win_unlock_all(win));
    CHECK_MPI(MPI_Win_free(&win));
}

static void shared_window(void)
{
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int nr, nn;
    MPI_Comm_rank(node, &nr);
    MPI_Comm_size(node, &nn);
    int *mine;
    MPI_Win win;
    MPI_Aint sz = (nr + 1) * sizeof(int);
    CHECK_MPI(MPI_Win_allocate_shared(sz, sizeof(int), MPI_INFO_NULL, node, &mine, &win));
    CHECK_MPI(MPI_Win_lock_all(0, win));
    for (int i = 0; i <= nr; i++)
        mine[i] = nr * 1000 + i;
    CHECK_MPI(MPI_Win_sync(win));
    MPI_Barrier(node);
    CHECK_MPI(MPI_Win_sync(win));
    for (int r = 0; r < nn; r++) {
        MPI_Aint rsz;
        int rdu;
        int *p;
        CHECK_MPI(MPI_Win_shared_query(win, r, &rsz, &rdu, &p));
        CHECK(rsz == (MPI_Aint)((r + 1) * sizeof(int)) && rdu == (int)sizeof(int),
              "shared_query %d: %ld %d", r, (long)rsz, rdu);
        for (int i = 0; i <= r; i++)
            CHECK(p[i] == r * 1000 + i, "rank %d slot %d: %d", r, i, p[i]);
        if (r > 0) {
            int *q;
            CHECK_MPI(MPI_Win_shared_query(win, r - 1, &rsz, &rdu, &q));
            CHECK(q + r == p, "shared memory is contiguous by default");
        }
    }
    CHECK_MPI(MPI_Win_unlock_all(win));
    int *flavor, flag;
    CHECK_MPI(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_SHARED, "shared flavor %d", *flavor);
    CHECK_MPI(MPI_Win_free(&win));
    MPI_Comm_free(&node);
}

static void dynamic_window(void)
{
    MPI_Win win;
    CHECK_MPI(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    int *region = malloc(4 * sizeof(int));
    for (int i = 0; i < 4; i++)
        region[i] = 0;
    CHECK_MPI(MPI_Win_attach(win, region, 4 * sizeof(int)));
    MPI_Aint mine, *all = malloc(np * sizeof(MPI_Aint));
    MPI_Get_address(region, &mine);
    MPI_Allgather(&mine, 1, MPI_AINT, all, 1, MPI_AINT, MPI_COMM_WORLD);
    int right = (rank + 1) % np, left = (rank + np - 1) % np;
    CHECK_MPI(MPI_Win_fence(0, win));
    int v = 77 + rank;
    CHECK_MPI(MPI_Put(&v, 1, MPI_INT, right, MPI_Aint_add(all[right], 2 * sizeof(int)), 1,
                      MPI_INT, win));
    CHECK_MPI(MPI_Win_fence(0, win));
    CHECK(region[2] == 77 + left, "dynamic put: %d", region[2]);
    CHECK_MPI(MPI_Win_fence(0, win));
    CHECK_MPI(MPI_Win_detach(win, region));
    CHECK_MPI(MPI_Win_free(&win));
    free(region);
    free(all);
}

/* Rank 0 computes (no MPI call) until the others have written its window.
 * MPICH 4.0 without MPIR_CVAR_ASYNC_PROGRESS needs the target to call MPI
 * to make progress, so run_mpich.sh (which allows known quirks) skips it. */
static void passive_progress(void)
{
    if (allow_known_bugs_())
        return;
    volatile int *mem;
    MPI_Win win;
    CHECK_MPI(MPI_Win_allocate(np * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                               (void *)&mem, &win));
    for (int i = 0; i < np; i++)
        mem[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        time_t t0 = time(NULL);
        int done = 0;
        while (!done) {
            done = 1;
            for (int i = 1; i < np; i++)
                if (mem[i] != i)
                    done = 0;
            CHECK(time(NULL) - t0 < 60, "passive target: the others' puts never arrived");
            if (!done)
                nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
    } else {
        int v = rank;
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        CHECK_MPI(MPI_Put(&v, 1, MPI_INT, 0, rank, 1, MPI_INT, win));
        CHECK_MPI(MPI_Win_unlock(0, win));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_Win_free(&win));
}

/* Accumulates of types whose operations gmpi's C ABI brings itself (double
 * complex, long double): every rank adds to one element of rank 0 under a
 * shared lock, K times, with contention; then Get_accumulate reads it back.
 * Between nodes these combine at the origin under the target's accumulate
 * lock: the totals are exact only if that lock holds. */
static void complex_accumulates(void)
{
    enum { K = 50 };
    struct { double re, im; } *cz;
    long double *ld;
    MPI_Win wz, wl;
    CHECK_MPI(MPI_Win_allocate(16, 16, MPI_INFO_NULL, MPI_COMM_WORLD, &cz, &wz));
    CHECK_MPI(MPI_Win_allocate(sizeof(long double), sizeof(long double), MPI_INFO_NULL,
                               MPI_COMM_WORLD, &ld, &wl));
    cz->re = cz->im = 0;
    *ld = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    struct { double re, im; } one = {1.0, 2.0};
    long double half = 0.5L;
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, wz));
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, wl));
    for (int i = 0; i < K; i++) {
        CHECK_MPI(MPI_Accumulate(&one, 1, MPI_C_DOUBLE_COMPLEX, 0, 0, 1, MPI_C_DOUBLE_COMPLEX,
                                 MPI_SUM, wz));
        CHECK_MPI(MPI_Accumulate(&half, 1, MPI_LONG_DOUBLE, 0, 0, 1, MPI_LONG_DOUBLE, MPI_SUM,
                                 wl));
    }
    CHECK_MPI(MPI_Win_unlock(0, wl));
    CHECK_MPI(MPI_Win_unlock(0, wz));
    MPI_Barrier(MPI_COMM_WORLD);
    struct { double re, im; } got = {-1, -1};
    long double gl = -1, none = 0;
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, wz));
    CHECK_MPI(MPI_Get_accumulate(NULL, 0, MPI_C_DOUBLE_COMPLEX, &got, 1, MPI_C_DOUBLE_COMPLEX, 0,
                                 0, 1, MPI_C_DOUBLE_COMPLEX, MPI_NO_OP, wz));
    CHECK_MPI(MPI_Win_unlock(0, wz));
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, wl));
    CHECK_MPI(MPI_Get_accumulate(&none, 1, MPI_LONG_DOUBLE, &gl, 1, MPI_LONG_DOUBLE, 0, 0, 1,
                                 MPI_LONG_DOUBLE, MPI_SUM, wl));
    CHECK_MPI(MPI_Win_unlock(0, wl));
    CHECK(got.re == (double)(np * K) && got.im == 2.0 * np * K, "complex total %g%+gi", got.re,
          got.im);
    CHECK(gl == 0.5L * np * K, "long double total %Lg", gl);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_Win_free(&wl));
    CHECK_MPI(MPI_Win_free(&wz));
}

static void errors(void)
{
    int buf[4] = {0};
    MPI_Win win;
    CHECK_MPI(MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    CHECK_MPI(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    MPI_Errhandler eh;
    CHECK_MPI(MPI_Win_get_errhandler(win, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "Win_get_errhandler");
    int v = 1;
    CHECK(err_class(MPI_Put(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, win)) == MPI_ERR_RMA_SYNC,
          "put outside an epoch");
    CHECK(err_class(MPI_Win_unlock(0, win)) == MPI_ERR_RMA_SYNC, "unlock without lock");
    CHECK(err_class(MPI_Win_complete(win)) == MPI_ERR_RMA_SYNC, "complete without start");
    CHECK(err_class(MPI_Win_wait(win)) == MPI_ERR_RMA_SYNC, "wait without post");
    {
        int c = err_class(MPI_Win_lock(12345, 0, 0, win));
        /* MPICH 4.0 says MPI_ERR_ARG; the standard's class is MPI_ERR_LOCKTYPE. */
        CHECK(c == MPI_ERR_LOCKTYPE || c == MPI_ERR_ARG, "bad lock type: class %d", c);
    }
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    /* Detecting it is optional (MPICH 4.0 does not, and writes past the end):
     * only checked when no known bug is allowed. */
    if (!allow_known_bugs_())
        CHECK(err_class(MPI_Put(&v, 1, MPI_INT, 0, 4, 1, MPI_INT, win)) == MPI_ERR_RMA_RANGE,
              "put past the window's end");
    CHECK(err_class(MPI_Put(&v, 1, MPI_INT, np, 0, 1, MPI_INT, win)) == MPI_ERR_RANK,
          "bad target rank");
    CHECK(err_class(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win)) == MPI_ERR_RMA_SYNC,
          "locking twice");
    CHECK_MPI(MPI_Put(&v, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win));
    CHECK_MPI(MPI_Win_unlock(0, win));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_Win_free(&win));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Win nul = MPI_WIN_NULL;
    CHECK(err_class(MPI_Win_fence(0, nul)) == MPI_ERR_WIN, "fence on MPI_WIN_NULL");
    CHECK(err_class(MPI_Win_create(buf, sizeof buf, 0, MPI_INFO_NULL, MPI_COMM_WORLD, &win)) ==
              MPI_ERR_DISP,
          "disp_unit 0");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    fence_ring();
    locks_and_accumulates();
    pscw_ring();
    lock_all_requests();
    shared_window();
    dynamic_window();
    passive_progress();
    complex_accumulates();
    errors();
    MPI_Barrier(MPI_COMM_WORLD);
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
