/* MPI-4's large-count datatype and packing calls (the `_c` variants: MPI_Count
 * sizes, extents, counts and positions) on small types, each checked against
 * its `int` twin's results; a negative count fails with MPI_ERR_COUNT.
 * Covers Type_size_c, Type_get_extent_c, Type_get_true_extent_c, Pack_c,
 * Unpack_c, Pack_size_c, Pack_external_c, Unpack_external_c,
 * Pack_external_size_c, Type_get_envelope_c and Type_get_contents_c.
 * Plain MPI only. */
#define TEST_NAME "largecount_type"
#include "check.h"
#include <string.h>

#define N 4

static void expect_count_error(int rc, const char *what)
{
    int cls = -1;
    CHECK(rc != MPI_SUCCESS, "%s: returned MPI_SUCCESS, expected MPI_ERR_COUNT", what);
    CHECK_MPI(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_COUNT, "%s: error class %d, expected MPI_ERR_COUNT (%d)", what, cls,
          MPI_ERR_COUNT);
}

/* A vector of ints with a gap, resized to a lower bound of -8: size, extent
 * and true extent all differ. */
static MPI_Datatype make_type(void)
{
    MPI_Datatype v, r;
    CHECK_MPI(MPI_Type_vector(3, 2, 3, MPI_INT, &v));
    CHECK_MPI(MPI_Type_create_resized(v, -8, 40, &r));
    CHECK_MPI(MPI_Type_free(&v));
    CHECK_MPI(MPI_Type_commit(&r));
    return r;
}

static void test_queries(MPI_Datatype t)
{
    MPI_Datatype types[] = {MPI_INT, MPI_DOUBLE, MPI_CHAR, t};
    for (int k = 0; k < 4; k++) {
        int s;
        MPI_Count sc = -1;
        MPI_Aint lb, ext, tlb, text;
        MPI_Count lbc = -1, extc = -1, tlbc = -1, textc = -1;
        CHECK_MPI(MPI_Type_size(types[k], &s));
        CHECK_MPI(MPI_Type_size_c(types[k], &sc));
        CHECK(sc == s, "Type_size_c [%d]: %lld, Type_size %d", k, (long long)sc, s);
        CHECK_MPI(MPI_Type_get_extent(types[k], &lb, &ext));
        CHECK_MPI(MPI_Type_get_extent_c(types[k], &lbc, &extc));
        CHECK(lbc == lb && extc == ext, "Type_get_extent_c [%d]: %lld %lld, int twin %ld %ld", k,
              (long long)lbc, (long long)extc, (long)lb, (long)ext);
        CHECK_MPI(MPI_Type_get_true_extent(types[k], &tlb, &text));
        CHECK_MPI(MPI_Type_get_true_extent_c(types[k], &tlbc, &textc));
        CHECK(tlbc == tlb && textc == text,
              "Type_get_true_extent_c [%d]: %lld %lld, int twin %ld %ld", k, (long long)tlbc,
              (long long)textc, (long)tlb, (long)text);
    }
    MPI_Count sc, lbc, extc;
    CHECK_MPI(MPI_Type_size_c(t, &sc));
    CHECK_MPI(MPI_Type_get_extent_c(t, &lbc, &extc));
    CHECK(sc == 24 && lbc == -8 && extc == 40, "the test type: size %lld lb %lld extent %lld",
          (long long)sc, (long long)lbc, (long long)extc);
}

static void test_pack(MPI_Datatype t)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int src[N * 10 + 2], dst[N * 10 + 2], dstc[N * 10 + 2];
    char out[1024], outc[1024];
    for (int i = 0; i < N * 10 + 2; i++) src[i] = 1000 + i;
    int *base = src + 2; /* lb is -8 bytes */

    int ps;
    MPI_Count psc = -1;
    CHECK_MPI(MPI_Pack_size(N, t, w, &ps));
    CHECK_MPI(MPI_Pack_size_c(N, t, w, &psc));
    CHECK(psc == ps, "Pack_size_c: %lld, Pack_size %d", (long long)psc, ps);

    /* pack one int first, then N of t, with each form */
    int one = 77, pos = 0;
    MPI_Count posc = 0;
    memset(out, 0, sizeof out);
    memset(outc, 0, sizeof outc);
    CHECK_MPI(MPI_Pack(&one, 1, MPI_INT, out, (int)sizeof out, &pos, w));
    CHECK_MPI(MPI_Pack(base, N, t, out, (int)sizeof out, &pos, w));
    CHECK_MPI(MPI_Pack_c(&one, 1, MPI_INT, outc, (MPI_Count)sizeof outc, &posc, w));
    CHECK_MPI(MPI_Pack_c(base, N, t, outc, (MPI_Count)sizeof outc, &posc, w));
    CHECK(posc == pos, "Pack_c: position %lld, Pack %d", (long long)posc, pos);
    CHECK(memcmp(out, outc, (size_t)pos) == 0, "Pack_c: packed bytes differ from Pack's");

    int got = 0;
    pos = 0;
    posc = 0;
    for (int i = 0; i < N * 10 + 2; i++) dst[i] = dstc[i] = -1;
    CHECK_MPI(MPI_Unpack(out, (int)sizeof out, &pos, &got, 1, MPI_INT, w));
    CHECK_MPI(MPI_Unpack(out, (int)sizeof out, &pos, dst + 2, N, t, w));
    CHECK(got == 77, "Unpack: first int %d", got);
    got = 0;
    CHECK_MPI(MPI_Unpack_c(outc, (MPI_Count)sizeof outc, &posc, &got, 1, MPI_INT, w));
    CHECK_MPI(MPI_Unpack_c(outc, (MPI_Count)sizeof outc, &posc, dstc + 2, N, t, w));
    CHECK(got == 77, "Unpack_c: first int %d", got);
    CHECK(posc == pos, "Unpack_c: position %lld, Unpack %d", (long long)posc, pos);
    for (int i = 0; i < N * 10 + 2; i++)
        CHECK(dstc[i] == dst[i], "Unpack_c: [%d] is %d, Unpack gave %d", i, dstc[i], dst[i]);
    /* element j of t covers ints 10j + {0,1,3,4,6,7} past base (lb only moves the extent) */
    for (int j = 0; j < N; j++)
        for (int b = 0; b < 3; b++)
            for (int e = 0; e < 2; e++) {
                int at = 2 + 10 * j + 3 * b + e;
                CHECK(dstc[at] == src[at], "Unpack_c: [%d] is %d, expected %d", at, dstc[at],
                      src[at]);
            }

    /* external32 */
    MPI_Aint es;
    MPI_Count esc = -1;
    CHECK_MPI(MPI_Pack_external_size("external32", N, t, &es));
    CHECK_MPI(MPI_Pack_external_size_c("external32", N, t, &esc));
    CHECK(esc == es, "Pack_external_size_c: %lld, int twin %ld", (long long)esc, (long)es);
    MPI_Aint epos = 0;
    MPI_Count eposc = 0;
    memset(out, 0, sizeof out);
    memset(outc, 0, sizeof outc);
    CHECK_MPI(MPI_Pack_external("external32", base, N, t, out, (MPI_Aint)sizeof out, &epos));
    CHECK_MPI(MPI_Pack_external_c("external32", base, N, t, outc, (MPI_Count)sizeof outc, &eposc));
    CHECK(eposc == epos && epos == es, "Pack_external_c: position %lld, int twin %ld (size %ld)",
          (long long)eposc, (long)epos, (long)es);
    CHECK(memcmp(out, outc, (size_t)epos) == 0, "Pack_external_c: bytes differ from the int twin's");
    /* external32 is big-endian: the first int (1000 + 2) ends in 0x03 0xEA */
    CHECK((unsigned char)outc[2] == 0x03 && (unsigned char)outc[3] == 0xEA,
          "Pack_external_c: first int not big-endian");
    epos = 0;
    eposc = 0;
    for (int i = 0; i < N * 10 + 2; i++) dst[i] = dstc[i] = -1;
    CHECK_MPI(MPI_Unpack_external("external32", out, (MPI_Aint)sizeof out, &epos, dst + 2, N, t));
    CHECK_MPI(MPI_Unpack_external_c("external32", outc, (MPI_Count)sizeof outc, &eposc, dstc + 2,
                                     N, t));
    CHECK(eposc == epos, "Unpack_external_c: position %lld, int twin %ld", (long long)eposc,
          (long)epos);
    for (int i = 0; i < N * 10 + 2; i++)
        CHECK(dstc[i] == dst[i], "Unpack_external_c: [%d] is %d, int twin gave %d", i, dstc[i],
              dst[i]);
}

static void test_decode(MPI_Datatype t)
{
    int blens[2] = {1, 2};
    MPI_Aint disps[2] = {0, 8};
    MPI_Datatype tys[2] = {MPI_INT, t}, s;
    CHECK_MPI(MPI_Type_create_struct(2, blens, disps, tys, &s));

    MPI_Datatype cases[] = {MPI_INT, t, s};
    for (int k = 0; k < 3; k++) {
        int ni, na, nd, comb;
        MPI_Count nic = -1, nac = -1, ncc = -1, ndc = -1;
        int combc = -1;
        CHECK_MPI(MPI_Type_get_envelope(cases[k], &ni, &na, &nd, &comb));
        CHECK_MPI(MPI_Type_get_envelope_c(cases[k], &nic, &nac, &ncc, &ndc, &combc));
        CHECK(combc == comb && nic == ni && nac == na && ncc == 0 && ndc == nd,
              "Type_get_envelope_c [%d]: %lld %lld %lld %lld comb %d, int twin %d %d %d comb %d", k,
              (long long)nic, (long long)nac, (long long)ncc, (long long)ndc, combc, ni, na, nd,
              comb);
        if (comb == MPI_COMBINER_NAMED)
            continue;
        int ints[8], intsc[8];
        MPI_Aint as[8], asc[8];
        MPI_Count cs[8];
        MPI_Datatype ds[8], dsc[8];
        CHECK(ni <= 8 && na <= 8 && nd <= 8, "envelope too large");
        CHECK_MPI(MPI_Type_get_contents(cases[k], ni, na, nd, ints, as, ds));
        CHECK_MPI(MPI_Type_get_contents_c(cases[k], nic, nac, ncc, ndc, intsc, asc, cs, dsc));
        for (int i = 0; i < ni; i++)
            CHECK(intsc[i] == ints[i], "Type_get_contents_c [%d]: int %d is %d, int twin %d", k, i,
                  intsc[i], ints[i]);
        for (int i = 0; i < na; i++)
            CHECK(asc[i] == as[i], "Type_get_contents_c [%d]: address %d is %ld, int twin %ld", k,
                  i, (long)asc[i], (long)as[i]);
        for (int i = 0; i < nd; i++) {
            MPI_Count s1, s2;
            CHECK_MPI(MPI_Type_size_c(ds[i], &s1));
            CHECK_MPI(MPI_Type_size_c(dsc[i], &s2));
            CHECK(s1 == s2, "Type_get_contents_c [%d]: type %d of size %lld, int twin %lld", k, i,
                  (long long)s2, (long long)s1);
            int x, y, z, c1, c2;
            CHECK_MPI(MPI_Type_get_envelope(ds[i], &x, &y, &z, &c1));
            CHECK_MPI(MPI_Type_get_envelope(dsc[i], &x, &y, &z, &c2));
            CHECK(c1 == c2, "Type_get_contents_c [%d]: type %d combiner %d, int twin %d", k, i, c2,
                  c1);
            if (c1 != MPI_COMBINER_NAMED) {
                CHECK_MPI(MPI_Type_free(&ds[i]));
                CHECK_MPI(MPI_Type_free(&dsc[i]));
            }
        }
    }
    CHECK_MPI(MPI_Type_free(&s));
}

static void test_errors(MPI_Datatype t)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int buf[64];
    char out[256];
    MPI_Count pos = 0, size;
    CHECK_MPI(MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    expect_count_error(MPI_Pack_c(buf, -1, MPI_INT, out, sizeof out, &pos, w), "Pack_c incount -1");
    pos = 0;
    expect_count_error(MPI_Unpack_c(out, sizeof out, &pos, buf, -1, MPI_INT, w),
                       "Unpack_c outcount -1");
    expect_count_error(MPI_Pack_size_c(-1, t, w, &size), "Pack_size_c incount -1");
    pos = 0;
    expect_count_error(MPI_Pack_external_c("external32", buf, -1, MPI_INT, out, sizeof out, &pos),
                       "Pack_external_c incount -1");
    pos = 0;
    expect_count_error(
        MPI_Unpack_external_c("external32", out, sizeof out, &pos, buf, -1, MPI_INT),
        "Unpack_external_c outcount -1");
    expect_count_error(MPI_Pack_external_size_c("external32", -((MPI_Count)1 << 40), MPI_INT, &size),
                       "Pack_external_size_c incount -2^40");
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
    CHECK_MPI(MPI_Comm_set_errhandler(w, MPI_ERRORS_ARE_FATAL));
}

/* Two types are the same layout: size, bounds, true bounds, and the bytes
 * one send of each moves (packed from a patterned buffer). */
static void same_layout(MPI_Datatype a, MPI_Datatype b, const char *what)
{
    int sa, sb;
    MPI_Aint la, ea, lb2, eb, tla, tea, tlb, teb;
    CHECK_MPI(MPI_Type_size(a, &sa));
    CHECK_MPI(MPI_Type_size(b, &sb));
    CHECK_MPI(MPI_Type_get_extent(a, &la, &ea));
    CHECK_MPI(MPI_Type_get_extent(b, &lb2, &eb));
    CHECK_MPI(MPI_Type_get_true_extent(a, &tla, &tea));
    CHECK_MPI(MPI_Type_get_true_extent(b, &tlb, &teb));
    CHECK(sa == sb && la == lb2 && ea == eb && tla == tlb && tea == teb,
          "%s: size %d/%d lb %ld/%ld extent %ld/%ld true %ld+%ld/%ld+%ld", what, sa, sb, (long)la,
          (long)lb2, (long)ea, (long)eb, (long)tla, (long)tea, (long)tlb, (long)teb);
    static unsigned char src[4096], pa[4096], pb[4096];
    for (int i = 0; i < (int)sizeof src; i++) src[i] = (unsigned char)(i * 7 + 1);
    CHECK_MPI(MPI_Type_commit(&a));
    CHECK_MPI(MPI_Type_commit(&b));
    int qa = 0, qb = 0;
    CHECK_MPI(MPI_Pack(src + 512, 1, a, pa, sizeof pa, &qa, MPI_COMM_SELF));
    CHECK_MPI(MPI_Pack(src + 512, 1, b, pb, sizeof pb, &qb, MPI_COMM_SELF));
    CHECK(qa == qb && memcmp(pa, pb, (size_t)qa) == 0, "%s: packed bytes differ", what);
}

/* The envelope of a `_c` type: combiner, no addresses, and exactly these
 * ints, large counts and types; the int decoding calls refuse it. */
static void expect_envelope(MPI_Datatype t, int comb, int ni, const int *ints, int nc,
                            const MPI_Count *counts, int nd, const MPI_Datatype *types,
                            const char *what)
{
    MPI_Count a, b, c, d;
    int got;
    CHECK_MPI(MPI_Type_get_envelope_c(t, &a, &b, &c, &d, &got));
    CHECK(got == comb && a == ni && b == 0 && c == nc && d == nd,
          "%s: combiner %d (want %d), %lld ints, %lld addresses, %lld counts, %lld types", what, got,
          comb, (long long)a, (long long)b, (long long)c, (long long)d);
    int gi[64];
    MPI_Aint ga[1];
    MPI_Count gc[64];
    MPI_Datatype gt[8];
    CHECK_MPI(MPI_Type_get_contents_c(t, a, b, c, d, gi, ga, gc, gt));
    for (int i = 0; i < ni; i++) CHECK(gi[i] == ints[i], "%s: ints[%d] %d, want %d", what, i, gi[i], ints[i]);
    for (int i = 0; i < nc; i++)
        CHECK(gc[i] == counts[i], "%s: counts[%d] %lld, want %lld", what, i, (long long)gc[i],
              (long long)counts[i]);
    for (int i = 0; i < nd; i++) {
        CHECK(gt[i] == types[i], "%s: types[%d] differs", what, i);
    }
    int x, y, z, k;
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Type_get_envelope(t, &x, &y, &z, &k) != MPI_SUCCESS,
          "%s: MPI_Type_get_envelope cannot decode a type with large counts", what);
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* Every `_c` constructor against its int twin, with its MPI 4.0 envelope. */
static void test_constructors(void)
{
    MPI_Datatype c, i;
    CHECK_MPI(MPI_Type_contiguous_c(3, MPI_INT, &c));
    CHECK_MPI(MPI_Type_contiguous(3, MPI_INT, &i));
    same_layout(c, i, "contiguous_c");
    MPI_Count c1[] = {3};
    MPI_Datatype ti[] = {MPI_INT};
    expect_envelope(c, MPI_COMBINER_CONTIGUOUS, 0, NULL, 1, c1, 1, ti, "contiguous_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    CHECK_MPI(MPI_Type_vector_c(3, 2, 5, MPI_INT, &c));
    CHECK_MPI(MPI_Type_vector(3, 2, 5, MPI_INT, &i));
    same_layout(c, i, "vector_c");
    MPI_Count c2[] = {3, 2, 5};
    expect_envelope(c, MPI_COMBINER_VECTOR, 0, NULL, 3, c2, 1, ti, "vector_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    CHECK_MPI(MPI_Type_create_hvector_c(3, 2, 24, MPI_INT, &c));
    CHECK_MPI(MPI_Type_create_hvector(3, 2, 24, MPI_INT, &i));
    same_layout(c, i, "hvector_c");
    MPI_Count c3[] = {3, 2, 24};
    expect_envelope(c, MPI_COMBINER_HVECTOR, 0, NULL, 3, c3, 1, ti, "hvector_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    MPI_Count bl[] = {1, 2, 3}, dp[] = {0, 4, 9}, bdp[] = {0, 16, 40};
    int ibl[] = {1, 2, 3}, idp[] = {0, 4, 9};
    MPI_Aint abdp[] = {0, 16, 40};
    CHECK_MPI(MPI_Type_indexed_c(3, bl, dp, MPI_INT, &c));
    CHECK_MPI(MPI_Type_indexed(3, ibl, idp, MPI_INT, &i));
    same_layout(c, i, "indexed_c");
    MPI_Count c4[] = {3, 1, 2, 3, 0, 4, 9};
    expect_envelope(c, MPI_COMBINER_INDEXED, 0, NULL, 7, c4, 1, ti, "indexed_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    CHECK_MPI(MPI_Type_create_hindexed_c(3, bl, bdp, MPI_INT, &c));
    CHECK_MPI(MPI_Type_create_hindexed(3, ibl, abdp, MPI_INT, &i));
    same_layout(c, i, "hindexed_c");
    MPI_Count c5[] = {3, 1, 2, 3, 0, 16, 40};
    expect_envelope(c, MPI_COMBINER_HINDEXED, 0, NULL, 7, c5, 1, ti, "hindexed_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    CHECK_MPI(MPI_Type_create_indexed_block_c(3, 2, dp, MPI_INT, &c));
    CHECK_MPI(MPI_Type_create_indexed_block(3, 2, idp, MPI_INT, &i));
    same_layout(c, i, "indexed_block_c");
    MPI_Count c6[] = {3, 2, 0, 4, 9};
    expect_envelope(c, MPI_COMBINER_INDEXED_BLOCK, 0, NULL, 5, c6, 1, ti, "indexed_block_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    CHECK_MPI(MPI_Type_create_hindexed_block_c(3, 2, bdp, MPI_INT, &c));
    CHECK_MPI(MPI_Type_create_hindexed_block(3, 2, abdp, MPI_INT, &i));
    same_layout(c, i, "hindexed_block_c");
    MPI_Count c7[] = {3, 2, 0, 16, 40};
    expect_envelope(c, MPI_COMBINER_HINDEXED_BLOCK, 0, NULL, 5, c7, 1, ti, "hindexed_block_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    MPI_Datatype ts[] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    CHECK_MPI(MPI_Type_create_struct_c(3, bl, bdp, ts, &c));
    CHECK_MPI(MPI_Type_create_struct(3, ibl, abdp, ts, &i));
    same_layout(c, i, "struct_c");
    expect_envelope(c, MPI_COMBINER_STRUCT, 0, NULL, 7, c5, 3, ts, "struct_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    MPI_Count sz[] = {4, 5}, sub[] = {2, 3}, st[] = {1, 1};
    int isz[] = {4, 5}, isub[] = {2, 3}, ist[] = {1, 1};
    CHECK_MPI(MPI_Type_create_subarray_c(2, sz, sub, st, MPI_ORDER_C, MPI_INT, &c));
    CHECK_MPI(MPI_Type_create_subarray(2, isz, isub, ist, MPI_ORDER_C, MPI_INT, &i));
    same_layout(c, i, "subarray_c");
    int i8[] = {2, MPI_ORDER_C};
    MPI_Count c8[] = {4, 5, 2, 3, 1, 1};
    expect_envelope(c, MPI_COMBINER_SUBARRAY, 2, i8, 6, c8, 1, ti, "subarray_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    MPI_Count gs[] = {8, 6};
    int igs[] = {8, 6}, dist[] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC},
        dargs[] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[] = {2, 1};
    CHECK_MPI(MPI_Type_create_darray_c(2, 1, 2, gs, dist, dargs, ps, MPI_ORDER_C, MPI_INT, &c));
    CHECK_MPI(MPI_Type_create_darray(2, 1, 2, igs, dist, dargs, ps, MPI_ORDER_C, MPI_INT, &i));
    same_layout(c, i, "darray_c");
    int i9[] = {2, 1, 2, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_DFLT_DARG, 2,
                2, 1, MPI_ORDER_C};
    expect_envelope(c, MPI_COMBINER_DARRAY, 10, i9, 2, gs, 1, ti, "darray_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    CHECK_MPI(MPI_Type_create_resized_c(MPI_INT, -4, 16, &c));
    CHECK_MPI(MPI_Type_create_resized(MPI_INT, -4, 16, &i));
    same_layout(c, i, "resized_c");
    MPI_Count c10[] = {-4, 16};
    expect_envelope(c, MPI_COMBINER_RESIZED, 0, NULL, 2, c10, 1, ti, "resized_c");
    CHECK_MPI(MPI_Type_free(&c));
    CHECK_MPI(MPI_Type_free(&i));

    /* More than INT_MAX elements: its size and extent are large counts. */
    MPI_Count big = (MPI_Count)2147483647 + 1000;
    CHECK_MPI(MPI_Type_contiguous_c(big, MPI_BYTE, &c));
    MPI_Count bsz, blb, bext;
    CHECK_MPI(MPI_Type_size_c(c, &bsz));
    CHECK_MPI(MPI_Type_get_extent_c(c, &blb, &bext));
    CHECK(bsz == big && blb == 0 && bext == big, "contiguous_c of 2^31+999 bytes: size %lld extent %lld",
          (long long)bsz, (long long)bext);
    MPI_Count cbig[] = {big};
    MPI_Datatype tb[] = {MPI_BYTE};
    expect_envelope(c, MPI_COMBINER_CONTIGUOUS, 0, NULL, 1, cbig, 1, tb, "contiguous_c 2^31+999");
    CHECK_MPI(MPI_Type_free(&c));

    /* A derived type built by a `_c` constructor decodes to a new handle. */
    MPI_Datatype inner, outer;
    CHECK_MPI(MPI_Type_contiguous(2, MPI_INT, &inner));
    CHECK_MPI(MPI_Type_contiguous_c(3, inner, &outer));
    MPI_Count a, b2, n2, d;
    int comb, gi[1];
    MPI_Aint ga[1];
    MPI_Count gc[1];
    MPI_Datatype gt[1];
    CHECK_MPI(MPI_Type_get_envelope_c(outer, &a, &b2, &n2, &d, &comb));
    CHECK_MPI(MPI_Type_get_contents_c(outer, a, b2, n2, d, gi, ga, gc, gt));
    int s1, s2;
    CHECK_MPI(MPI_Type_size(gt[0], &s1));
    CHECK_MPI(MPI_Type_size(inner, &s2));
    CHECK(gc[0] == 3 && s1 == s2, "contiguous_c of a derived type: count %lld, size %d/%d",
          (long long)gc[0], s1, s2);
    CHECK_MPI(MPI_Type_free(&gt[0]));
    CHECK_MPI(MPI_Type_free(&outer));
    CHECK_MPI(MPI_Type_free(&inner));

    /* Counts that are negative fail with MPI_ERR_COUNT. */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    expect_count_error(MPI_Type_contiguous_c(-1, MPI_INT, &c), "Type_contiguous_c count -1");
    MPI_Count nbl[] = {1, -2, 3};
    expect_count_error(MPI_Type_indexed_c(3, nbl, dp, MPI_INT, &c),
                       "Type_indexed_c blocklengths[1] -2");
    expect_count_error(MPI_Type_vector_c(-((MPI_Count)1 << 40), 1, 1, MPI_INT, &c),
                       "Type_vector_c count -2^40");
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Datatype t = make_type();
    test_queries(t);
    test_pack(t);
    test_decode(t);
    test_errors(t);
    test_constructors();
    CHECK_MPI(MPI_Type_free(&t));
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
