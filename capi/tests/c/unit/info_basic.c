/* Info objects: create/set/get/delete/dup/free, nthkey order, valuelen and
 * buflen semantics, error classes, MPI_Info_create_env and MPI_INFO_ENV. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails = 0;
#define CHECK(c)                                                             \
    do {                                                                     \
        if (!(c)) {                                                          \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);              \
            fails++;                                                         \
        }                                                                    \
    } while (0)

static int cls(int rc) {
    int c;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv) {
    MPI_Info info, dup, env;
    char val[MPI_MAX_INFO_VAL + 1], key[MPI_MAX_INFO_KEY + 1];
    int flag, len, nkeys, rank, size, rc;

    /* Info calls work before MPI_Init (MPI-4). */
    CHECK(MPI_Info_create(&info) == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "pre", "init") == MPI_SUCCESS);

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    CHECK(MPI_Info_set(info, "alpha", "one") == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "beta", "two") == MPI_SUCCESS);
    CHECK(MPI_Info_set(info, "alpha", "uno") == MPI_SUCCESS); /* replaces */
    MPI_Info_get_nkeys(info, &nkeys);
    CHECK(nkeys == 3);
    MPI_Info_get_nthkey(info, 0, key);
    CHECK(strcmp(key, "pre") == 0);
    MPI_Info_get_nthkey(info, 1, key);
    CHECK(strcmp(key, "alpha") == 0);
    MPI_Info_get_nthkey(info, 2, key);
    CHECK(strcmp(key, "beta") == 0);
    rc = MPI_Info_get_nthkey(info, 3, key);
    CHECK(cls(rc) == MPI_ERR_ARG);
    rc = MPI_Info_get_nthkey(info, -1, key);
    CHECK(cls(rc) == MPI_ERR_ARG);

    flag = -1;
    CHECK(MPI_Info_get(info, "alpha", MPI_MAX_INFO_VAL, val, &flag) == MPI_SUCCESS);
    CHECK(flag == 1 && strcmp(val, "uno") == 0);
    /* valuelen 2: two characters and a NUL. */
    memset(val, 'x', sizeof val);
    MPI_Info_get(info, "alpha", 2, val, &flag);
    CHECK(flag == 1 && strcmp(val, "un") == 0 && val[3] == 'x');
    MPI_Info_get(info, "gamma", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(flag == 0);

    MPI_Info_get_valuelen(info, "beta", &len, &flag);
    CHECK(flag == 1 && len == 3);
    MPI_Info_get_valuelen(info, "nope", &len, &flag);
    CHECK(flag == 0);

    /* MPI_Info_get_string: buflen in/out. */
    len = 0;
    MPI_Info_get_string(info, "beta", &len, NULL, &flag);
    CHECK(flag == 1 && len == 4);
    len = 3;
    memset(val, 'x', sizeof val);
    MPI_Info_get_string(info, "beta", &len, val, &flag);
    CHECK(flag == 1 && len == 4 && strcmp(val, "tw") == 0);
    len = sizeof val;
    MPI_Info_get_string(info, "beta", &len, val, &flag);
    CHECK(flag == 1 && len == 4 && strcmp(val, "two") == 0);
    len = 7;
    MPI_Info_get_string(info, "nope", &len, val, &flag);
    CHECK(flag == 0 && len == 7);

    /* Dup is a deep copy. */
    CHECK(MPI_Info_dup(info, &dup) == MPI_SUCCESS);
    MPI_Info_set(dup, "beta", "deux");
    MPI_Info_get(info, "beta", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(strcmp(val, "two") == 0);
    MPI_Info_get(dup, "beta", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(strcmp(val, "deux") == 0);

    /* Delete. */
    CHECK(MPI_Info_delete(info, "pre") == MPI_SUCCESS);
    MPI_Info_get_nkeys(info, &nkeys);
    CHECK(nkeys == 2);
    MPI_Info_get_nthkey(info, 0, key);
    CHECK(strcmp(key, "alpha") == 0);
    rc = MPI_Info_delete(info, "pre");
    CHECK(cls(rc) == MPI_ERR_INFO_NOKEY);

    /* Key and value lengths. */
    {
        char longkey[MPI_MAX_INFO_KEY + 2];
        static char longval[MPI_MAX_INFO_VAL + 2];
        memset(longkey, 'k', MPI_MAX_INFO_KEY);
        longkey[MPI_MAX_INFO_KEY] = 0;
        CHECK(MPI_Info_set(info, longkey, "v") == MPI_SUCCESS);
        longkey[MPI_MAX_INFO_KEY] = 'k';
        longkey[MPI_MAX_INFO_KEY + 1] = 0;
        rc = MPI_Info_set(info, longkey, "v");
        CHECK(cls(rc) == MPI_ERR_INFO_KEY);
        memset(longval, 'v', MPI_MAX_INFO_VAL);
        longval[MPI_MAX_INFO_VAL] = 0;
        CHECK(MPI_Info_set(info, "long", longval) == MPI_SUCCESS);
        longval[MPI_MAX_INFO_VAL] = 'v';
        longval[MPI_MAX_INFO_VAL + 1] = 0;
        rc = MPI_Info_set(info, "long", longval);
        CHECK(cls(rc) == MPI_ERR_INFO_VALUE);
        rc = MPI_Info_set(info, "", "v");
        CHECK(cls(rc) == MPI_ERR_INFO_KEY);
    }

    /* Bad handles. */
    rc = MPI_Info_set(MPI_INFO_NULL, "a", "b");
    CHECK(cls(rc) == MPI_ERR_INFO);
    rc = MPI_Info_get_nkeys((MPI_Info)0x12345, &nkeys);
    CHECK(cls(rc) == MPI_ERR_INFO);

    /* Free. */
    CHECK(MPI_Info_free(&dup) == MPI_SUCCESS);
    CHECK(dup == MPI_INFO_NULL);
    CHECK(MPI_Info_free(&info) == MPI_SUCCESS);
    CHECK(info == MPI_INFO_NULL);
    rc = MPI_Info_free(&info);
    CHECK(cls(rc) == MPI_ERR_INFO);

    /* MPI_INFO_ENV and MPI_Info_create_env. */
    MPI_Info_get(MPI_INFO_ENV, "command", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(flag == 1 && strstr(val, "info_basic") != NULL);
    MPI_Info_get(MPI_INFO_ENV, "maxprocs", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(flag == 1 && atoi(val) == size);
    /* The level provided (MPI_Init asks for MPI_THREAD_SINGLE). */
    MPI_Info_get(MPI_INFO_ENV, "thread_level", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(flag == 1 && strcmp(val, "MPI_THREAD_SINGLE") == 0);
    MPI_Info_get(MPI_INFO_ENV, "host", MPI_MAX_INFO_VAL, val, &flag);
    {
        char host[MPI_MAX_PROCESSOR_NAME];
        int hl;
        MPI_Get_processor_name(host, &hl);
        CHECK(flag == 1 && strcmp(val, host) == 0);
    }
    MPI_Info_get(MPI_INFO_ENV, "wdir", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(flag == 1 && val[0] == '/');
    MPI_Info_get_nkeys(MPI_INFO_ENV, &nkeys);
    CHECK(nkeys >= 5);
    rc = MPI_Info_set(MPI_INFO_ENV, "a", "b");
    CHECK(cls(rc) == MPI_ERR_INFO);
    env = MPI_INFO_ENV;
    rc = MPI_Info_free(&env);
    CHECK(cls(rc) == MPI_ERR_INFO);
    {
        char *args[] = {"prog", "-x", "3", NULL};
        CHECK(MPI_Info_create_env(3, args, &env) == MPI_SUCCESS);
        MPI_Info_get(env, "command", MPI_MAX_INFO_VAL, val, &flag);
        CHECK(flag == 1 && strcmp(val, "prog") == 0);
        MPI_Info_get(env, "argv", MPI_MAX_INFO_VAL, val, &flag);
        CHECK(flag == 1 && strcmp(val, "-x 3") == 0);
        MPI_Info_set(env, "added", "ok");
        MPI_Info_free(&env);
    }
    CHECK(MPI_Info_create_env(0, NULL, &env) == MPI_SUCCESS);
    MPI_Info_get(env, "command", MPI_MAX_INFO_VAL, val, &flag);
    CHECK(flag == 1 && strstr(val, "info_basic") != NULL);
    MPI_Info_free(&env);

    {
        int all;
        MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0 && all == 0) printf("OK\n");
    }
    MPI_Finalize();
    return fails != 0;
}
