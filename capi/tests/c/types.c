/* Derived datatype test: plain MPI standard semantics only. */
#define TEST_NAME "types"
#include "check.h"
#include <stddef.h>
#include <string.h>

static int rank, size, next, prev;

struct S {
    char c;
    double d;
    int i;
};

/* send one (count, type) on MPI_COMM_SELF and receive as (rcount, rtype) */
static void self_xfer(const void *s, int sc, MPI_Datatype st, void *r, int rc, MPI_Datatype rt)
{
    CHECK_MPI(MPI_Sendrecv(s, sc, st, 0, 0, r, rc, rt, 0, 0, MPI_COMM_SELF, MPI_STATUS_IGNORE));
}

static void check_size_extent(MPI_Datatype t, int esize, MPI_Aint elb, MPI_Aint eext,
                              MPI_Aint etlb, MPI_Aint etext, const char *what)
{
    int sz;
    MPI_Aint lb, ext, tlb, text;
    CHECK_MPI(MPI_Type_size(t, &sz));
    CHECK_MPI(MPI_Type_get_extent(t, &lb, &ext));
    CHECK_MPI(MPI_Type_get_true_extent(t, &tlb, &text));
    CHECK(sz == esize, "%s: size %d expected %d", what, sz, esize);
    CHECK(lb == elb && ext == eext, "%s: lb/extent %ld/%ld expected %ld/%ld", what, (long)lb,
          (long)ext, (long)elb, (long)eext);
    CHECK(tlb == etlb && text == etext, "%s: true lb/extent %ld/%ld expected %ld/%ld", what,
          (long)tlb, (long)text, (long)etlb, (long)etext);
}

/* Get_envelope + Get_contents; checks the combiner and the counts, returns the
 * contents in caller arrays (at most 32 each). Returned derived types are freed
 * unless keep_types is set (then the caller frees them). */
static void contents(MPI_Datatype t, int ecomb, int eni, int ena, int end, int *ints,
                     MPI_Aint *addrs, MPI_Datatype *types, int keep_types)
{
    int ni, na, nd, comb;
    CHECK_MPI(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    CHECK(comb == ecomb, "envelope combiner %d expected %d", comb, ecomb);
    CHECK(ni == eni && na == ena && nd == end, "envelope (%d,%d,%d) expected (%d,%d,%d), comb %d",
          ni, na, nd, eni, ena, end, comb);
    CHECK_MPI(MPI_Type_get_contents(t, ni, na, nd, ints, addrs, types));
    if (!keep_types)
        for (int k = 0; k < nd; k++) {
            int ni2, na2, nd2, c2;
            CHECK_MPI(MPI_Type_get_envelope(types[k], &ni2, &na2, &nd2, &c2));
            if (c2 != MPI_COMBINER_NAMED) CHECK_MPI(MPI_Type_free(&types[k]));
        }
}

static void test_contiguous_vector(void)
{
    MPI_Datatype c5, vec, hvec;
    int ints[32];
    MPI_Aint addrs[32];
    MPI_Datatype types[32];

    CHECK_MPI(MPI_Type_contiguous(5, MPI_INT, &c5));
    CHECK_MPI(MPI_Type_commit(&c5));
    check_size_extent(c5, 5 * (int)sizeof(int), 0, 5 * sizeof(int), 0, 5 * sizeof(int), "contig");
    int s[10], r[10];
    for (int i = 0; i < 10; i++) { s[i] = i * 11 + rank; r[i] = -1; }
    CHECK_MPI(MPI_Sendrecv(s, 2, c5, next, 1, r, 10, MPI_INT, prev, 1, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    for (int i = 0; i < 10; i++) CHECK(r[i] == i * 11 + prev, "contig data [%d]", i);
    contents(c5, MPI_COMBINER_CONTIGUOUS, 1, 0, 1, ints, addrs, types, 0);
    CHECK(ints[0] == 5 && types[0] == MPI_INT, "contig contents");

    /* vector of 4 blocks of 2 doubles, stride 5 */
    CHECK_MPI(MPI_Type_vector(4, 2, 5, MPI_DOUBLE, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    MPI_Aint vext = (3 * 5 + 2) * (MPI_Aint)sizeof(double);
    check_size_extent(vec, 8 * (int)sizeof(double), 0, vext, 0, vext, "vector");
    double m[20], dr[8];
    for (int i = 0; i < 20; i++) m[i] = rank * 100 + i;
    for (int i = 0; i < 8; i++) dr[i] = -1;
    /* send vector, receive contiguous doubles (same type signature) */
    CHECK_MPI(MPI_Sendrecv(m, 1, vec, next, 2, dr, 8, MPI_DOUBLE, prev, 2, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    for (int b = 0; b < 4; b++)
        for (int k = 0; k < 2; k++)
            CHECK(dr[b * 2 + k] == prev * 100 + b * 5 + k, "vector->contig [%d][%d]=%g", b, k,
                  dr[b * 2 + k]);
    /* and the reverse: contiguous into a vector layout */
    double m2[20];
    for (int i = 0; i < 20; i++) m2[i] = -5;
    for (int i = 0; i < 8; i++) dr[i] = rank + i * 0.25;
    CHECK_MPI(MPI_Sendrecv(dr, 8, MPI_DOUBLE, next, 3, m2, 1, vec, prev, 3, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    for (int i = 0; i < 20; i++) {
        int b = i / 5, k = i % 5;
        double e = (b < 4 && k < 2) ? prev + (b * 2 + k) * 0.25 : -5;
        CHECK(m2[i] == e, "contig->vector [%d]=%g expected %g", i, m2[i], e);
    }
    contents(vec, MPI_COMBINER_VECTOR, 3, 0, 1, ints, addrs, types, 0);
    CHECK(ints[0] == 4 && ints[1] == 2 && ints[2] == 5 && types[0] == MPI_DOUBLE, "vector contents");

    /* hvector: 3 blocks of 1 int, stride 12 bytes */
    CHECK_MPI(MPI_Type_create_hvector(3, 1, 12, MPI_INT, &hvec));
    CHECK_MPI(MPI_Type_commit(&hvec));
    check_size_extent(hvec, 3 * (int)sizeof(int), 0, 24 + sizeof(int), 0, 24 + sizeof(int), "hvector");
    int hs[9], hr[3];
    for (int i = 0; i < 9; i++) hs[i] = i;
    self_xfer(hs, 1, hvec, hr, 3, MPI_INT);
    CHECK(hr[0] == 0 && hr[1] == 12 / (int)sizeof(int) && hr[2] == 24 / (int)sizeof(int),
          "hvector data %d %d %d", hr[0], hr[1], hr[2]);
    contents(hvec, MPI_COMBINER_HVECTOR, 2, 1, 1, ints, addrs, types, 0);
    CHECK(ints[0] == 3 && ints[1] == 1 && addrs[0] == 12 && types[0] == MPI_INT, "hvector contents");

    /* Type_dup of a derived type */
    MPI_Datatype vdup;
    CHECK_MPI(MPI_Type_dup(vec, &vdup));
    check_size_extent(vdup, 8 * (int)sizeof(double), 0, vext, 0, vext, "dup");
    for (int i = 0; i < 8; i++) dr[i] = -1;
    self_xfer(m, 1, vdup, dr, 8, MPI_DOUBLE);
    CHECK(dr[0] == rank * 100 && dr[2] == rank * 100 + 5 && dr[7] == rank * 100 + 16, "dup data");
    contents(vdup, MPI_COMBINER_DUP, 0, 0, 1, ints, addrs, types, 1);
    {
        int ni, na, nd, comb;
        CHECK_MPI(MPI_Type_get_envelope(types[0], &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_VECTOR, "dup contents: old type combiner %d", comb);
        CHECK_MPI(MPI_Type_free(&types[0]));
        CHECK(types[0] == MPI_DATATYPE_NULL, "Type_free did not null");
    }
    /* the dup of a predefined type */
    MPI_Datatype idup;
    CHECK_MPI(MPI_Type_dup(MPI_INT, &idup));
    contents(idup, MPI_COMBINER_DUP, 0, 0, 1, ints, addrs, types, 0);
    CHECK(types[0] == MPI_INT, "dup(MPI_INT) contents");
    CHECK_MPI(MPI_Type_free(&idup));

    CHECK_MPI(MPI_Type_free(&vdup));
    CHECK_MPI(MPI_Type_free(&c5));
    CHECK_MPI(MPI_Type_free(&vec));
    CHECK_MPI(MPI_Type_free(&hvec));
    CHECK(c5 == MPI_DATATYPE_NULL && vec == MPI_DATATYPE_NULL, "Type_free did not null");
}

static void test_indexed(void)
{
    int ints[32];
    MPI_Aint addrs[32];
    MPI_Datatype types[32];
    int src[20], r[20];
    for (int i = 0; i < 20; i++) src[i] = 1000 + i;

    /* indexed */
    int bl[3] = {1, 3, 2}, dp[3] = {0, 4, 10};
    MPI_Datatype ix;
    CHECK_MPI(MPI_Type_indexed(3, bl, dp, MPI_INT, &ix));
    CHECK_MPI(MPI_Type_commit(&ix));
    check_size_extent(ix, 6 * (int)sizeof(int), 0, 12 * sizeof(int), 0, 12 * sizeof(int), "indexed");
    self_xfer(src, 1, ix, r, 6, MPI_INT);
    int e1[6] = {1000, 1004, 1005, 1006, 1010, 1011};
    for (int i = 0; i < 6; i++) CHECK(r[i] == e1[i], "indexed [%d]=%d", i, r[i]);
    contents(ix, MPI_COMBINER_INDEXED, 7, 0, 1, ints, addrs, types, 0);
    CHECK(ints[0] == 3 && ints[1] == 1 && ints[2] == 3 && ints[3] == 2 && ints[4] == 0 &&
              ints[5] == 4 && ints[6] == 10 && types[0] == MPI_INT,
          "indexed contents");

    /* hindexed (byte displacements, out of order) */
    int hbl[2] = {2, 1};
    MPI_Aint hdp[2] = {8 * sizeof(int), 2 * sizeof(int)};
    MPI_Datatype hix;
    CHECK_MPI(MPI_Type_create_hindexed(2, hbl, hdp, MPI_INT, &hix));
    CHECK_MPI(MPI_Type_commit(&hix));
    check_size_extent(hix, 3 * (int)sizeof(int), 2 * sizeof(int), 8 * sizeof(int),
                      2 * sizeof(int), 8 * sizeof(int), "hindexed");
    self_xfer(src, 1, hix, r, 3, MPI_INT);
    CHECK(r[0] == 1008 && r[1] == 1009 && r[2] == 1002, "hindexed data %d %d %d", r[0], r[1], r[2]);
    contents(hix, MPI_COMBINER_HINDEXED, 3, 2, 1, ints, addrs, types, 0);
    CHECK(ints[0] == 2 && ints[1] == 2 && ints[2] == 1 && addrs[0] == hdp[0] &&
              addrs[1] == hdp[1] && types[0] == MPI_INT,
          "hindexed contents");

    /* indexed_block */
    int bdp[3] = {1, 5, 9};
    MPI_Datatype ib;
    CHECK_MPI(MPI_Type_create_indexed_block(3, 2, bdp, MPI_INT, &ib));
    CHECK_MPI(MPI_Type_commit(&ib));
    check_size_extent(ib, 6 * (int)sizeof(int), sizeof(int), 10 * sizeof(int), sizeof(int),
                      10 * sizeof(int), "indexed_block");
    self_xfer(src, 1, ib, r, 6, MPI_INT);
    int e2[6] = {1001, 1002, 1005, 1006, 1009, 1010};
    for (int i = 0; i < 6; i++) CHECK(r[i] == e2[i], "indexed_block [%d]=%d", i, r[i]);
    contents(ib, MPI_COMBINER_INDEXED_BLOCK, 5, 0, 1, ints, addrs, types, 0);
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 1 && ints[3] == 5 && ints[4] == 9,
          "indexed_block contents");

    /* hindexed_block */
    MPI_Aint hbdp[2] = {12 * sizeof(int), 0};
    MPI_Datatype hib;
    CHECK_MPI(MPI_Type_create_hindexed_block(2, 3, hbdp, MPI_INT, &hib));
    CHECK_MPI(MPI_Type_commit(&hib));
    self_xfer(src, 1, hib, r, 6, MPI_INT);
    int e3[6] = {1012, 1013, 1014, 1000, 1001, 1002};
    for (int i = 0; i < 6; i++) CHECK(r[i] == e3[i], "hindexed_block [%d]=%d", i, r[i]);
    contents(hib, MPI_COMBINER_HINDEXED_BLOCK, 2, 2, 1, ints, addrs, types, 0);
    CHECK(ints[0] == 2 && ints[1] == 3 && addrs[0] == hbdp[0] && addrs[1] == 0,
          "hindexed_block contents");

    /* receive side derived: scatter contiguous ints into the indexed layout across ranks */
    int rr[12];
    for (int i = 0; i < 12; i++) rr[i] = -1;
    int sv[6];
    for (int i = 0; i < 6; i++) sv[i] = rank * 10 + i;
    CHECK_MPI(MPI_Sendrecv(sv, 6, MPI_INT, next, 4, rr, 1, ix, prev, 4, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    int pos[6] = {0, 4, 5, 6, 10, 11}, k = 0;
    for (int i = 0; i < 12; i++) {
        int e = (k < 6 && pos[k] == i) ? prev * 10 + k++ : -1;
        CHECK(rr[i] == e, "recv into indexed [%d]=%d expected %d", i, rr[i], e);
    }

    CHECK_MPI(MPI_Type_free(&ix));
    CHECK_MPI(MPI_Type_free(&hix));
    CHECK_MPI(MPI_Type_free(&ib));
    CHECK_MPI(MPI_Type_free(&hib));
}

static void make_struct(MPI_Datatype *st, MPI_Datatype *rs)
{
    int bl[3] = {1, 1, 1};
    MPI_Aint dp[3] = {offsetof(struct S, c), offsetof(struct S, d), offsetof(struct S, i)};
    MPI_Datatype ty[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    CHECK_MPI(MPI_Type_create_struct(3, bl, dp, ty, st));
    CHECK_MPI(MPI_Type_create_resized(*st, 0, sizeof(struct S), rs));
    CHECK_MPI(MPI_Type_commit(rs));
}

static void test_struct_resized(void)
{
    int ints[32];
    MPI_Aint addrs[32];
    MPI_Datatype types[32];
    MPI_Datatype st, rs;
    make_struct(&st, &rs);
    CHECK_MPI(MPI_Type_commit(&st));
    int ssz = (int)(sizeof(char) + sizeof(double) + sizeof(int));
    MPI_Aint tend = offsetof(struct S, i) + sizeof(int);
    {
        int sz;
        MPI_Aint tlb, text;
        CHECK_MPI(MPI_Type_size(st, &sz));
        CHECK(sz == ssz, "struct size %d", sz);
        CHECK_MPI(MPI_Type_get_true_extent(st, &tlb, &text));
        CHECK(tlb == 0 && text == tend, "struct true extent %ld/%ld", (long)tlb, (long)text);
    }
    check_size_extent(rs, ssz, 0, sizeof(struct S), 0, tend, "resized struct");

    struct S a[4], b[4];
    memset(a, 0x55, sizeof a); /* padding bytes get a known value */
    memset(b, 0x77, sizeof b);
    for (int k = 0; k < 4; k++) {
        a[k].c = (char)('a' + k + rank);
        a[k].d = rank * 1.5 + k;
        a[k].i = -rank * 100 - k;
    }
    CHECK_MPI(MPI_Sendrecv(a, 4, rs, next, 5, b, 4, rs, prev, 5, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    for (int k = 0; k < 4; k++) {
        CHECK(b[k].c == (char)('a' + k + prev) && b[k].d == prev * 1.5 + k &&
                  b[k].i == -prev * 100 - k,
              "struct data [%d]", k);
        /* padding must not be written */
        unsigned char *pb = (unsigned char *)&b[k];
        for (size_t off = 1; off < offsetof(struct S, d); off++)
            CHECK(pb[off] == 0x77, "struct padding byte %zu overwritten", off);
    }

    contents(st, MPI_COMBINER_STRUCT, 4, 3, 3, ints, addrs, types, 0);
    CHECK(ints[0] == 3 && ints[1] == 1 && ints[2] == 1 && ints[3] == 1, "struct contents ints");
    CHECK(addrs[0] == (MPI_Aint)offsetof(struct S, c) && addrs[1] == (MPI_Aint)offsetof(struct S, d) &&
              addrs[2] == (MPI_Aint)offsetof(struct S, i),
          "struct contents addrs");
    CHECK(types[0] == MPI_CHAR && types[1] == MPI_DOUBLE && types[2] == MPI_INT,
          "struct contents types");
    contents(rs, MPI_COMBINER_RESIZED, 0, 2, 1, ints, addrs, types, 1);
    CHECK(addrs[0] == 0 && addrs[1] == (MPI_Aint)sizeof(struct S), "resized contents addrs");
    {
        int ni, na, nd, comb;
        CHECK_MPI(MPI_Type_get_envelope(types[0], &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_STRUCT && ni == 4, "resized contents old type");
        CHECK_MPI(MPI_Type_free(&types[0]));
    }

    /* resized int with stride 3 ints and lb -1 int: sending count 4 picks every 3rd int */
    MPI_Datatype r3;
    CHECK_MPI(MPI_Type_create_resized(MPI_INT, -(MPI_Aint)sizeof(int), 3 * sizeof(int), &r3));
    CHECK_MPI(MPI_Type_commit(&r3));
    check_size_extent(r3, sizeof(int), -(MPI_Aint)sizeof(int), 3 * sizeof(int), 0, sizeof(int),
                      "resized int");
    int src[12], dst[4];
    for (int i = 0; i < 12; i++) src[i] = i * i;
    self_xfer(src, 4, r3, dst, 4, MPI_INT);
    for (int k = 0; k < 4; k++) CHECK(dst[k] == (3 * k) * (3 * k), "resized count>1 [%d]=%d", k, dst[k]);
    /* receive side: 4 ints spread with the resized type */
    int spread[12];
    for (int i = 0; i < 12; i++) spread[i] = -1;
    int four[4] = {7, 8, 9, 10};
    self_xfer(four, 4, MPI_INT, spread, 4, r3);
    for (int i = 0; i < 12; i++)
        CHECK(spread[i] == (i % 3 == 0 ? 7 + i / 3 : -1), "resized recv [%d]=%d", i, spread[i]);

    /* Bcast and Allgather with derived types */
    struct S bc[4];
    memset(bc, 0, sizeof bc);
    int root = size - 1;
    if (rank == root) memcpy(bc, a, sizeof a);
    CHECK_MPI(MPI_Bcast(bc, 4, rs, root, MPI_COMM_WORLD));
    for (int k = 0; k < 4; k++)
        CHECK(bc[k].c == (char)('a' + k + root) && bc[k].d == root * 1.5 + k &&
                  bc[k].i == -root * 100 - k,
              "Bcast struct [%d]", k);
    struct S *ag = malloc(sizeof(struct S) * (size_t)size);
    CHECK_MPI(MPI_Allgather(&a[1], 1, rs, ag, 1, rs, MPI_COMM_WORLD));
    for (int p = 0; p < size; p++)
        CHECK(ag[p].c == (char)('a' + 1 + p) && ag[p].d == p * 1.5 + 1 && ag[p].i == -p * 100 - 1,
              "Allgather struct [%d]", p);
    free(ag);
    /* Allgather: send one vector, receive contiguous doubles */
    MPI_Datatype vec;
    CHECK_MPI(MPI_Type_vector(3, 1, 2, MPI_DOUBLE, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    double m[5] = {rank + 0.0, -1, rank + 0.5, -1, rank + 0.75};
    double *all = malloc(sizeof(double) * 3 * (size_t)size);
    CHECK_MPI(MPI_Allgather(m, 1, vec, all, 3, MPI_DOUBLE, MPI_COMM_WORLD));
    for (int p = 0; p < size; p++)
        CHECK(all[3 * p] == p && all[3 * p + 1] == p + 0.5 && all[3 * p + 2] == p + 0.75,
              "Allgather vector->contig [%d]", p);
    free(all);

    CHECK_MPI(MPI_Type_free(&vec));
    CHECK_MPI(MPI_Type_free(&r3));
    CHECK_MPI(MPI_Type_free(&st));
    CHECK_MPI(MPI_Type_free(&rs));
}

static void test_subarray(void)
{
    int ints[32];
    MPI_Aint addrs[32];
    MPI_Datatype types[32];
    /* 2D, C order: 6x8 array, 3x4 block at (1,2) */
    int a2[6][8], r[64];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 8; j++) a2[i][j] = i * 100 + j;
    int sizes[3] = {6, 8, 0}, subs[3] = {3, 4, 0}, starts[3] = {1, 2, 0};
    MPI_Datatype sc, sf;
    CHECK_MPI(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sc));
    CHECK_MPI(MPI_Type_commit(&sc));
    MPI_Aint tlb = (1 * 8 + 2) * sizeof(int), text = ((3 - 1) * 8 + 4) * sizeof(int);
    check_size_extent(sc, 12 * sizeof(int), 0, 48 * sizeof(int), tlb, text, "subarray C");
    self_xfer(a2, 1, sc, r, 12, MPI_INT);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            CHECK(r[i * 4 + j] == (1 + i) * 100 + (2 + j), "subarray C [%d][%d]=%d", i, j, r[i * 4 + j]);
    contents(sc, MPI_COMBINER_SUBARRAY, 8, 0, 1, ints, addrs, types, 0);
    CHECK(ints[0] == 2 && ints[1] == 6 && ints[2] == 8 && ints[3] == 3 && ints[4] == 4 &&
              ints[5] == 1 && ints[6] == 2 && ints[7] == MPI_ORDER_C && types[0] == MPI_INT,
          "subarray contents");

    /* 2D, Fortran order: the same region described column-major */
    int fs[2] = {8, 6}, fsub[2] = {4, 3}, fst[2] = {2, 1};
    CHECK_MPI(MPI_Type_create_subarray(2, fs, fsub, fst, MPI_ORDER_FORTRAN, MPI_INT, &sf));
    CHECK_MPI(MPI_Type_commit(&sf));
    check_size_extent(sf, 12 * sizeof(int), 0, 48 * sizeof(int), tlb, text, "subarray F");
    for (int i = 0; i < 12; i++) r[i] = -1;
    self_xfer(a2, 1, sf, r, 12, MPI_INT);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            CHECK(r[i * 4 + j] == (1 + i) * 100 + (2 + j), "subarray F [%d][%d]", i, j);
    /* a genuinely Fortran-order 2D case: 4 rows (fastest) x 5 cols, block 2x3 at (1,2) */
    int fa[20]; /* element (i,j) at i + 4*j */
    for (int j = 0; j < 5; j++)
        for (int i = 0; i < 4; i++) fa[i + 4 * j] = i * 10 + j;
    int fs2[2] = {4, 5}, fsub2[2] = {2, 3}, fst2[2] = {1, 2};
    MPI_Datatype sf2;
    CHECK_MPI(MPI_Type_create_subarray(2, fs2, fsub2, fst2, MPI_ORDER_FORTRAN, MPI_INT, &sf2));
    CHECK_MPI(MPI_Type_commit(&sf2));
    self_xfer(fa, 1, sf2, r, 6, MPI_INT);
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 2; i++)
            CHECK(r[i + 2 * j] == (1 + i) * 10 + (2 + j), "subarray F2 (%d,%d)=%d", i, j, r[i + 2 * j]);

    /* 3D, C order: 4x5x6, block 2x3x2 at (1,1,3) */
    int a3[4][5][6];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            for (int k = 0; k < 6; k++) a3[i][j][k] = i * 10000 + j * 100 + k;
    int s3[3] = {4, 5, 6}, sub3[3] = {2, 3, 2}, st3[3] = {1, 1, 3};
    MPI_Datatype t3;
    CHECK_MPI(MPI_Type_create_subarray(3, s3, sub3, st3, MPI_ORDER_C, MPI_INT, &t3));
    CHECK_MPI(MPI_Type_commit(&t3));
    check_size_extent(t3, 12 * sizeof(int), 0, 120 * sizeof(int), (1 * 30 + 1 * 6 + 3) * sizeof(int),
                      ((2 * 30 + 3 * 6 + 5) - (1 * 30 + 1 * 6 + 3)) * sizeof(int), "subarray 3D");
    self_xfer(a3, 1, t3, r, 12, MPI_INT);
    int n = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++, n++)
                CHECK(r[n] == (1 + i) * 10000 + (1 + j) * 100 + (3 + k), "subarray 3D [%d]=%d", n, r[n]);
    /* 3D Fortran order on the same memory, dims reversed: identical selection */
    int s3f[3] = {6, 5, 4}, sub3f[3] = {2, 3, 2}, st3f[3] = {3, 1, 1};
    MPI_Datatype t3f;
    CHECK_MPI(MPI_Type_create_subarray(3, s3f, sub3f, st3f, MPI_ORDER_FORTRAN, MPI_INT, &t3f));
    CHECK_MPI(MPI_Type_commit(&t3f));
    int r2[12];
    self_xfer(a3, 1, t3f, r2, 12, MPI_INT);
    for (int i = 0; i < 12; i++) CHECK(r2[i] == r[i], "subarray 3D Fortran [%d]", i);
    /* subarray on a remote rank: send a C block, receive into a Fortran-described block */
    int dst[6][8];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 8; j++) a2[i][j] = rank * 1000 + i * 10 + j, dst[i][j] = -1;
    CHECK_MPI(MPI_Sendrecv(a2, 1, sc, next, 6, dst, 1, sf, prev, 6, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 8; j++) {
            int in = i >= 1 && i < 4 && j >= 2 && j < 6;
            CHECK(dst[i][j] == (in ? prev * 1000 + i * 10 + j : -1), "subarray xfer [%d][%d]", i, j);
        }

    CHECK_MPI(MPI_Type_free(&sc));
    CHECK_MPI(MPI_Type_free(&sf));
    CHECK_MPI(MPI_Type_free(&sf2));
    CHECK_MPI(MPI_Type_free(&t3));
    CHECK_MPI(MPI_Type_free(&t3f));
}

static void test_names_envelope(void)
{
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    struct { MPI_Datatype t; const char *n; } pre[] = {
        {MPI_INT, "MPI_INT"}, {MPI_DOUBLE, "MPI_DOUBLE"}, {MPI_CHAR, "MPI_CHAR"},
        {MPI_FLOAT, "MPI_FLOAT"}, {MPI_BYTE, "MPI_BYTE"}, {MPI_LONG, "MPI_LONG"},
        {MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR"}, {MPI_SHORT, "MPI_SHORT"},
        {MPI_DOUBLE_INT, "MPI_DOUBLE_INT"}, {MPI_2INT, "MPI_2INT"},
    };
    for (size_t k = 0; k < sizeof pre / sizeof pre[0]; k++) {
        CHECK_MPI(MPI_Type_get_name(pre[k].t, name, &len));
        CHECK(strcmp(name, pre[k].n) == 0 && len == (int)strlen(pre[k].n),
              "Type_get_name: '%s' (%d) expected '%s'", name, len, pre[k].n);
        int ni, na, nd, comb;
        CHECK_MPI(MPI_Type_get_envelope(pre[k].t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_NAMED && ni == 0 && na == 0 && nd == 0,
              "envelope of %s: comb %d", pre[k].n, comb);
    }
    MPI_Datatype t;
    CHECK_MPI(MPI_Type_contiguous(3, MPI_INT, &t));
    CHECK_MPI(MPI_Type_get_name(t, name, &len));
    CHECK(len == 0 && name[0] == '\0', "unnamed type has name '%s'", name);
    CHECK_MPI(MPI_Type_set_name(t, "my three ints"));
    CHECK_MPI(MPI_Type_get_name(t, name, &len));
    CHECK(strcmp(name, "my three ints") == 0 && len == 13, "user type name '%s'", name);
    CHECK_MPI(MPI_Type_set_name(t, "renamed"));
    CHECK_MPI(MPI_Type_get_name(t, name, &len));
    CHECK(strcmp(name, "renamed") == 0 && len == 7, "renamed type name '%s'", name);
    CHECK_MPI(MPI_Type_free(&t));
}

static void test_pack(void)
{
    MPI_Datatype vec;
    CHECK_MPI(MPI_Type_vector(3, 2, 4, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    int m[12], hdr = 4242;
    double d[2] = {3.25, -1.5};
    for (int i = 0; i < 12; i++) m[i] = i + 1;
    int s1, s2, s3;
    CHECK_MPI(MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &s1));
    CHECK_MPI(MPI_Pack_size(2, vec, MPI_COMM_WORLD, &s2));
    CHECK_MPI(MPI_Pack_size(2, MPI_DOUBLE, MPI_COMM_WORLD, &s3));
    CHECK(s1 >= (int)sizeof(int) && s2 >= 12 * (int)sizeof(int) && s3 >= 2 * (int)sizeof(double),
          "Pack_size too small: %d %d %d", s1, s2, s3);
    int cap = s1 + s2 + s3;
    char *buf = malloc((size_t)cap);
    int pos = 0;
    int m2[24];
    for (int i = 0; i < 24; i++) m2[i] = i < 12 ? m[i] : 100 + i;
    CHECK_MPI(MPI_Pack(&hdr, 1, MPI_INT, buf, cap, &pos, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Pack(m2, 2, vec, buf, cap, &pos, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Pack(d, 2, MPI_DOUBLE, buf, cap, &pos, MPI_COMM_WORLD));
    CHECK(pos > 0 && pos <= cap, "Pack position %d (cap %d)", pos, cap);
    int packed = pos;

    /* send the packed bytes as MPI_PACKED to the next rank */
    char *rbuf = malloc((size_t)cap);
    MPI_Status st;
    CHECK_MPI(MPI_Sendrecv(buf, packed, MPI_PACKED, next, 7, rbuf, cap, MPI_PACKED, prev, 7,
                           MPI_COMM_WORLD, &st));
    int rcnt;
    CHECK_MPI(MPI_Get_count(&st, MPI_PACKED, &rcnt));
    CHECK(rcnt == packed, "MPI_PACKED count %d expected %d", rcnt, packed);

    int h2 = 0, out[12];
    double d2[2] = {0, 0};
    pos = 0;
    CHECK_MPI(MPI_Unpack(rbuf, rcnt, &pos, &h2, 1, MPI_INT, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Unpack(rbuf, rcnt, &pos, out, 12, MPI_INT, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Unpack(rbuf, rcnt, &pos, d2, 2, MPI_DOUBLE, MPI_COMM_WORLD));
    CHECK(pos == rcnt, "Unpack consumed %d of %d", pos, rcnt);
    CHECK(h2 == 4242 && d2[0] == 3.25 && d2[1] == -1.5, "Unpack scalars");
    /* two vectors (extent 10 ints each): elements at 0,1,4,5,8,9 then 10,11,14,15,18,19 */
    int exp_idx[12] = {0, 1, 4, 5, 8, 9, 10, 11, 14, 15, 18, 19};
    for (int i = 0; i < 12; i++) CHECK(out[i] == m2[exp_idx[i]], "Unpack vector [%d]=%d", i, out[i]);

    /* receive a packed message directly with the derived type */
    pos = 0;
    char *b2 = malloc((size_t)s2);
    CHECK_MPI(MPI_Pack(m2, 2, vec, b2, s2, &pos, MPI_COMM_WORLD));
    int back[24];
    for (int i = 0; i < 24; i++) back[i] = -1;
    self_xfer(b2, pos, MPI_PACKED, back, 2, vec);
    for (int i = 0; i < 24; i++) {
        int in = 0;
        for (int k = 0; k < 12; k++) in |= exp_idx[k] == i;
        CHECK(back[i] == (in ? m2[i] : -1), "PACKED->vector [%d]", i);
    }
    free(b2);
    free(buf);
    free(rbuf);
    CHECK_MPI(MPI_Type_free(&vec));
}

static void test_get_elements(void)
{
    MPI_Datatype st, rs;
    make_struct(&st, &rs);
    /* sender: one full struct followed by a char and a double (5 basic elements) */
    MPI_Datatype snd;
    int bl[3] = {1, 1, 1};
    MPI_Aint dp[3] = {0, sizeof(struct S), sizeof(struct S) + offsetof(struct S, d)};
    MPI_Datatype ty[3] = {rs, MPI_CHAR, MPI_DOUBLE};
    CHECK_MPI(MPI_Type_create_struct(3, bl, dp, ty, &snd));
    CHECK_MPI(MPI_Type_commit(&snd));
    struct S a[2], b[3];
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    a[0].c = 'x'; a[0].d = 2.5; a[0].i = 77; a[1].c = 'y'; a[1].d = 4.5; a[1].i = 88;
    MPI_Status s;
    CHECK_MPI(MPI_Sendrecv(a, 1, snd, next, 8, b, 3, rs, prev, 8, MPI_COMM_WORLD, &s));
    int cnt, el;
    MPI_Count elx;
    CHECK_MPI(MPI_Get_count(&s, rs, &cnt));
    CHECK(cnt == MPI_UNDEFINED, "Get_count of partial struct = %d, expected MPI_UNDEFINED", cnt);
    CHECK_MPI(MPI_Get_elements(&s, rs, &el));
    CHECK(el == 5, "Get_elements = %d expected 5", el);
    CHECK_MPI(MPI_Get_elements_x(&s, rs, &elx));
    CHECK(elx == 5, "Get_elements_x = %lld expected 5", (long long)elx);
    CHECK(b[0].c == 'x' && b[0].d == 2.5 && b[0].i == 77 && b[1].c == 'y' && b[1].d == 4.5 &&
              b[1].i == 0,
          "partial struct data");
    /* a whole number of structs */
    CHECK_MPI(MPI_Sendrecv(a, 2, rs, next, 9, b, 3, rs, prev, 9, MPI_COMM_WORLD, &s));
    CHECK_MPI(MPI_Get_count(&s, rs, &cnt));
    CHECK_MPI(MPI_Get_elements(&s, rs, &el));
    CHECK(cnt == 2 && el == 6, "whole structs: count %d elements %d", cnt, el);
    CHECK_MPI(MPI_Type_free(&snd));
    CHECK_MPI(MPI_Type_free(&st));
    CHECK_MPI(MPI_Type_free(&rs));
}

static void test_bottom(void)
{
    int iv = rank * 3 + 1;
    double dv[3] = {rank + 0.5, rank + 1.5, rank + 2.5};
    MPI_Aint ai, ad;
    CHECK_MPI(MPI_Get_address(&iv, &ai));
    CHECK_MPI(MPI_Get_address(dv, &ad));
    int bl[2] = {1, 3};
    MPI_Aint dp[2] = {ai, ad};
    MPI_Datatype ty[2] = {MPI_INT, MPI_DOUBLE}, st;
    CHECK_MPI(MPI_Type_create_struct(2, bl, dp, ty, &st));
    CHECK_MPI(MPI_Type_commit(&st));

    int ri = -1;
    double rd[3] = {0, 0, 0};
    MPI_Aint ari, ard;
    CHECK_MPI(MPI_Get_address(&ri, &ari));
    CHECK_MPI(MPI_Get_address(rd, &ard));
    MPI_Aint rdp[2] = {ari, ard};
    MPI_Datatype rt;
    CHECK_MPI(MPI_Type_create_struct(2, bl, rdp, ty, &rt));
    CHECK_MPI(MPI_Type_commit(&rt));
    CHECK_MPI(MPI_Sendrecv(MPI_BOTTOM, 1, st, next, 10, MPI_BOTTOM, 1, rt, prev, 10,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(ri == prev * 3 + 1 && rd[0] == prev + 0.5 && rd[2] == prev + 2.5, "MPI_BOTTOM data");
    /* MPI_BOTTOM on the send side only: receive into a plain struct described
     * with relative displacements */
    struct P { int i; double d[3]; } plain;
    memset(&plain, 0, sizeof plain);
    MPI_Aint pdp[2] = {offsetof(struct P, i), offsetof(struct P, d)};
    MPI_Datatype pt;
    CHECK_MPI(MPI_Type_create_struct(2, bl, pdp, ty, &pt));
    CHECK_MPI(MPI_Type_commit(&pt));
    CHECK_MPI(MPI_Sendrecv(MPI_BOTTOM, 1, st, next, 11, &plain, 1, pt, prev, 11, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    CHECK(plain.i == prev * 3 + 1 && plain.d[0] == prev + 0.5 && plain.d[1] == prev + 1.5 &&
              plain.d[2] == prev + 2.5,
          "MPI_BOTTOM -> relative struct data");
    /* and a Bcast from MPI_BOTTOM */
    ri = -1;
    rd[0] = rd[1] = rd[2] = 0;
    if (rank == 0) { ri = 5; rd[0] = 1; rd[1] = 2; rd[2] = 3; }
    CHECK_MPI(MPI_Bcast(MPI_BOTTOM, 1, rt, 0, MPI_COMM_WORLD));
    CHECK(ri == 5 && rd[0] == 1 && rd[1] == 2 && rd[2] == 3, "Bcast MPI_BOTTOM");
    CHECK_MPI(MPI_Type_free(&pt));
    CHECK_MPI(MPI_Type_free(&st));
    CHECK_MPI(MPI_Type_free(&rt));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    next = (rank + 1) % size;
    prev = (rank + size - 1) % size;

    test_contiguous_vector();
    test_indexed();
    test_struct_resized();
    test_subarray();
    test_names_envelope();
    test_pack();
    test_get_elements();
    test_bottom();

    REPORT_OK();
    MPI_Finalize();
    return 0;
}
