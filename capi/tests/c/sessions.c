/* The MPI-4 sessions model without MPI_Init: MPI_Session_init, the process
 * sets and their info, MPI_Group_from_session_pset, MPI_Comm_create_from_group
 * and a collective on the result, a second session at the same time, the
 * session's error handler, MPI_Session_finalize. Any np >= 1. */
#define TEST_NAME "sessions"
#include "check.h"

static int count_errors = 0;
static void on_error(MPI_Session *s, int *code, ...)
{
    (void)s;
    (void)code;
    count_errors++;
}

int main(void)
{
    MPI_Session s, s2;
    CHECK_MPI(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    CHECK(s != MPI_SESSION_NULL, "session handle");
    int n = 0;
    CHECK_MPI(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n));
    CHECK(n >= 2, "num_psets %d", n);
    int have_world = 0, have_self = 0;
    for (int i = 0; i < n; i++) {
        int len = 0;
        CHECK_MPI(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, NULL));
        CHECK(len > 1, "pset %d length %d", i, len);
        char *name = malloc((size_t)len);
        CHECK_MPI(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, name));
        CHECK((int)strlen(name) == len - 1, "pset %d name %s (%d)", i, name, len);
        have_world |= strcmp(name, "mpi://WORLD") == 0;
        have_self |= strcmp(name, "mpi://SELF") == 0;
        free(name);
    }
    CHECK(have_world && have_self, "mpi://WORLD and mpi://SELF");

    MPI_Info info;
    char val[MPI_MAX_INFO_VAL];
    int flag;
    CHECK_MPI(MPI_Session_get_pset_info(s, "mpi://WORLD", &info));
    CHECK_MPI(MPI_Info_get(info, "mpi_size", MPI_MAX_INFO_VAL - 1, val, &flag));
    CHECK(flag, "mpi_size is set");
    int wsize = atoi(val);
    CHECK(wsize >= 1, "mpi_size %s", val);
    MPI_Info_free(&info);

    MPI_Group g;
    CHECK_MPI(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    int gsize, grank;
    MPI_Group_size(g, &gsize);
    MPI_Group_rank(g, &grank);
    CHECK(gsize == wsize && grank >= 0, "world group %d %d", gsize, grank);
    MPI_Comm comm;
    CHECK_MPI(MPI_Comm_create_from_group(g, "org.gmpi.test", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                         &comm));
    int sum = 0, one = 1, crank, csize;
    MPI_Comm_rank(comm, &crank);
    MPI_Comm_size(comm, &csize);
    CHECK(crank == grank && csize == gsize, "comm rank/size");
    CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm));
    CHECK(sum == wsize, "allreduce over the session's communicator: %d", sum);
    MPI_Errhandler eh;
    CHECK_MPI(MPI_Comm_get_errhandler(comm, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "the communicator has the given error handler");
    MPI_Group_free(&g);

    /* mpi://SELF and a second session at once. */
    CHECK_MPI(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s2));
    CHECK_MPI(MPI_Group_from_session_pset(s2, "mpi://SELF", &g));
    MPI_Group_size(g, &gsize);
    CHECK(gsize == 1, "self group size %d", gsize);
    MPI_Comm self;
    CHECK_MPI(MPI_Comm_create_from_group(g, "self", MPI_INFO_NULL, MPI_ERRORS_RETURN, &self));
    MPI_Comm_size(self, &csize);
    CHECK(csize == 1, "self comm size");
    MPI_Comm_free(&self);
    MPI_Group_free(&g);
    CHECK_MPI(MPI_Session_finalize(&s2));

    /* Errors go to the session's handler. */
    MPI_Errhandler mine;
    CHECK_MPI(MPI_Session_create_errhandler(on_error, &mine));
    CHECK_MPI(MPI_Session_set_errhandler(s, mine));
    CHECK(MPI_Session_get_pset_info(s, "mpi://NOWHERE", &info) != MPI_SUCCESS, "unknown pset");
    CHECK(count_errors == 1, "the session's handler ran %d times", count_errors);
    CHECK_MPI(MPI_Session_get_errhandler(s, &eh));
    CHECK(eh == mine, "get_errhandler");
    MPI_Errhandler_free(&eh);
    MPI_Errhandler_free(&mine);

    CHECK_MPI(MPI_Comm_free(&comm));
    if (grank == 0) {
        printf("OK %s np=%d\n", TEST_NAME, wsize);
        fflush(stdout);
    }
    CHECK_MPI(MPI_Session_finalize(&s));
    CHECK(s == MPI_SESSION_NULL, "finalize sets MPI_SESSION_NULL");
    return 0;
}
