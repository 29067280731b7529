/* Attributes beyond comms.c: callbacks that fail or call MPI, flag = 0
 * copies, freed keyvals, wrong keyval kinds, predefined keyvals, the
 * deprecated MPI-1 calls, datatype keyvals on predefined types, and the
 * reverse-order deletion of MPI_COMM_SELF's attributes at MPI_Finalize.
 * Any np >= 1. */
#define TEST_NAME "comm_attrs"
#include "check.h"
#include <string.h>

static int rank, size;

#define EXPECT_ERR(call, cls)                                                            \
    do {                                                                                 \
        int rc_ = (call), c_ = -1;                                                       \
        if (rc_ != MPI_SUCCESS) MPI_Error_class(rc_, &c_);                               \
        CHECK(c_ == (cls), "%s returned %d (class %d), expected class %d", #call, rc_, c_, \
              (cls));                                                                    \
    } while (0)

static int fail_delete, deletes, copies;

static int del_maybe_fail(MPI_Comm comm, int keyval, void *val, void *extra)
{
    (void)comm; (void)keyval; (void)val; (void)extra;
    if (fail_delete) return MPI_ERR_OTHER;
    deletes++;
    return MPI_SUCCESS;
}

static int copy_fail(MPI_Comm c, int k, void *x, void *in, void *out, int *flag)
{
    (void)c; (void)k; (void)x; (void)in; (void)out; (void)flag;
    copies++;
    return MPI_ERR_OTHER;
}

static int copy_no(MPI_Comm c, int k, void *x, void *in, void *out, int *flag)
{
    (void)c; (void)k; (void)x; (void)in; (void)out;
    copies++;
    *flag = 0;
    return MPI_SUCCESS;
}

/* A delete callback that uses MPI on the communicator being freed. */
static int del_reentrant(MPI_Comm comm, int keyval, void *val, void *extra)
{
    (void)val; (void)extra;
    int r, flag;
    void *v;
    if (MPI_Comm_rank(comm, &r) != MPI_SUCCESS) return MPI_ERR_OTHER;
    if (MPI_Comm_get_attr(comm, keyval, &v, &flag) != MPI_SUCCESS || !flag) return MPI_ERR_OTHER;
    deletes++;
    return MPI_SUCCESS;
}

/* MPI_COMM_SELF attributes at MPI_Finalize: record the order. */
static int self_order[8], self_n;
static int del_self(MPI_Comm comm, int keyval, void *val, void *extra)
{
    (void)comm; (void)keyval; (void)extra;
    if (self_n < 8) self_order[self_n++] = *(int *)val;
    return MPI_SUCCESS;
}
static int sv[3] = {1, 2, 3};

static int tdeletes, tcopies;
static int tcopy(MPI_Datatype t, int k, void *x, void *in, void *out, int *flag)
{
    (void)t; (void)k; (void)x;
    tcopies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}
static int tdel(MPI_Datatype t, int k, void *v, void *x)
{
    (void)t; (void)k; (void)v; (void)x;
    tdeletes++;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    int k, kf, kn, kr, flag, x = 5;
    void *v;
    MPI_Comm c, d;

    /* invalid keyvals */
    EXPECT_ERR(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_KEYVAL_INVALID, &x), MPI_ERR_KEYVAL);
    EXPECT_ERR(MPI_Comm_get_attr(MPI_COMM_WORLD, 0x12345, &v, &flag), MPI_ERR_KEYVAL);
    EXPECT_ERR(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, &x), MPI_ERR_KEYVAL);
    EXPECT_ERR(MPI_Comm_delete_attr(MPI_COMM_WORLD, MPI_TAG_UB), MPI_ERR_KEYVAL);
    EXPECT_ERR(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, NULL, NULL),
               MPI_ERR_ARG);
    int tk;
    CHECK_MPI(MPI_Type_create_keyval(tcopy, tdel, &tk, NULL));
    EXPECT_ERR(MPI_Comm_set_attr(MPI_COMM_WORLD, tk, &x), MPI_ERR_KEYVAL);
    EXPECT_ERR(MPI_Comm_set_attr(MPI_COMM_NULL, tk, &x), MPI_ERR_COMM);
    EXPECT_ERR(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, NULL, &flag), MPI_ERR_ARG);

    /* datatype attributes on predefined datatypes */
    EXPECT_ERR(MPI_Type_set_attr(MPI_INT, tk, &x), MPI_ERR_TYPE);
    flag = 1;
    CHECK_MPI(MPI_Type_get_attr(MPI_INT, tk, &v, &flag));
    CHECK(!flag, "attribute on MPI_INT");
    CHECK_MPI(MPI_Type_delete_attr(MPI_INT, tk));
    EXPECT_ERR(MPI_Type_get_attr(MPI_DATATYPE_NULL, tk, &v, &flag), MPI_ERR_TYPE);
    int ck;
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &ck, NULL));
    EXPECT_ERR(MPI_Type_get_attr(MPI_INT, ck, &v, &flag), MPI_ERR_KEYVAL);
    CHECK_MPI(MPI_Comm_free_keyval(&ck));
    EXPECT_ERR(MPI_Type_free_keyval(&ck), MPI_ERR_KEYVAL);
    CHECK_MPI(MPI_Type_free_keyval(&tk));
    CHECK(tk == MPI_KEYVAL_INVALID, "Type_free_keyval");

    /* predefined attributes, on any communicator */
    int *iv;
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_SELF, MPI_TAG_UB, &iv, &flag));
    CHECK(flag && *iv >= 32767, "TAG_UB on self");
    int cls;
    CHECK_MPI(MPI_Add_error_class(&cls));
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &iv, &flag));
    CHECK(flag && *iv >= cls, "MPI_LASTUSEDCODE %d < new class %d", flag ? *iv : -1, cls);
    CHECK_MPI(MPI_Attr_get(MPI_COMM_WORLD, MPI_TAG_UB, &iv, &flag));
    CHECK(flag && *iv >= 32767, "Attr_get TAG_UB");

    /* a failing delete callback: Comm_free and delete_attr fail, the attribute stays */
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, del_maybe_fail, &k, NULL));
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    CHECK_MPI(MPI_Comm_set_attr(c, k, &x));
    fail_delete = 1;
    EXPECT_ERR(MPI_Comm_delete_attr(c, k), MPI_ERR_OTHER);
    EXPECT_ERR(MPI_Comm_set_attr(c, k, &size), MPI_ERR_OTHER);
    CHECK_MPI(MPI_Comm_get_attr(c, k, &v, &flag));
    CHECK(flag && v == &x, "attribute changed by a failed delete");
    MPI_Comm keep = c;
    EXPECT_ERR(MPI_Comm_free(&c), MPI_ERR_OTHER);
    CHECK(c == keep, "failed Comm_free changed the handle");
    fail_delete = 0;
    /* MPI_Attr_* (deprecated) see the same attribute */
    CHECK_MPI(MPI_Attr_get(c, k, &v, &flag));
    CHECK(flag && v == &x, "Attr_get");
    CHECK_MPI(MPI_Attr_delete(c, k));
    CHECK(deletes == 1, "Attr_delete: deletes %d", deletes);
    CHECK_MPI(MPI_Attr_put(c, k, &x));
    CHECK_MPI(MPI_Comm_delete_attr(c, k)); /* deletes = 2 */
    CHECK_MPI(MPI_Comm_delete_attr(c, k)); /* absent: nothing to do */
    CHECK(deletes == 2, "deletes %d", deletes);

    /* a failing copy callback fails the dup; flag = 0 skips the attribute */
    CHECK_MPI(MPI_Comm_create_keyval(copy_fail, del_maybe_fail, &kf, NULL));
    CHECK_MPI(MPI_Comm_create_keyval(copy_no, del_maybe_fail, &kn, NULL));
    CHECK_MPI(MPI_Comm_set_attr(c, k, &x));
    CHECK_MPI(MPI_Comm_set_attr(c, kn, &x));
    CHECK_MPI(MPI_Comm_dup(c, &d));
    CHECK(copies == 1, "copy_no calls %d", copies);
    CHECK_MPI(MPI_Comm_get_attr(d, kn, &v, &flag));
    CHECK(!flag, "flag=0 copy installed a value");
    CHECK_MPI(MPI_Comm_get_attr(d, k, &v, &flag));
    CHECK(flag && v == &x, "MPI_COMM_DUP_FN copy");
    CHECK_MPI(MPI_Comm_set_attr(c, kf, &x));
    deletes = 0;
    MPI_Comm e = MPI_COMM_NULL;
    EXPECT_ERR(MPI_Comm_dup(c, &e), MPI_ERR_OTHER);
    CHECK(e == MPI_COMM_NULL, "failed dup wrote newcomm");
    /* the partial copy (k, copied before kf in set order) was deleted again */
    CHECK(deletes == 1, "failed dup cleanup deletes %d", deletes);

    /* freed keyval: attached attributes keep working, new sets fail */
    int kcopy = k;
    CHECK_MPI(MPI_Comm_free_keyval(&k));
    CHECK(k == MPI_KEYVAL_INVALID, "free_keyval");
    CHECK_MPI(MPI_Comm_get_attr(c, kcopy, &v, &flag));
    CHECK(flag && v == &x, "attribute of a freed keyval");
    EXPECT_ERR(MPI_Comm_set_attr(MPI_COMM_WORLD, kcopy, &x), MPI_ERR_KEYVAL);
    EXPECT_ERR(MPI_Comm_free_keyval(&kcopy), MPI_ERR_KEYVAL);

    /* a delete callback that calls MPI on the same communicator */
    CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, del_reentrant, &kr, NULL));
    CHECK_MPI(MPI_Comm_set_attr(d, kr, &x));
    deletes = 0;
    CHECK_MPI(MPI_Comm_free(&d)); /* k (dup'd) and kr */
    CHECK(deletes == 2, "free(d) deletes %d", deletes);
    deletes = 0;
    CHECK_MPI(MPI_Comm_free(&c)); /* k, kn, kf */
    CHECK(deletes == 3, "free(c) deletes %d", deletes);
    /* k is gone now that nothing holds it */
    EXPECT_ERR(MPI_Comm_get_attr(MPI_COMM_WORLD, kcopy, &v, &flag), MPI_ERR_KEYVAL);
    CHECK_MPI(MPI_Comm_free_keyval(&kf));
    CHECK_MPI(MPI_Comm_free_keyval(&kn));
    CHECK_MPI(MPI_Comm_free_keyval(&kr));

    /* deprecated keyval calls */
    int old;
    CHECK_MPI(MPI_Keyval_create(MPI_DUP_FN, MPI_NULL_DELETE_FN, &old, NULL));
    CHECK_MPI(MPI_Attr_put(MPI_COMM_WORLD, old, &x));
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    CHECK_MPI(MPI_Attr_get(c, old, &v, &flag));
    CHECK(flag && v == &x, "MPI_DUP_FN via Keyval_create");
    CHECK_MPI(MPI_Comm_free(&c));
    CHECK_MPI(MPI_Attr_delete(MPI_COMM_WORLD, old));
    CHECK_MPI(MPI_Keyval_free(&old));
    CHECK(old == MPI_KEYVAL_INVALID, "Keyval_free");

    /* MPIR_Dup_fn directly */
    void *out = NULL;
    flag = 0;
    CHECK(MPIR_Dup_fn(MPI_COMM_WORLD, 0, NULL, &x, &out, &flag) == MPI_SUCCESS && out == &x &&
              flag == 1,
          "MPIR_Dup_fn");

    /* attributes on MPI_COMM_SELF are deleted in reverse set order at finalize */
    int ks[3];
    for (int i = 0; i < 3; i++) CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, del_self, &ks[i], NULL));
    CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, ks[2], &sv[0]));
    CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, ks[0], &sv[1]));
    CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, ks[1], &sv[2]));
    for (int i = 0; i < 3; i++) CHECK_MPI(MPI_Comm_free_keyval(&ks[i]));

    int r0 = rank;
    MPI_Finalize();
    if (self_n != 3 || self_order[0] != 3 || self_order[1] != 2 || self_order[2] != 1) {
        fprintf(stderr, "FAIL comm_attrs rank %d: COMM_SELF delete order %d: %d %d %d\n", r0, self_n,
                self_order[0], self_order[1], self_order[2]);
        return 1;
    }
    if (r0 == 0) printf("OK %s np=%d\n", TEST_NAME, size);
    return 0;
}
