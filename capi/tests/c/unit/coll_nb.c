/* Non-blocking collectives beyond coll.c: the vector forms (MPI_Igatherv,
 * MPI_Iscatterv, MPI_Iallgatherv, MPI_Ialltoallv, MPI_Ialltoallw),
 * MPI_Ireduce_scatter(_block) and MPI_Iexscan, MPI_IN_PLACE in every
 * non-blocking collective, and MPI_Alltoallw / MPI_Ialltoallw with
 * MPI_BOTTOM and datatypes holding absolute addresses (MPI_Get_address),
 * blocks in separate heap and stack memory, in place too. All requests of a
 * round are outstanding at once. Any np >= 1. */
#define TEST_NAME "coll_nb"
#include "check.h"
#include <string.h>

static int rank, size;

/* The value element i of the block from rank `src` to rank `dst` holds. */
static int V(int src, int dst, int i) { return src * 100000 + dst * 1000 + i; }

#define SENT (-7)
#define NREQ 64

static MPI_Request reqs[NREQ];
static int nreq;

static MPI_Request *next(void)
{
    CHECK(nreq < NREQ, "too many requests");
    return &reqs[nreq++];
}

static void wait_all(void)
{
    CHECK_MPI(MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE));
    for (int i = 0; i < nreq; i++)
        CHECK(reqs[i] == MPI_REQUEST_NULL, "request %d not freed", i);
    nreq = 0;
}

/* Counts and displacements with gaps: block q has cnt[q] elements at
 * displ[q]; returns the total length. */
static int layout(const int *cnt, int *displ)
{
    int off = 1;
    for (int q = 0; q < size; q++) {
        displ[q] = off;
        off += cnt[q] + 2;
    }
    return off;
}

static int *ints(int n, int v)
{
    int *p = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    CHECK(p != NULL, "malloc");
    for (int i = 0; i < n; i++) p[i] = v;
    return p;
}

static void vector_and_in_place(int len, int root)
{
    int n = size;
    int *cnt = ints(n, 0), *dsp = ints(n, 0);
    for (int q = 0; q < n; q++) cnt[q] = len + q;
    int tot = layout(cnt, dsp);
    int mycnt = cnt[rank];

    /* Igatherv, Igatherv in place */
    int *gsend = ints(mycnt, 0), *gv = ints(tot, SENT), *gvi;
    for (int i = 0; i < mycnt; i++) gsend[i] = V(rank, 20, i);
    if (rank == root) {
        gvi = ints(tot, SENT);
        for (int i = 0; i < mycnt; i++) gvi[dsp[rank] + i] = V(rank, 21, i);
    } else {
        gvi = ints(mycnt, 0);
        for (int i = 0; i < mycnt; i++) gvi[i] = V(rank, 21, i);
    }
    CHECK_MPI(MPI_Igatherv(gsend, mycnt, MPI_INT, gv, cnt, dsp, MPI_INT, root, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Igatherv(rank == root ? MPI_IN_PLACE : gvi, mycnt, MPI_INT, gvi, cnt, dsp, MPI_INT,
                           root, MPI_COMM_WORLD, next()));

    /* Iscatterv, Iscatterv in place */
    int *ssend = ints(tot, SENT), *sv = ints(mycnt, 0), *svi;
    for (int q = 0; q < n; q++)
        for (int i = 0; i < cnt[q]; i++) ssend[dsp[q] + i] = V(root, q, i) + 1;
    if (rank == root) {
        svi = ints(tot, SENT);
        memcpy(svi, ssend, sizeof(int) * (size_t)tot);
    } else {
        svi = ints(mycnt, 0);
    }
    CHECK_MPI(MPI_Iscatterv(ssend, cnt, dsp, MPI_INT, sv, mycnt, MPI_INT, root, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Iscatterv(svi, cnt, dsp, MPI_INT, rank == root ? MPI_IN_PLACE : svi, mycnt, MPI_INT,
                            root, MPI_COMM_WORLD, next()));

    /* Iallgatherv, Iallgatherv in place */
    int *agv = ints(tot, SENT), *agvi = ints(tot, SENT);
    for (int i = 0; i < mycnt; i++) agvi[dsp[rank] + i] = V(rank, 20, i);
    CHECK_MPI(MPI_Iallgatherv(gsend, mycnt, MPI_INT, agv, cnt, dsp, MPI_INT, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Iallgatherv(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, agvi, cnt, dsp, MPI_INT,
                              MPI_COMM_WORLD, next()));

    /* Igather / Iscatter / Iallgather / Ialltoall in place */
    int *gi, *si, *agi = ints(len * n, SENT), *ati = ints(len * n, 0);
    if (rank == root) {
        gi = ints(len * n, SENT);
        for (int i = 0; i < len; i++) gi[rank * len + i] = V(rank, 26, i);
        si = ints(len * n, 0);
        for (int q = 0; q < n; q++)
            for (int i = 0; i < len; i++) si[q * len + i] = V(root, q, i) + 2;
    } else {
        gi = ints(len, 0);
        for (int i = 0; i < len; i++) gi[i] = V(rank, 26, i);
        si = ints(len, 0);
    }
    for (int i = 0; i < len; i++) agi[rank * len + i] = V(rank, 28, i);
    for (int q = 0; q < n; q++)
        for (int i = 0; i < len; i++) ati[q * len + i] = V(rank, q, i);
    CHECK_MPI(MPI_Igather(rank == root ? MPI_IN_PLACE : gi, len, MPI_INT, gi, len, MPI_INT, root,
                          MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Iscatter(si, len, MPI_INT, rank == root ? MPI_IN_PLACE : si, len, MPI_INT, root,
                           MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, agi, len, MPI_INT, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Ialltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ati, len, MPI_INT, MPI_COMM_WORLD, next()));

    /* Ialltoallv / Ialltoallw (int displacements in bytes), and in place with
     * symmetric counts */
    int *sc = ints(n, 0), *rc = ints(n, 0), *sd = ints(n, 0), *rd = ints(n, 0);
    for (int q = 0; q < n; q++) {
        sc[q] = (rank + q) % 3 == 2 ? 0 : len + (rank + 2 * q) % 3;
        rc[q] = (q + rank) % 3 == 2 ? 0 : len + (q + 2 * rank) % 3;
    }
    int stot = layout(sc, sd), rtot = layout(rc, rd);
    int *a2s = ints(stot, SENT), *atv = ints(rtot, SENT), *atw = ints(rtot, SENT);
    for (int q = 0; q < n; q++)
        for (int i = 0; i < sc[q]; i++) a2s[sd[q] + i] = V(rank, q, i);
    int *sdb = ints(n, 0), *rdb = ints(n, 0);
    MPI_Datatype *ty = malloc(sizeof(MPI_Datatype) * (size_t)n);
    for (int q = 0; q < n; q++) {
        sdb[q] = sd[q] * (int)sizeof(int);
        rdb[q] = rd[q] * (int)sizeof(int);
        ty[q] = MPI_INT;
    }
    int *ym = ints(n, 0), *yd = ints(n, 0), *ydb = ints(n, 0);
    for (int q = 0; q < n; q++) ym[q] = (rank + q) % 3 == 2 ? 0 : len + (rank * q) % 3;
    int ytot = layout(ym, yd);
    for (int q = 0; q < n; q++) ydb[q] = yd[q] * (int)sizeof(int);
    int *atvi = ints(ytot, SENT), *atwi = ints(ytot, SENT);
    for (int q = 0; q < n; q++)
        for (int i = 0; i < ym[q]; i++) atvi[yd[q] + i] = atwi[yd[q] + i] = V(rank, q, i);
    CHECK_MPI(MPI_Ialltoallv(a2s, sc, sd, MPI_INT, atv, rc, rd, MPI_INT, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Ialltoallw(a2s, sc, sdb, ty, atw, rc, rdb, ty, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Ialltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, atvi, ym, yd, MPI_INT,
                             MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Ialltoallw(MPI_IN_PLACE, NULL, NULL, NULL, atwi, ym, ydb, ty, MPI_COMM_WORLD, next()));

    /* reductions: Ireduce / Iallreduce / Iscan / Iexscan in place, Iexscan,
     * Ireduce_scatter(_block) plain and in place */
    int *rdi = ints(len, 0), *ari = ints(len, 0), *sci = ints(len, 0), *exi = ints(len, 0);
    int *exs_in = ints(len, 0), *exs = ints(len, SENT);
    for (int i = 0; i < len; i++) rdi[i] = ari[i] = sci[i] = exi[i] = exs_in[i] = rank + i;
    CHECK_MPI(MPI_Ireduce(rank == root ? MPI_IN_PLACE : rdi, rdi, len, MPI_INT, MPI_SUM, root,
                          MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, ari, len, MPI_INT, MPI_MAX, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Iscan(MPI_IN_PLACE, sci, len, MPI_INT, MPI_SUM, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Iexscan(exs_in, exs, len, MPI_INT, MPI_SUM, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Iexscan(MPI_IN_PLACE, exi, len, MPI_INT, MPI_SUM, MPI_COMM_WORLD, next()));
    int *rsc = ints(n, 0), rstot = 0;
    for (int q = 0; q < n; q++) rstot += (rsc[q] = len / 2 + q);
    int *rs_in = ints(rstot, 0), *rsi = ints(rstot, 0), *rs = ints(rsc[rank], SENT);
    for (int i = 0; i < rstot; i++) rs_in[i] = rsi[i] = rank * 3 + i;
    int *rb_in = ints(len * n, 0), *rbi = ints(len * n, 0), *rb = ints(len, SENT);
    for (int i = 0; i < len * n; i++) rb_in[i] = rbi[i] = rank * 5 + i;
    CHECK_MPI(MPI_Ireduce_scatter(rs_in, rs, rsc, MPI_INT, MPI_SUM, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Ireduce_scatter(MPI_IN_PLACE, rsi, rsc, MPI_INT, MPI_SUM, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Ireduce_scatter_block(rb_in, rb, len, MPI_INT, MPI_SUM, MPI_COMM_WORLD, next()));
    CHECK_MPI(MPI_Ireduce_scatter_block(MPI_IN_PLACE, rbi, len, MPI_INT, MPI_SUM, MPI_COMM_WORLD, next()));

    wait_all();

    /* checks */
    if (rank == root) {
        for (int q = 0; q < n; q++)
            for (int i = 0; i < cnt[q]; i++) {
                CHECK(gv[dsp[q] + i] == V(q, 20, i), "Igatherv block %d [%d] = %d", q, i, gv[dsp[q] + i]);
                CHECK(gvi[dsp[q] + i] == V(q, 21, i), "Igatherv IN_PLACE block %d [%d] = %d", q, i,
                      gvi[dsp[q] + i]);
                CHECK(svi[dsp[q] + i] == V(root, q, i) + 1, "Iscatterv IN_PLACE changed the root's buffer");
            }
        CHECK(gv[0] == SENT && gvi[0] == SENT, "Igatherv wrote a gap");
        for (int q = 0; q < n; q++)
            for (int i = 0; i < len; i++) {
                CHECK(gi[q * len + i] == V(q, 26, i), "Igather IN_PLACE block %d [%d] = %d", q, i,
                      gi[q * len + i]);
                CHECK(si[q * len + i] == V(root, q, i) + 2, "Iscatter IN_PLACE changed the root's buffer");
            }
        for (int i = 0; i < len; i++) {
            int e = 0;
            for (int q = 0; q < n; q++) e += q + i;
            CHECK(rdi[i] == e, "Ireduce IN_PLACE [%d] = %d, expected %d", i, rdi[i], e);
        }
    } else {
        for (int i = 0; i < mycnt; i++)
            CHECK(svi[i] == V(root, rank, i) + 1, "Iscatterv IN_PLACE (non-root) [%d] = %d", i, svi[i]);
        for (int i = 0; i < len; i++)
            CHECK(si[i] == V(root, rank, i) + 2, "Iscatter IN_PLACE (non-root) [%d] = %d", i, si[i]);
    }
    for (int i = 0; i < mycnt; i++)
        CHECK(sv[i] == V(root, rank, i) + 1, "Iscatterv [%d] = %d", i, sv[i]);
    for (int q = 0; q < n; q++) {
        for (int i = 0; i < cnt[q]; i++) {
            /* MPICH 4.0 ignores the displacements of (I)allgatherv at np 1 */
            CHECK_KNOWN_BUG(agv[dsp[q] + i] == V(q, 20, i), "Iallgatherv block %d [%d] = %d", q, i, agv[dsp[q] + i]);
            CHECK_KNOWN_BUG(agvi[dsp[q] + i] == V(q, 20, i), "Iallgatherv IN_PLACE block %d [%d] = %d", q, i,
                  agvi[dsp[q] + i]);
        }
        CHECK_KNOWN_BUG(agv[dsp[q] + cnt[q]] == SENT && agvi[dsp[q] + cnt[q]] == SENT, "Iallgatherv wrote a gap");
        for (int i = 0; i < len; i++) {
            CHECK(agi[q * len + i] == V(q, 28, i), "Iallgather IN_PLACE block %d [%d]", q, i);
            CHECK(ati[q * len + i] == V(q, rank, i), "Ialltoall IN_PLACE block %d [%d] = %d", q, i,
                  ati[q * len + i]);
        }
        for (int i = 0; i < rc[q]; i++) {
            CHECK(atv[rd[q] + i] == V(q, rank, i), "Ialltoallv block %d [%d] = %d", q, i, atv[rd[q] + i]);
            CHECK(atw[rd[q] + i] == V(q, rank, i), "Ialltoallw block %d [%d] = %d", q, i, atw[rd[q] + i]);
        }
        CHECK(atv[rd[q] + rc[q]] == SENT && atw[rd[q] + rc[q]] == SENT, "Ialltoallv/w wrote a gap");
        for (int i = 0; i < ym[q]; i++) {
            CHECK(atvi[yd[q] + i] == V(q, rank, i), "Ialltoallv IN_PLACE block %d [%d] = %d", q, i,
                  atvi[yd[q] + i]);
            CHECK(atwi[yd[q] + i] == V(q, rank, i), "Ialltoallw IN_PLACE block %d [%d] = %d", q, i,
                  atwi[yd[q] + i]);
        }
    }
    for (int i = 0; i < len; i++) {
        CHECK(ari[i] == n - 1 + i, "Iallreduce IN_PLACE [%d] = %d", i, ari[i]);
        int pre = 0;
        for (int q = 0; q < rank; q++) pre += q + i;
        CHECK(sci[i] == pre + rank + i, "Iscan IN_PLACE [%d] = %d", i, sci[i]);
        if (rank > 0) {
            CHECK(exs[i] == pre, "Iexscan [%d] = %d, expected %d", i, exs[i], pre);
            CHECK(exi[i] == pre, "Iexscan IN_PLACE [%d] = %d, expected %d", i, exi[i], pre);
        } else {
            CHECK(exs[i] == SENT, "Iexscan wrote rank 0's recvbuf");
        }
    }
    int off = 0;
    for (int q = 0; q < rank; q++) off += rsc[q];
    for (int i = 0; i < rsc[rank]; i++) {
        int e = 0;
        for (int q = 0; q < n; q++) e += q * 3 + off + i;
        CHECK(rs[i] == e, "Ireduce_scatter [%d] = %d, expected %d", i, rs[i], e);
        CHECK(rsi[i] == e, "Ireduce_scatter IN_PLACE [%d] = %d, expected %d", i, rsi[i], e);
    }
    for (int i = 0; i < len; i++) {
        int e = 0;
        for (int q = 0; q < n; q++) e += q * 5 + rank * len + i;
        CHECK(rb[i] == e, "Ireduce_scatter_block [%d] = %d, expected %d", i, rb[i], e);
        CHECK(rbi[i] == e, "Ireduce_scatter_block IN_PLACE [%d] = %d, expected %d", i, rbi[i], e);
    }

    free(cnt); free(dsp); free(gsend); free(gv); free(gvi); free(ssend); free(sv); free(svi);
    free(agv); free(agvi); free(gi); free(si); free(agi); free(ati); free(sc); free(rc); free(sd);
    free(rd); free(a2s); free(atv); free(atw); free(sdb); free(rdb); free(ty); free(ym); free(yd);
    free(ydb); free(atvi); free(atwi); free(rdi); free(ari); free(sci); free(exi); free(exs_in);
    free(exs); free(rsc); free(rs_in); free(rsi); free(rs); free(rb_in); free(rbi); free(rb);
}

/* A datatype of `cnt` ints at absolute address `p` (for MPI_BOTTOM). */
static MPI_Datatype at_address(const int *p, int cnt)
{
    MPI_Aint a;
    MPI_Datatype t;
    CHECK_MPI(MPI_Get_address(p, &a));
    CHECK_MPI(MPI_Type_create_hindexed(1, &cnt, &a, MPI_INT, &t));
    CHECK_MPI(MPI_Type_commit(&t));
    return t;
}

/* Alltoallw / Ialltoallw from and to MPI_BOTTOM: every peer's block in its
 * own allocation, one of them on the stack (far from the heap), plain and
 * in place. */
static void bottom(int len)
{
    int n = size;
    enum { MAXN = 64 };
    CHECK(n <= MAXN, "np too large for this test");
    int stack_s[8], stack_r[8], stack_i[8];
    int *sb[MAXN], *rb[MAXN], *ib[MAXN];
    int cnt[MAXN] = {0}, zeros[MAXN] = {0}, ones[MAXN] = {0};
    MPI_Datatype st[MAXN] = {0}, rt[MAXN] = {0}, it[MAXN] = {0};
    for (int q = 0; q < n; q++) {
        cnt[q] = 1 + (rank + q) % 2 + (q == 0 || rank == 0 ? 0 : len); /* symmetric; <= 8 for q == 0 */
        zeros[q] = 0;
        ones[q] = 1;
        sb[q] = q == 0 ? stack_s : ints(cnt[q], 0);
        rb[q] = q == 0 ? stack_r : ints(cnt[q], SENT);
        ib[q] = q == 0 ? stack_i : ints(cnt[q], 0);
        for (int i = 0; i < cnt[q]; i++) {
            sb[q][i] = V(rank, q, i);
            rb[q][i] = SENT;
            ib[q][i] = V(rank, q, i) + 3;
        }
        st[q] = at_address(sb[q], cnt[q]);
        rt[q] = at_address(rb[q], cnt[q]);
        it[q] = at_address(ib[q], cnt[q]);
    }
    CHECK_MPI(MPI_Alltoallw(MPI_BOTTOM, ones, zeros, st, MPI_BOTTOM, ones, zeros, rt, MPI_COMM_WORLD));
    for (int q = 0; q < n; q++)
        for (int i = 0; i < cnt[q]; i++)
            CHECK(rb[q][i] == V(q, rank, i), "Alltoallw MPI_BOTTOM block %d [%d] = %d", q, i, rb[q][i]);
    CHECK_MPI(MPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, MPI_BOTTOM, ones, zeros, it, MPI_COMM_WORLD));
    for (int q = 0; q < n; q++)
        for (int i = 0; i < cnt[q]; i++) {
            CHECK(ib[q][i] == V(q, rank, i) + 3, "Alltoallw IN_PLACE MPI_BOTTOM block %d [%d] = %d", q, i,
                  ib[q][i]);
            rb[q][i] = SENT;
            ib[q][i] = V(rank, q, i) + 4;
        }
    CHECK_MPI(MPI_Ialltoallw(MPI_BOTTOM, ones, zeros, st, MPI_BOTTOM, ones, zeros, rt, MPI_COMM_WORLD,
                             next()));
    CHECK_MPI(MPI_Ialltoallw(MPI_IN_PLACE, NULL, NULL, NULL, MPI_BOTTOM, ones, zeros, it, MPI_COMM_WORLD,
                             next()));
    wait_all();
    for (int q = 0; q < n; q++)
        for (int i = 0; i < cnt[q]; i++) {
            CHECK(rb[q][i] == V(q, rank, i), "Ialltoallw MPI_BOTTOM block %d [%d] = %d", q, i, rb[q][i]);
            /* MPICH 4.0's in-place Ialltoallw mishandles MPI_BOTTOM */
            CHECK_KNOWN_BUG(ib[q][i] == V(q, rank, i) + 4, "Ialltoallw IN_PLACE MPI_BOTTOM block %d [%d] = %d", q,
                  i, ib[q][i]);
        }
    for (int q = 0; q < n; q++) {
        MPI_Type_free(&st[q]);
        MPI_Type_free(&rt[q]);
        MPI_Type_free(&it[q]);
        if (q > 0) {
            free(sb[q]);
            free(rb[q]);
            free(ib[q]);
        }
    }
}

/* Argument errors of the new entry points return the right class. */
static void errors(void)
{
    int x[4] = {0}, y[4] = {0}, c[64], d[64], cls = -1, rc;
    MPI_Request r = MPI_REQUEST_NULL;
    for (int q = 0; q < size && q < 64; q++) c[q] = d[q] = 0;
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    c[0] = -1;
    rc = MPI_Iallgatherv(x, 0, MPI_INT, y, c, d, MPI_INT, MPI_COMM_WORLD, &r);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COUNT, "Iallgatherv negative count: class %d", cls);
    rc = MPI_Iexscan(x, y, -1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Error_class(rc, &cls);
    CHECK_KNOWN_BUG(cls == MPI_ERR_COUNT, "Iexscan negative count: class %d (MPICH 4.0: MPI_ERR_OTHER)", cls);
    rc = MPI_Igatherv(x, 1, MPI_INT, y, c, d, MPI_INT, size, MPI_COMM_WORLD, &r);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ROOT, "Igatherv bad root: class %d", cls);
    CHECK(r == MPI_REQUEST_NULL, "a failed call set the request");
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv)
{
    CHECK_MPI(MPI_Init(&argc, &argv));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int lens[] = {1, 5, 1000};
    for (int k = 0; k < 3; k++) vector_and_in_place(lens[k], (k + 1) % size);
    bottom(0);
    bottom(300);
    errors();
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    REPORT_OK();
    CHECK_MPI(MPI_Finalize());
    return 0;
}
