/* The hot paths of MPI_Send/Recv/Isend/Irecv/Ssend/Rsend, MPI_Allreduce and
 * MPI_Comm_rank/size on MPI_COMM_WORLD and MPI_COMM_SELF: every argument error still gets
 * its class, a message naming the call and the argument, and the error
 * handler of the communicator named (a user handler on WORLD,
 * MPI_ERRORS_RETURN on SELF); valid calls still work, and the full path
 * (derived types, duplicated communicators) agrees with the hot one. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wrank, fails, eh_calls, eh_code;
static MPI_Comm eh_comm;

#define EXPECT(call, cls) do { int rc_ = (call), c_ = -1; MPI_Error_class(rc_, &c_); \
    if (c_ != (cls)) { fprintf(stderr, "rank %d: line %d: %s returned class %d, expected %s (%d)\n", \
        wrank, __LINE__, #call, c_, #cls, cls); fails++; } } while (0)
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "rank %d: line %d: ", wrank, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); fails++; } } while (0)

static void handler(MPI_Comm *c, int *code, ...) {
    eh_calls++;
    eh_code = *code;
    eh_comm = *c;
}

/* The message of `code` mentions every one of the strings. */
static void expect_msg(int code, const char *a, const char *b) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(code, s, &n);
    CHECK(strstr(s, a) && strstr(s, b), "message \"%s\" lacks \"%s\" or \"%s\"", s, a, b);
}

/* `call` fails through the user handler on WORLD with class `cls`. */
#define VIA_HANDLER(call, cls, w1, w2) do { eh_calls = 0; int rc_ = (call), c_ = -1; \
    MPI_Error_class(rc_, &c_); \
    CHECK(c_ == (cls) && eh_calls == 1 && eh_comm == MPI_COMM_WORLD, \
          "%s: class %d (want %d), handler calls %d", #call, c_, cls, eh_calls); \
    expect_msg(rc_, w1, w2); } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size, r = -1, s = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Errhandler eh;
    MPI_Comm_create_errhandler(handler, &eh);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int buf[4] = {0, 0, 0, 0};
    MPI_Request q = MPI_REQUEST_NULL;

    /* Errors on WORLD reach WORLD's user handler, with the call named. */
    VIA_HANDLER(MPI_Send(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK, "MPI_Send", "rank");
    VIA_HANDLER(MPI_Ssend(buf, 1, MPI_INT, -7, 0, MPI_COMM_WORLD), MPI_ERR_RANK, "MPI_Ssend", "rank");
    VIA_HANDLER(MPI_Rsend(buf, 1, MPI_INT, wrank, -1, MPI_COMM_WORLD), MPI_ERR_TAG, "MPI_Rsend", "tag");
    VIA_HANDLER(MPI_Send(buf, -1, MPI_INT, wrank, 0, MPI_COMM_WORLD), MPI_ERR_COUNT, "MPI_Send", "count");
    VIA_HANDLER(MPI_Send(NULL, 2, MPI_INT, wrank, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, "MPI_Send", "buf");
    VIA_HANDLER(MPI_Send(MPI_IN_PLACE, 2, MPI_INT, wrank, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, "MPI_Send", "MPI_IN_PLACE");
    VIA_HANDLER(MPI_Send(buf, 1, MPI_DATATYPE_NULL, wrank, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "MPI_Send", "datatype");
    VIA_HANDLER(MPI_Send(buf, 1, (MPI_Datatype)0x4c0004ff, wrank, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "MPI_Send", "datatype");
    VIA_HANDLER(MPI_Recv(buf, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_RANK, "MPI_Recv", "rank");
    VIA_HANDLER(MPI_Recv(buf, 1, MPI_INT, 0, -5, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_TAG, "MPI_Recv", "tag");
    VIA_HANDLER(MPI_Recv(NULL, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_BUFFER, "MPI_Recv", "buf");
    VIA_HANDLER(MPI_Isend(buf, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &q), MPI_ERR_RANK, "MPI_Isend", "rank");
    VIA_HANDLER(MPI_Irecv(buf, -2, MPI_INT, 0, 0, MPI_COMM_WORLD, &q), MPI_ERR_COUNT, "MPI_Irecv", "count");
    VIA_HANDLER(MPI_Isend(buf, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "MPI_Isend", "request");
    double dd[2] = {1.0, 2.0}, de[2] = {0, 0};
    VIA_HANDLER(MPI_Allreduce(dd, de, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD), MPI_ERR_OP, "MPI_Allreduce", "MPI_BAND");
    VIA_HANDLER(MPI_Allreduce(dd, de, 1, MPI_DOUBLE, MPI_MAXLOC, MPI_COMM_WORLD), MPI_ERR_OP, "MPI_Allreduce", "MPI_MAXLOC");
    VIA_HANDLER(MPI_Allreduce(dd, de, -1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_COUNT, "MPI_Allreduce", "count");
    VIA_HANDLER(MPI_Allreduce(dd, NULL, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER, "MPI_Allreduce", "recvbuf");
    VIA_HANDLER(MPI_Allreduce(dd, de, 1, MPI_DATATYPE_NULL, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_TYPE, "MPI_Allreduce", "datatype");
    VIA_HANDLER(MPI_Allreduce(dd, de, 1, MPI_DOUBLE, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP, "MPI_Allreduce", "op");
    VIA_HANDLER(MPI_Comm_rank(MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "MPI_Comm_rank", "rank");
    VIA_HANDLER(MPI_Comm_size(MPI_COMM_WORLD, NULL), MPI_ERR_ARG, "MPI_Comm_size", "size");

    /* Errors on SELF use SELF's handler (MPI_ERRORS_RETURN), not WORLD's. */
    eh_calls = 0;
    EXPECT(MPI_Send(buf, 1, MPI_INT, 1, 0, MPI_COMM_SELF), MPI_ERR_RANK);
    EXPECT(MPI_Recv(buf, 1, MPI_INT, 0, -4, MPI_COMM_SELF, MPI_STATUS_IGNORE), MPI_ERR_TAG);
    EXPECT(MPI_Comm_rank(MPI_COMM_SELF, NULL), MPI_ERR_ARG);
    EXPECT(MPI_Allreduce(dd, de, 2, MPI_FLOAT, MPI_LAND, MPI_COMM_SELF), MPI_ERR_OP);
    EXPECT(MPI_Send(buf, 1, MPI_INT, 0, 0, MPI_COMM_NULL), MPI_ERR_COMM);
    CHECK(eh_calls == 1, "MPI_COMM_NULL goes to WORLD's handler only (calls %d)", eh_calls);
    eh_calls = 0;
    EXPECT(MPI_Comm_rank(MPI_COMM_SELF, &r), MPI_SUCCESS);
    EXPECT(MPI_Comm_size(MPI_COMM_SELF, &s), MPI_SUCCESS);
    CHECK(r == 0 && s == 1 && eh_calls == 0, "SELF rank %d size %d", r, s);
    EXPECT(MPI_Comm_rank(MPI_COMM_WORLD, &r), MPI_SUCCESS);
    EXPECT(MPI_Comm_size(MPI_COMM_WORLD, &s), MPI_SUCCESS);
    CHECK(r == wrank && s == size, "WORLD rank %d size %d", r, s);

    /* Valid calls: self messages on WORLD and SELF, blocking and not, with
     * statuses, zero counts with NULL buffers, and PROC_NULL. */
    MPI_Comm comms[2] = {MPI_COMM_WORLD, MPI_COMM_SELF};
    for (int k = 0; k < 2; k++) {
        int me = k ? 0 : wrank;
        int out[3] = {wrank, 7, 9}, in[3] = {0, 0, 0};
        MPI_Status st;
        EXPECT(MPI_Isend(out, 3, MPI_INT, me, 5, comms[k], &q), MPI_SUCCESS);
        EXPECT(MPI_Recv(in, 3, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comms[k], &st), MPI_SUCCESS);
        EXPECT(MPI_Wait(&q, MPI_STATUS_IGNORE), MPI_SUCCESS);
        int n = -1;
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(in[0] == wrank && in[1] == 7 && in[2] == 9 && st.MPI_SOURCE == me && st.MPI_TAG == 5 && n == 3,
              "self message on comm %d: %d %d %d from %d tag %d count %d", k, in[0], in[1], in[2], st.MPI_SOURCE, st.MPI_TAG, n);
        double d[2] = {1.5, -2.5}, e[2] = {0, 0};
        EXPECT(MPI_Irecv(e, 2, MPI_DOUBLE, me, 6, comms[k], &q), MPI_SUCCESS);
        EXPECT(MPI_Ssend(d, 2, MPI_DOUBLE, me, 6, comms[k]), MPI_SUCCESS);
        EXPECT(MPI_Wait(&q, &st), MPI_SUCCESS);
        CHECK(e[0] == d[0] && e[1] == d[1] && q == MPI_REQUEST_NULL, "Irecv/Ssend of doubles");
        EXPECT(MPI_Send(NULL, 0, MPI_BYTE, me, 8, comms[k]), MPI_SUCCESS);
        EXPECT(MPI_Recv(NULL, 0, MPI_BYTE, me, 8, comms[k], &st), MPI_SUCCESS);
        MPI_Get_count(&st, MPI_BYTE, &n);
        CHECK(n == 0 && st.MPI_TAG == 8, "zero-byte message: count %d tag %d", n, st.MPI_TAG);
        /* Truncation is reported on the receive. */
        EXPECT(MPI_Send(out, 3, MPI_INT, me, 9, comms[k]), MPI_SUCCESS);
        eh_calls = 0;
        int rc = MPI_Recv(in, 1, MPI_INT, me, 9, comms[k], MPI_STATUS_IGNORE), cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE && eh_calls == (k ? 0 : 1), "truncate on comm %d: class %d handler calls %d", k, cls, eh_calls);
        EXPECT(MPI_Recv(in, 3, MPI_INT, MPI_PROC_NULL, 0, comms[k], &st), MPI_SUCCESS);
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG, "PROC_NULL status");
    }
    /* Allreduce on the hot path agrees with the full path (a dup), with a
     * send buffer and in place; on SELF it is a copy. */
    {
        double v[2] = {wrank + 0.5, -1.0 * wrank}, w[2] = {0, 0}, x[2] = {0, 0};
        double want0 = 0, want1 = 0;
        for (int i = 0; i < size; i++) { want0 += i + 0.5; want1 += -1.0 * i; }
        MPI_Comm d2;
        MPI_Comm_dup(MPI_COMM_WORLD, &d2);
        EXPECT(MPI_Allreduce(v, w, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
        EXPECT(MPI_Allreduce(v, x, 2, MPI_DOUBLE, MPI_SUM, d2), MPI_SUCCESS);
        CHECK(w[0] == want0 && w[1] == want1 && x[0] == w[0] && x[1] == w[1],
              "allreduce sum: %g %g (dup %g %g), want %g %g", w[0], w[1], x[0], x[1], want0, want1);
        long m = wrank * 3 + 1, mx = -1;
        EXPECT(MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD), MPI_SUCCESS);
        mx = (size - 1) * 3 + 1;
        CHECK(m == mx, "allreduce max in place: %ld, want %ld", m, mx);
        int b = 6 + wrank, bo = -1;
        EXPECT(MPI_Allreduce(&b, &bo, 1, MPI_INT, MPI_BOR, MPI_COMM_SELF), MPI_SUCCESS);
        CHECK(bo == b, "allreduce on SELF: %d, want %d", bo, b);
        MPI_Comm_free(&d2);
    }
    /* Derived datatypes and duplicated communicators take the full path. */
    MPI_Datatype vec;
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    EXPECT(MPI_Send(buf, 1, vec, wrank, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    MPI_Type_commit(&vec);
    int src4[4] = {1, 2, 3, 4}, dst4[4] = {0, 0, 0, 0};
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    EXPECT(MPI_Sendrecv(src4, 1, vec, wrank, 3, dst4, 2, MPI_INT, wrank, 3, dup, MPI_STATUS_IGNORE), MPI_SUCCESS);
    CHECK(dst4[0] == 1 && dst4[1] == 3, "vector: %d %d", dst4[0], dst4[1]);
    EXPECT(MPI_Comm_rank(dup, &r), MPI_SUCCESS);
    CHECK(r == wrank, "dup rank %d", r);
    MPI_Comm_free(&dup);
    MPI_Type_free(&vec);

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh);
    int all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (all == 0 && wrank == 0)
        printf("OK p2p_fastpath\n");
    return all != 0;
}
