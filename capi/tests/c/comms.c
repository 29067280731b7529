/* Communicators, groups, attributes and cartesian topologies: plain MPI only. */
#define TEST_NAME "comms"
#include "check.h"
#include <string.h>

static int rank, size;

static void test_dup_split(void)
{
    MPI_Comm dup, par, rev, undef, stype;
    int res, r, s;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &res));
    CHECK(res == MPI_IDENT, "compare(world, world) = %d", res);
    CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, dup, &res));
    CHECK(res == MPI_CONGRUENT, "compare(world, dup) = %d", res);
    /* traffic on the dup does not match traffic on world */
    int a = rank, b = -1, c = -1;
    int nx = (rank + 1) % size, pv = (rank + size - 1) % size;
    MPI_Request rq[2];
    CHECK_MPI(MPI_Irecv(&b, 1, MPI_INT, pv, 0, dup, &rq[0]));
    CHECK_MPI(MPI_Irecv(&c, 1, MPI_INT, pv, 0, MPI_COMM_WORLD, &rq[1]));
    int a2 = rank + 1000;
    CHECK_MPI(MPI_Send(&a2, 1, MPI_INT, nx, 0, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Send(&a, 1, MPI_INT, nx, 0, dup));
    CHECK_MPI(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    CHECK(b == pv && c == pv + 1000, "context separation: dup got %d, world got %d", b, c);

    /* split by parity, key reversing the order */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &par));
    CHECK_MPI(MPI_Comm_size(par, &s));
    CHECK_MPI(MPI_Comm_rank(par, &r));
    int esize = (size + 1 - rank % 2) / 2, erank = 0;
    for (int p = rank + 2; p < size; p += 2) erank++;
    CHECK(s == esize && r == erank, "parity split: size %d rank %d, expected %d %d", s, r, esize, erank);
    int sum = 0;
    CHECK_MPI(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, par));
    int esum = 0;
    for (int p = rank % 2; p < size; p += 2) esum += p;
    CHECK(sum == esum, "Allreduce on split comm %d expected %d", sum, esum);
    CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, par, &res));
    if (size >= 2) CHECK(res == MPI_UNEQUAL, "compare(world, parity split) = %d", res);

    /* one color, reversed keys: same group, different order */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
    CHECK_MPI(MPI_Comm_rank(rev, &r));
    CHECK(r == size - 1 - rank, "reversed split rank %d", r);
    CHECK_MPI(MPI_Comm_compare(MPI_COMM_WORLD, rev, &res));
    CHECK(res == (size >= 2 ? MPI_SIMILAR : MPI_CONGRUENT), "compare(world, reversed) = %d", res);

    /* MPI_UNDEFINED color gives MPI_COMM_NULL */
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 3, rank, &undef));
    if (rank == 0) {
        CHECK(undef == MPI_COMM_NULL, "UNDEFINED color did not give MPI_COMM_NULL");
    } else {
        CHECK_MPI(MPI_Comm_rank(undef, &r));
        CHECK_MPI(MPI_Comm_size(undef, &s));
        CHECK(r == rank - 1 && s == size - 1, "split without rank 0: rank %d size %d", r, s);
        CHECK_MPI(MPI_Comm_free(&undef));
    }

    /* split_type SHARED: contains at least the caller, consistent across members */
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &stype));
    CHECK(stype != MPI_COMM_NULL, "split_type SHARED gave MPI_COMM_NULL");
    CHECK_MPI(MPI_Comm_size(stype, &s));
    CHECK_MPI(MPI_Comm_rank(stype, &r));
    CHECK(s >= 1 && s <= size && r >= 0 && r < s, "split_type size %d rank %d", s, r);
    int ssum = 0, one = 1;
    CHECK_MPI(MPI_Allreduce(&one, &ssum, 1, MPI_INT, MPI_SUM, stype));
    CHECK(ssum == s, "split_type Allreduce %d, size %d", ssum, s);
    MPI_Comm none;
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, 0, MPI_INFO_NULL, &none));
    CHECK(none == MPI_COMM_NULL, "split_type UNDEFINED did not give MPI_COMM_NULL");

    int inter = 1;
    CHECK_MPI(MPI_Comm_test_inter(MPI_COMM_WORLD, &inter));
    CHECK(!inter, "Comm_test_inter(world) = %d", inter);
    CHECK_MPI(MPI_Comm_test_inter(par, &inter));
    CHECK(!inter, "Comm_test_inter(split) = %d", inter);

    CHECK_MPI(MPI_Comm_compare(MPI_COMM_SELF, MPI_COMM_WORLD, &res));
    CHECK(res == (size == 1 ? MPI_CONGRUENT : MPI_UNEQUAL), "compare(self, world) = %d", res);

    CHECK_MPI(MPI_Comm_free(&dup));
    CHECK_MPI(MPI_Comm_free(&par));
    CHECK_MPI(MPI_Comm_free(&rev));
    CHECK_MPI(MPI_Comm_free(&stype));
    CHECK(dup == MPI_COMM_NULL && par == MPI_COMM_NULL, "Comm_free did not null");
}

static void test_groups(void)
{
    MPI_Group wg, ev, od, un, in, df, g;
    int res, n, r;
    CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    CHECK_MPI(MPI_Group_size(wg, &n));
    CHECK_MPI(MPI_Group_rank(wg, &r));
    CHECK(n == size && r == rank, "world group size %d rank %d", n, r);

    int ne = (size + 1) / 2, no = size / 2;
    int *evr = malloc(sizeof(int) * (size_t)(ne + 1)), *odr = malloc(sizeof(int) * (size_t)(no + 1));
    for (int k = 0; k < ne; k++) evr[k] = 2 * k;
    for (int k = 0; k < no; k++) odr[k] = 2 * k + 1;
    CHECK_MPI(MPI_Group_incl(wg, ne, evr, &ev));
    CHECK_MPI(MPI_Group_excl(wg, ne, evr, &od));
    CHECK_MPI(MPI_Group_size(ev, &n));
    CHECK(n == ne, "evens size %d", n);
    CHECK_MPI(MPI_Group_size(od, &n));
    CHECK(n == no, "odds size %d", n);
    CHECK_MPI(MPI_Group_rank(ev, &r));
    CHECK(r == (rank % 2 == 0 ? rank / 2 : MPI_UNDEFINED), "evens rank %d", r);
    CHECK_MPI(MPI_Group_rank(od, &r));
    CHECK(r == (rank % 2 == 1 ? rank / 2 : MPI_UNDEFINED), "odds rank %d", r);

    /* union(evens, odds): evens first, so SIMILAR to world when size >= 3 */
    CHECK_MPI(MPI_Group_union(ev, od, &un));
    CHECK_MPI(MPI_Group_compare(un, wg, &res));
    CHECK(res == (size >= 3 ? MPI_SIMILAR : MPI_IDENT), "compare(union, world) = %d", res);
    CHECK_MPI(MPI_Group_rank(un, &r));
    CHECK(r == (rank % 2 == 0 ? rank / 2 : ne + rank / 2), "union rank %d", r);
    CHECK_MPI(MPI_Group_intersection(wg, ev, &in));
    CHECK_MPI(MPI_Group_compare(in, ev, &res));
    CHECK(res == MPI_IDENT, "compare(world ∩ evens, evens) = %d", res);
    CHECK_MPI(MPI_Group_difference(wg, ev, &df));
    CHECK_MPI(MPI_Group_compare(df, od, &res));
    CHECK(res == MPI_IDENT, "compare(world - evens, odds) = %d", res);
    if (size >= 2) {
        CHECK_MPI(MPI_Group_compare(ev, od, &res));
        CHECK(res == MPI_UNEQUAL, "compare(evens, odds) = %d", res);
    }

    /* translate ranks */
    int *all = malloc(sizeof(int) * (size_t)(size + 1)), *tr = malloc(sizeof(int) * (size_t)(size + 1));
    for (int k = 0; k < size; k++) all[k] = k;
    all[size] = MPI_PROC_NULL;
    CHECK_MPI(MPI_Group_translate_ranks(wg, size + 1, all, ev, tr));
    for (int k = 0; k < size; k++)
        CHECK(tr[k] == (k % 2 == 0 ? k / 2 : MPI_UNDEFINED), "translate world %d -> evens %d", k, tr[k]);
    CHECK(tr[size] == MPI_PROC_NULL, "translate PROC_NULL -> %d", tr[size]);
    CHECK_MPI(MPI_Group_translate_ranks(un, size, all, wg, tr));
    for (int k = 0; k < size; k++)
        CHECK(tr[k] == (k < ne ? 2 * k : 2 * (k - ne) + 1), "translate union %d -> world %d", k, tr[k]);

    /* empty groups */
    CHECK_MPI(MPI_Group_size(MPI_GROUP_EMPTY, &n));
    CHECK(n == 0, "GROUP_EMPTY size %d", n);
    CHECK_MPI(MPI_Group_rank(MPI_GROUP_EMPTY, &r));
    CHECK(r == MPI_UNDEFINED, "GROUP_EMPTY rank %d", r);
    CHECK_MPI(MPI_Group_difference(wg, wg, &g));
    CHECK_MPI(MPI_Group_size(g, &n));
    CHECK(n == 0, "world - world size %d", n);
    CHECK_MPI(MPI_Group_compare(g, MPI_GROUP_EMPTY, &res));
    CHECK(res == MPI_IDENT, "compare(empty, GROUP_EMPTY) = %d", res);
    if (g != MPI_GROUP_EMPTY) CHECK_MPI(MPI_Group_free(&g));
    CHECK_MPI(MPI_Group_incl(wg, 0, evr, &g));
    CHECK_MPI(MPI_Group_size(g, &n));
    CHECK(n == 0, "incl(0) size %d", n);
    if (g != MPI_GROUP_EMPTY) CHECK_MPI(MPI_Group_free(&g));

    /* Comm_create from the groups */
    MPI_Comm ce, cx;
    CHECK_MPI(MPI_Comm_create(MPI_COMM_WORLD, ev, &ce));
    if (rank % 2 == 0) {
        CHECK(ce != MPI_COMM_NULL, "Comm_create(evens) gave COMM_NULL on a member");
        CHECK_MPI(MPI_Comm_rank(ce, &r));
        CHECK_MPI(MPI_Comm_size(ce, &n));
        CHECK(r == rank / 2 && n == ne, "evens comm rank %d size %d", r, n);
        int sum = 0;
        CHECK_MPI(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, ce));
        CHECK(sum == ne * (ne - 1), "evens Allreduce %d", sum);
        MPI_Group cg;
        CHECK_MPI(MPI_Comm_group(ce, &cg));
        CHECK_MPI(MPI_Group_compare(cg, ev, &res));
        CHECK(res == MPI_IDENT, "group of evens comm = %d", res);
        CHECK_MPI(MPI_Group_free(&cg));
        CHECK_MPI(MPI_Comm_free(&ce));
    } else {
        CHECK(ce == MPI_COMM_NULL, "Comm_create(evens) gave a comm to a non-member");
    }
    MPI_Group ex0;
    int zero = 0;
    CHECK_MPI(MPI_Group_excl(wg, 1, &zero, &ex0));
    CHECK_MPI(MPI_Comm_create(MPI_COMM_WORLD, ex0, &cx));
    if (rank == 0) {
        CHECK(cx == MPI_COMM_NULL, "Comm_create(excl 0) gave a comm to rank 0");
    } else {
        CHECK_MPI(MPI_Comm_rank(cx, &r));
        CHECK(r == rank - 1, "excl-0 comm rank %d", r);
        CHECK_MPI(MPI_Comm_free(&cx));
    }

    MPI_Group *gs[] = {&wg, &ev, &od, &un, &in, &df, &ex0};
    for (size_t k = 0; k < sizeof gs / sizeof gs[0]; k++) {
        CHECK_MPI(MPI_Group_free(gs[k]));
        CHECK(*gs[k] == MPI_GROUP_NULL, "Group_free did not set MPI_GROUP_NULL");
    }
    free(evr); free(odr); free(all); free(tr);
}

static void test_names_attrs(void)
{
    char name[MPI_MAX_OBJECT_NAME];
    int len, flag;
    CHECK_MPI(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14, "world name '%s'", name);
    CHECK_MPI(MPI_Comm_get_name(MPI_COMM_SELF, name, &len));
    CHECK(strcmp(name, "MPI_COMM_SELF") == 0 && len == 13, "self name '%s'", name);
    MPI_Comm d;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    CHECK_MPI(MPI_Comm_set_name(d, "my communicator"));
    CHECK_MPI(MPI_Comm_get_name(d, name, &len));
    CHECK(strcmp(name, "my communicator") == 0 && len == 15, "user comm name '%s'", name);
    CHECK_MPI(MPI_Comm_free(&d));

    int *v;
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag));
    CHECK(flag && *v >= 32767, "MPI_TAG_UB flag %d value %d", flag, flag ? *v : 0);
    /* the largest tag is usable */
    int tub = *v, x = 1, y = 0;
    CHECK_MPI(MPI_Sendrecv(&x, 1, MPI_INT, rank, tub, &y, 1, MPI_INT, rank, tub, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    CHECK(y == 1, "message with tag MPI_TAG_UB");
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &v, &flag));
    CHECK(flag && (*v == MPI_PROC_NULL || (*v >= 0 && *v < size)), "MPI_HOST flag %d value %d",
          flag, flag ? *v : 0);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_IO, &v, &flag));
    CHECK(flag && (*v == MPI_PROC_NULL || *v == MPI_ANY_SOURCE || (*v >= 0 && *v < size)),
          "MPI_IO flag %d value %d", flag, flag ? *v : 0);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &v, &flag));
    CHECK(!flag || *v == 0 || *v == 1, "MPI_WTIME_IS_GLOBAL value %d", *v);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &v, &flag));
    CHECK(!flag || *v >= 0, "MPI_APPNUM value %d", *v);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &v, &flag));
    CHECK(!flag || *v >= 1, "MPI_UNIVERSE_SIZE value %d", *v);
}

/* ---- user keyvals ---- */
static int copies, deletes, extra_seen;
static int val_a = 11, val_b = 22, val_b_copy = 23, val_c = 33, val_d = 44;

static int my_copy(MPI_Comm oldcomm, int keyval, void *extra, void *in, void *out, int *flag)
{
    (void)oldcomm; (void)keyval;
    copies++;
    if (extra == &extra_seen) extra_seen++;
    CHECK(in == &val_b, "copy fn got attribute %p", in);
    *(void **)out = &val_b_copy;
    *flag = 1;
    return MPI_SUCCESS;
}

static int my_delete(MPI_Comm comm, int keyval, void *val, void *extra)
{
    (void)comm; (void)keyval; (void)val;
    deletes++;
    if (extra == &extra_seen) extra_seen++;
    return MPI_SUCCESS;
}

static void test_keyvals(void)
{
    int ka, kb, kc, flag;
    void *v;
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, my_delete, &ka, &extra_seen));
    CHECK_MPI(MPI_Comm_create_keyval(my_copy, my_delete, &kb, &extra_seen));
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, my_delete, &kc, &extra_seen));
    MPI_Comm c1, c2;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c1));
    CHECK_MPI(MPI_Comm_get_attr(c1, ka, &v, &flag));
    CHECK(!flag, "unset attribute reported present");
    CHECK_MPI(MPI_Comm_set_attr(c1, ka, &val_a));
    CHECK_MPI(MPI_Comm_set_attr(c1, kb, &val_b));
    CHECK_MPI(MPI_Comm_set_attr(c1, kc, &val_c));
    CHECK(deletes == 0, "delete fn called on first set");
    CHECK_MPI(MPI_Comm_get_attr(c1, ka, &v, &flag));
    CHECK(flag && v == &val_a, "get_attr ka");
    /* replacing a value calls the delete function on the old one */
    CHECK_MPI(MPI_Comm_set_attr(c1, kc, &val_d));
    CHECK(deletes == 1, "set_attr replace: deletes %d", deletes);
    CHECK_MPI(MPI_Comm_get_attr(c1, kc, &v, &flag));
    CHECK(flag && v == &val_d, "get_attr kc after replace");

    CHECK_MPI(MPI_Comm_dup(c1, &c2));
    CHECK(copies == 1, "copy fn calls %d", copies);
    CHECK_MPI(MPI_Comm_get_attr(c2, ka, &v, &flag));
    CHECK(flag && v == &val_a, "MPI_COMM_DUP_FN did not copy the value");
    CHECK_MPI(MPI_Comm_get_attr(c2, kb, &v, &flag));
    CHECK(flag && v == &val_b_copy, "custom copy fn value not installed");
    CHECK_MPI(MPI_Comm_get_attr(c2, kc, &v, &flag));
    CHECK(!flag, "MPI_COMM_NULL_COPY_FN attribute was copied");
    CHECK_MPI(MPI_Comm_get_attr(c1, kb, &v, &flag));
    CHECK(flag && v == &val_b, "original value changed by dup");

    CHECK_MPI(MPI_Comm_delete_attr(c1, ka));
    CHECK(deletes == 2, "delete_attr: deletes %d", deletes);
    CHECK_MPI(MPI_Comm_get_attr(c1, ka, &v, &flag));
    CHECK(!flag, "deleted attribute still present");
    /* c2 has ka and kb: freeing it deletes both */
    CHECK_MPI(MPI_Comm_free(&c2));
    CHECK(deletes == 4, "Comm_free(c2): deletes %d", deletes);
    /* keyval freed while still attached: the attribute stays usable */
    CHECK_MPI(MPI_Comm_free_keyval(&kb));
    CHECK(kb == MPI_KEYVAL_INVALID, "Comm_free_keyval did not set MPI_KEYVAL_INVALID");
    CHECK_MPI(MPI_Comm_free(&c1)); /* kb, kc */
    CHECK(deletes == 6, "Comm_free(c1): deletes %d", deletes);
    CHECK(extra_seen == copies + deletes, "extra_state not passed through (%d vs %d)", extra_seen,
          copies + deletes);
    CHECK_MPI(MPI_Comm_free_keyval(&ka));
    CHECK_MPI(MPI_Comm_free_keyval(&kc));
    CHECK(ka == MPI_KEYVAL_INVALID && kc == MPI_KEYVAL_INVALID, "free_keyval");
}

static void test_dims(void)
{
    struct { int n, nd, in[3], out[3]; } cs[] = {
        {6, 2, {0, 0}, {3, 2}},        {12, 3, {0, 0, 0}, {3, 2, 2}}, {12, 2, {0, 3}, {4, 3}},
        {7, 2, {0, 0}, {7, 1}},        {16, 3, {2, 0, 0}, {2, 4, 2}}, {1, 3, {0, 0, 0}, {1, 1, 1}},
        {24, 3, {0, 0, 0}, {4, 3, 2}}, {8, 3, {0, 0, 0}, {2, 2, 2}},  {9, 2, {0, 0}, {3, 3}},
        {10, 2, {5, 2}, {5, 2}},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int d[3] = {cs[k].in[0], cs[k].in[1], cs[k].in[2]};
        CHECK_MPI(MPI_Dims_create(cs[k].n, cs[k].nd, d));
        for (int i = 0; i < cs[k].nd; i++)
            CHECK(d[i] == cs[k].out[i], "Dims_create(%d, %d) case %zu: dim %d = %d expected %d",
                  cs[k].n, cs[k].nd, k, i, d[i], cs[k].out[i]);
    }
}

static void test_cart(void)
{
    int dims[2] = {0, 0}, periods[2] = {1, 0};
    CHECK_MPI(MPI_Dims_create(size, 2, dims));
    CHECK(dims[0] * dims[1] == size && dims[0] >= dims[1], "Dims_create(size) %d x %d", dims[0], dims[1]);
    MPI_Comm cart;
    CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    int st, nd, r;
    CHECK_MPI(MPI_Topo_test(cart, &st));
    CHECK(st == MPI_CART, "Topo_test(cart) = %d", st);
    CHECK_MPI(MPI_Topo_test(MPI_COMM_WORLD, &st));
    CHECK(st == MPI_UNDEFINED, "Topo_test(world) = %d", st);
    CHECK_MPI(MPI_Cartdim_get(cart, &nd));
    CHECK(nd == 2, "Cartdim_get %d", nd);
    CHECK_MPI(MPI_Comm_rank(cart, &r));
    CHECK(r == rank, "cart rank %d without reorder", r);
    int coords[2], gd[2], gp[2], gc[2];
    CHECK_MPI(MPI_Cart_coords(cart, rank, 2, coords));
    CHECK(coords[0] == rank / dims[1] && coords[1] == rank % dims[1], "Cart_coords (%d,%d)",
          coords[0], coords[1]);
    CHECK_MPI(MPI_Cart_get(cart, 2, gd, gp, gc));
    CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0 &&
              gc[0] == coords[0] && gc[1] == coords[1],
          "Cart_get");
    for (int p = 0; p < size; p++) {
        int c[2], rr;
        CHECK_MPI(MPI_Cart_coords(cart, p, 2, c));
        CHECK_MPI(MPI_Cart_rank(cart, c, &rr));
        CHECK(rr == p, "Cart_rank(Cart_coords(%d)) = %d", p, rr);
    }
    /* periodic dimension wraps out-of-range coordinates */
    int wc[2] = {coords[0] + dims[0], coords[1]}, wr;
    CHECK_MPI(MPI_Cart_rank(cart, wc, &wr));
    CHECK(wr == rank, "Cart_rank with wrapped periodic coordinate = %d", wr);
    wc[0] = coords[0] - dims[0];
    CHECK_MPI(MPI_Cart_rank(cart, wc, &wr));
    CHECK(wr == rank, "Cart_rank with negative periodic coordinate = %d", wr);

    int up, down, left, right;
    CHECK_MPI(MPI_Cart_shift(cart, 0, 1, &up, &down));
    CHECK(up == ((coords[0] - 1 + dims[0]) % dims[0]) * dims[1] + coords[1] &&
              down == ((coords[0] + 1) % dims[0]) * dims[1] + coords[1],
          "Cart_shift periodic: src %d dst %d", up, down);
    CHECK_MPI(MPI_Cart_shift(cart, 1, 1, &left, &right));
    CHECK(left == (coords[1] == 0 ? MPI_PROC_NULL : rank - 1) &&
              right == (coords[1] == dims[1] - 1 ? MPI_PROC_NULL : rank + 1),
          "Cart_shift non-periodic: src %d dst %d", left, right);

    /* halo exchange: 4x4 interior with a one-cell halo, values encode the owner */
    enum { L = 4 };
    int g[L + 2][L + 2];
    for (int i = 0; i < L + 2; i++)
        for (int j = 0; j < L + 2; j++)
            g[i][j] = (i >= 1 && i <= L && j >= 1 && j <= L) ? rank * 100 + i * 10 + j : -1;
    MPI_Datatype col;
    CHECK_MPI(MPI_Type_vector(L, 1, L + 2, MPI_INT, &col));
    CHECK_MPI(MPI_Type_commit(&col));
    /* dim 0 (rows): send my last row down, receive top halo from up; and reverse */
    CHECK_MPI(MPI_Sendrecv(&g[L][1], L, MPI_INT, down, 1, &g[0][1], L, MPI_INT, up, 1, cart,
                           MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Sendrecv(&g[1][1], L, MPI_INT, up, 2, &g[L + 1][1], L, MPI_INT, down, 2, cart,
                           MPI_STATUS_IGNORE));
    /* dim 1 (columns), non-periodic */
    CHECK_MPI(MPI_Sendrecv(&g[1][L], 1, col, right, 3, &g[1][0], 1, col, left, 3, cart,
                           MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Sendrecv(&g[1][1], 1, col, left, 4, &g[1][L + 1], 1, col, right, 4, cart,
                           MPI_STATUS_IGNORE));
    for (int j = 1; j <= L; j++) {
        CHECK(g[0][j] == up * 100 + L * 10 + j, "halo top [%d]=%d", j, g[0][j]);
        CHECK(g[L + 1][j] == down * 100 + 10 + j, "halo bottom [%d]=%d", j, g[L + 1][j]);
    }
    for (int i = 1; i <= L; i++) {
        CHECK(g[i][0] == (left == MPI_PROC_NULL ? -1 : left * 100 + i * 10 + L), "halo left [%d]=%d",
              i, g[i][0]);
        CHECK(g[i][L + 1] == (right == MPI_PROC_NULL ? -1 : right * 100 + i * 10 + 1),
              "halo right [%d]=%d", i, g[i][L + 1]);
    }
    CHECK(g[0][0] == -1 && g[L + 1][L + 1] == -1, "halo corners touched");
    CHECK_MPI(MPI_Type_free(&col));

    /* Cart_sub keeping dimension 1: a row communicator */
    MPI_Comm row;
    int keep[2] = {0, 1};
    CHECK_MPI(MPI_Cart_sub(cart, keep, &row));
    int rs, rr;
    CHECK_MPI(MPI_Comm_size(row, &rs));
    CHECK_MPI(MPI_Comm_rank(row, &rr));
    CHECK(rs == dims[1] && rr == coords[1], "Cart_sub row: size %d rank %d", rs, rr);
    CHECK_MPI(MPI_Cartdim_get(row, &nd));
    CHECK(nd == 1, "Cart_sub cartdim %d", nd);
    CHECK_MPI(MPI_Topo_test(row, &st));
    CHECK(st == MPI_CART, "Topo_test(Cart_sub) = %d", st);
    int sd[1], sp[1], sc[1];
    CHECK_MPI(MPI_Cart_get(row, 1, sd, sp, sc));
    CHECK(sd[0] == dims[1] && sp[0] == 0 && sc[0] == coords[1], "Cart_get on sub");
    int rsum = 0;
    CHECK_MPI(MPI_Allreduce(&rank, &rsum, 1, MPI_INT, MPI_SUM, row));
    int esum = 0;
    for (int j = 0; j < dims[1]; j++) esum += coords[0] * dims[1] + j;
    CHECK(rsum == esum, "row Allreduce %d expected %d", rsum, esum);
    CHECK_MPI(MPI_Comm_free(&row));

    /* a grid smaller than the communicator: extra processes get MPI_COMM_NULL */
    MPI_Comm one;
    int d1[1] = {1}, p1[1] = {0};
    CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 1, d1, p1, 0, &one));
    if (rank == 0) {
        CHECK(one != MPI_COMM_NULL, "1-process cart missing on rank 0");
        CHECK_MPI(MPI_Comm_free(&one));
    } else {
        CHECK(one == MPI_COMM_NULL, "1-process cart given to rank %d", rank);
    }
    /* reorder allowed: still a valid cartesian communicator of the same size */
    MPI_Comm ro;
    CHECK_MPI(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &ro));
    CHECK_MPI(MPI_Comm_size(ro, &rs));
    CHECK(rs == size, "reordered cart size %d", rs);
    CHECK_MPI(MPI_Comm_rank(ro, &rr));
    CHECK_MPI(MPI_Cart_coords(ro, rr, 2, coords));
    int back;
    CHECK_MPI(MPI_Cart_rank(ro, coords, &back));
    CHECK(back == rr, "reordered cart rank/coords");
    CHECK_MPI(MPI_Comm_free(&ro));
    CHECK_MPI(MPI_Comm_free(&cart));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    test_dup_split();
    test_groups();
    test_names_attrs();
    test_keyvals();
    test_dims();
    test_cart();

    REPORT_OK();
    MPI_Finalize();
    return 0;
}
