/* MPI_THREAD_SERIALIZED (and FUNNELED's main thread): several threads of a
 * rank take turns calling MPI, the program ordering their calls with its
 * own mutex and condition variable, as the thread level's contract asks.
 * Below MPI_THREAD_MULTIPLE gmpi takes no lock per call; this checks that
 * the calls of different threads still see each other's effects:
 *  1. T threads take turns in a fixed order; each turn is a ring exchange
 *     (isend/irecv/waitall with a direct request started by one thread and
 *     completed by the next), a blocking sendrecv, and an allreduce.
 *  2. A window is made mid-run (gmpi then starts a thread of its own and
 *     goes back to locking every call), puts through it under fences, then
 *     more turns with the window still open and after it is freed.
 * Any np >= 1. */
#define _POSIX_C_SOURCE 200809L
#define TEST_NAME "serialized"
#include "check.h"

#include <pthread.h>

#define T 3
#ifndef TURNS
#define TURNS 300
#endif

static int rank, size;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int turn;           /* whose turn: turn % T */
static MPI_Request carry[2]; /* started by one turn, completed by the next */
static int carry_out, carry_in = -1;
static int carried;        /* carry[] holds requests in flight */

/* One turn of thread t (the program's mutex is held). */
static void one_turn(int t, int k)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    if (carried) {
        CHECK_MPI(MPI_Waitall(2, carry, MPI_STATUSES_IGNORE));
        CHECK(carry_in == left * 100000 + (k - 1), "turn %d (thread %d): carried %d from rank %d",
              k, t, carry_in, left);
        carried = 0;
    }
    /* Started here, completed by the next thread's turn. */
    carry_out = rank * 100000 + k;
    carry_in = -1;
    CHECK_MPI(MPI_Irecv(&carry_in, 1, MPI_INT, left, 7, MPI_COMM_WORLD, &carry[1]));
    CHECK_MPI(MPI_Isend(&carry_out, 1, MPI_INT, right, 7, MPI_COMM_WORLD, &carry[0]));
    carried = 1;

    int out[4] = {rank, k, t, rank + k}, in[4] = {-1, -1, -1, -1};
    CHECK_MPI(MPI_Sendrecv(out, 4, MPI_INT, right, 8, in, 4, MPI_INT, left, 8, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    CHECK(in[0] == left && in[1] == k && in[2] == t && in[3] == left + k,
          "turn %d (thread %d): sendrecv got %d %d %d %d", k, t, in[0], in[1], in[2], in[3]);

    long v = rank + k, sum = 0;
    CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    long want = (long)size * (size - 1) / 2 + (long)size * k;
    CHECK(sum == want, "turn %d (thread %d): allreduce %ld, want %ld", k, t, sum, want);
}

/* Turns from..to-1 in thread order. */
static int upto;
static void *worker(void *arg)
{
    int t = (int)(long)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (turn < upto && turn % T != t)
            pthread_cond_wait(&cv, &mu);
        if (turn >= upto)
            break;
        one_turn(t, turn);
        turn++;
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void run_turns(int n)
{
    upto = turn + n;
    pthread_t th[T];
    for (long t = 0; t < T; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0, "pthread_create");
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    CHECK(turn == upto, "turns %d, want %d", turn, upto);
}

int main(int argc, char **argv)
{
    int provided = -1;
    CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided));
    CHECK(provided >= MPI_THREAD_SERIALIZED, "provided %d", provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    run_turns(TURNS);

    /* A window: gmpi's own progress thread starts. */
    int *base = NULL;
    MPI_Win win;
    CHECK_MPI(MPI_Win_allocate(sizeof(int) * 4, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                               &base, &win));
    for (int i = 0; i < 4; i++)
        base[i] = -1;
    CHECK_MPI(MPI_Win_fence(0, win));
    int mine = rank * 10 + 3;
    CHECK_MPI(MPI_Put(&mine, 1, MPI_INT, (rank + 1) % size, 1, 1, MPI_INT, win));
    CHECK_MPI(MPI_Win_fence(0, win));
    int left = (rank + size - 1) % size;
    CHECK(base[1] == left * 10 + 3, "window: %d, want %d", base[1], left * 10 + 3);

    run_turns(TURNS / 3);
    CHECK_MPI(MPI_Win_free(&win));
    run_turns(TURNS / 3);

    if (carried)
        CHECK_MPI(MPI_Waitall(2, carry, MPI_STATUSES_IGNORE));
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
