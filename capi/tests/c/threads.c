/* MPI_THREAD_MULTIPLE: several threads of every rank call MPI at once.
 *  1. Each of T threads owns a duplicate of MPI_COMM_WORLD and hammers it
 *     with point-to-point (sendrecv around a ring, isend/irecv to every
 *     peer), blocking and non-blocking collectives (allreduce, bcast,
 *     iallreduce, barrier): every value is checked.
 *  2. The osu_latency_mt shape: on ranks 0 and 1, T threads ping-pong on
 *     MPI_COMM_WORLD with one tag per size (any thread may match any
 *     message), small (eager) and large (rendezvous) messages.
 *  3. Threads make communicators (dup, split, create) at the same time.
 *  4. Blocking calls progress each other: one thread blocks in MPI_Recv from
 *     this rank, another sends it the message later; one thread blocks in
 *     MPI_Barrier on one communicator while another does point-to-point on
 *     another.
 * Any np >= 1. */
#define _POSIX_C_SOURCE 200809L
#define TEST_NAME "threads"
#include "check.h"

#include <pthread.h>
#include <time.h>

#define T 4
#ifndef ITERS
#define ITERS 60
#endif

static int rank, size;
static MPI_Comm comms[T];

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *hammer(void *arg)
{
    int t = (int)(long)arg;
    MPI_Comm c = comms[t];
    int flag = 1;
    MPI_Is_thread_main(&flag);
    CHECK(!flag, "thread %d: MPI_Is_thread_main says main", t);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int *sbuf = malloc(sizeof(int) * (size_t)size), *rbuf = malloc(sizeof(int) * (size_t)size);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)size);
    for (int i = 0; i < ITERS; i++) {
        /* ring */
        int out = rank * 1000 + t * 100 + i % 100, in = -1;
        CHECK_MPI(MPI_Sendrecv(&out, 1, MPI_INT, right, i, &in, 1, MPI_INT, left, i, c,
                               MPI_STATUS_IGNORE));
        CHECK(in == left * 1000 + t * 100 + i % 100, "thread %d iter %d ring got %d", t, i, in);
        /* every peer */
        for (int p = 0; p < size; p++) {
            sbuf[p] = rank * 10000 + p * 10 + t;
            rbuf[p] = -1;
            CHECK_MPI(MPI_Irecv(&rbuf[p], 1, MPI_INT, p, 5, c, &reqs[p]));
        }
        for (int p = 0; p < size; p++)
            CHECK_MPI(MPI_Isend(&sbuf[p], 1, MPI_INT, p, 5, c, &reqs[size + p]));
        CHECK_MPI(MPI_Waitall(2 * size, reqs, MPI_STATUSES_IGNORE));
        for (int p = 0; p < size; p++)
            CHECK(rbuf[p] == p * 10000 + rank * 10 + t, "thread %d from %d got %d", t, p, rbuf[p]);
        /* collectives */
        long v = rank + t + i, sum = 0;
        CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, c));
        long want = (long)size * (size - 1) / 2 + (long)size * (t + i);
        CHECK(sum == want, "thread %d allreduce %ld != %ld", t, sum, want);
        int root = i % size, b = rank == root ? 7 * i + t : -1;
        CHECK_MPI(MPI_Bcast(&b, 1, MPI_INT, root, c));
        CHECK(b == 7 * i + t, "thread %d bcast got %d", t, b);
        double d[64], r[64];
        for (int k = 0; k < 64; k++)
            d[k] = rank + k;
        MPI_Request q;
        CHECK_MPI(MPI_Iallreduce(d, r, 64, MPI_DOUBLE, MPI_MAX, c, &q));
        CHECK_MPI(MPI_Wait(&q, MPI_STATUS_IGNORE));
        CHECK(r[63] == size - 1 + 63, "thread %d iallreduce %g", t, r[63]);
        if (i % 10 == 0)
            CHECK_MPI(MPI_Barrier(c));
    }
    free(sbuf);
    free(rbuf);
    free(reqs);
    return NULL;
}

/* Every thread makes communicators from its own at the same time as the
 * others (dup, split, create): each must get a context of its own, so
 * traffic on it reaches only its own thread's peers. */
static void *creator(void *arg)
{
    int t = (int)(long)arg;
    MPI_Comm c = comms[t];
    MPI_Group g;
    CHECK_MPI(MPI_Comm_group(c, &g));
    for (int i = 0; i < 10; i++) {
        MPI_Comm d, sp, cr;
        CHECK_MPI(MPI_Comm_dup(c, &d));
        CHECK_MPI(MPI_Comm_split(c, rank % 2, -rank, &sp));
        CHECK_MPI(MPI_Comm_create(c, g, &cr));
        MPI_Comm made[3] = {d, sp, cr};
        for (int k = 0; k < 3; k++) {
            int n, me;
            MPI_Comm_size(made[k], &n);
            MPI_Comm_rank(made[k], &me);
            long v = 1000L * t + k, sum = 0;
            CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, made[k]));
            CHECK(sum == n * v, "thread %d comm %d: allreduce %ld != %ld", t, k, sum, n * v);
            int out = t * 100 + me, in = -1;
            CHECK_MPI(MPI_Sendrecv(&out, 1, MPI_INT, (me + 1) % n, 9, &in, 1, MPI_INT, (me + n - 1) % n, 9,
                                   made[k], MPI_STATUS_IGNORE));
            CHECK(in == t * 100 + (me + n - 1) % n, "thread %d comm %d: got %d", t, k, in);
            CHECK_MPI(MPI_Comm_free(&made[k]));
        }
    }
    CHECK_MPI(MPI_Group_free(&g));
    return NULL;
}

/* osu_latency_mt: ranks 0 and 1, every thread pings with one tag. */
#define PINGS 50
static int sizes[2] = {8, 256 * 1024};
static void *pingpong(void *arg)
{
    int t = (int)(long)arg;
    for (int s = 0; s < 2; s++) {
        int n = sizes[s];
        char *buf = malloc((size_t)n);
        for (int i = 0; i < PINGS; i++) {
            if (rank == 0) {
                memset(buf, 'a' + s, (size_t)n);
                CHECK_MPI(MPI_Send(buf, n, MPI_CHAR, 1, 1 + s, MPI_COMM_WORLD));
                memset(buf, 0, (size_t)n);
                CHECK_MPI(MPI_Recv(buf, n, MPI_CHAR, 1, 1 + s, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(buf[0] == 'A' + s && buf[n - 1] == 'A' + s, "thread %d pong of %d bytes", t, n);
            } else {
                MPI_Status st;
                CHECK_MPI(MPI_Recv(buf, n, MPI_CHAR, 0, 1 + s, MPI_COMM_WORLD, &st));
                CHECK(buf[0] == 'a' + s && buf[n - 1] == 'a' + s, "thread %d ping of %d bytes", t, n);
                int cnt = -1;
                MPI_Get_count(&st, MPI_CHAR, &cnt);
                CHECK(cnt == n, "thread %d count %d != %d", t, cnt, n);
                memset(buf, 'A' + s, (size_t)n);
                CHECK_MPI(MPI_Send(buf, n, MPI_CHAR, 0, 1 + s, MPI_COMM_WORLD));
            }
        }
        free(buf);
    }
    return NULL;
}

static volatile int recv_done = 0;
static void *blocked_receiver(void *arg)
{
    (void)arg;
    int v = -1;
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, rank, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(v == 4242 + rank, "self receive got %d", v);
    __atomic_store_n(&recv_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *barrier_thread(void *arg)
{
    (void)arg;
    CHECK_MPI(MPI_Barrier(comms[0]));
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = -1;
    CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    int q = -1, main_flag = 0;
    CHECK_MPI(MPI_Query_thread(&q));
    CHECK(q == MPI_THREAD_MULTIPLE, "query %d", q);
    CHECK_MPI(MPI_Is_thread_main(&main_flag));
    CHECK(main_flag, "main thread");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int t = 0; t < T; t++)
        CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));

    pthread_t th[T];
    for (int t = 0; t < T; t++)
        CHECK(pthread_create(&th[t], NULL, hammer, (void *)(long)t) == 0, "pthread_create");
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);

    for (int t = 0; t < T; t++)
        CHECK(pthread_create(&th[t], NULL, creator, (void *)(long)t) == 0, "pthread_create");
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);

    if (size >= 2 && rank < 2) {
        for (int t = 0; t < T; t++)
            CHECK(pthread_create(&th[t], NULL, pingpong, (void *)(long)t) == 0, "pthread_create");
        for (int t = 0; t < T; t++)
            pthread_join(th[t], NULL);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

    /* A thread blocked in MPI_Recv; the main thread sends it the message. */
    pthread_t r;
    CHECK(pthread_create(&r, NULL, blocked_receiver, NULL) == 0, "pthread_create");
    nap_ms(100);
    CHECK(!__atomic_load_n(&recv_done, __ATOMIC_SEQ_CST), "received before the send");
    int v = 4242 + rank;
    CHECK_MPI(MPI_Send(&v, 1, MPI_INT, rank, 99, MPI_COMM_WORLD));
    pthread_join(r, NULL);

    /* A thread blocked in a barrier on comms[0] while the main thread does
     * point-to-point on comms[1]. */
    pthread_t b;
    CHECK(pthread_create(&b, NULL, barrier_thread, NULL) == 0, "pthread_create");
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int i = 0; i < 20; i++) {
        int out = rank + i, in = -1;
        CHECK_MPI(MPI_Sendrecv(&out, 1, MPI_INT, right, 3, &in, 1, MPI_INT, left, 3, comms[1],
                               MPI_STATUS_IGNORE));
        CHECK(in == left + i, "sendrecv beside a barrier got %d", in);
    }
    pthread_join(b, NULL);

    for (int t = 0; t < T; t++)
        CHECK_MPI(MPI_Comm_free(&comms[t]));
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
