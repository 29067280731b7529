/* The MPI 4.1 calls and MPI 5.0's handle/ABI queries that MPICH >= 4.1
 * exports (an MPI 4.0 header declares neither, an MPI 4.1 one, gmpi's,
 * not the MPI 5.0 ones: this test declares what its header lacks, as a
 * program built against a newer MPICH has them):
 * status fields, error class/code/string removal, Request_get_status_any/
 * all/some, Type_get_value_index, Get_hw_resource_info, the names of the
 * null handles, buffers per
 * communicator and per session with flushes and MPI_BUFFER_AUTOMATIC,
 * toint/fromint, and the ABI queries. Any np >= 1. */
#define TEST_NAME "mpi41"
#include "check.h"

#ifndef MPI_BUFFER_AUTOMATIC
#define MPI_BUFFER_AUTOMATIC ((void *)-2)
int MPI_Status_get_source(const MPI_Status *status, int *source);
int MPI_Status_get_tag(const MPI_Status *status, int *tag);
int MPI_Status_get_error(const MPI_Status *status, int *error);
int MPI_Status_set_source(MPI_Status *status, int source);
int MPI_Status_set_tag(MPI_Status *status, int tag);
int MPI_Status_set_error(MPI_Status *status, int error);
int MPI_Status_set_elements_c(MPI_Status *status, MPI_Datatype datatype, MPI_Count count);
int MPI_Status_c2f08(const MPI_Status *c_status, MPI_F08_status *f08_status);
int MPI_Status_f082c(const MPI_F08_status *f08_status, MPI_Status *c_status);
int MPI_Remove_error_class(int errorclass);
int MPI_Remove_error_code(int errorcode);
int MPI_Remove_error_string(int errorcode);
int MPI_Request_get_status_all(int count, const MPI_Request array_of_requests[], int *flag,
                               MPI_Status *array_of_statuses);
int MPI_Request_get_status_any(int count, const MPI_Request array_of_requests[], int *indx,
                               int *flag, MPI_Status *status);
int MPI_Request_get_status_some(int incount, const MPI_Request array_of_requests[], int *outcount,
                                int array_of_indices[], MPI_Status *array_of_statuses);
int MPI_Type_get_value_index(MPI_Datatype value_type, MPI_Datatype index_type,
                             MPI_Datatype *pair_type);
int MPI_Get_hw_resource_info(MPI_Info *hw_info);
int MPI_Buffer_flush(void);
int MPI_Buffer_iflush(MPI_Request *request);
int MPI_Comm_attach_buffer(MPI_Comm comm, void *buffer, int size);
int MPI_Comm_detach_buffer(MPI_Comm comm, void *buffer_addr, int *size);
int MPI_Comm_flush_buffer(MPI_Comm comm);
int MPI_Comm_iflush_buffer(MPI_Comm comm, MPI_Request *request);
int MPI_Session_attach_buffer(MPI_Session session, void *buffer, int size);
int MPI_Session_detach_buffer(MPI_Session session, void *buffer_addr, int *size);
int MPI_Session_flush_buffer(MPI_Session session);
#endif
#if MPI_VERSION < 5
int MPI_Comm_toint(MPI_Comm comm);
MPI_Comm MPI_Comm_fromint(int comm);
int MPI_Type_toint(MPI_Datatype datatype);
MPI_Datatype MPI_Type_fromint(int datatype);
int MPI_Abi_get_version(int *abi_major, int *abi_minor);
int MPI_Abi_get_info(MPI_Info *info);
int MPI_Abi_get_fortran_booleans(int logical_size, void *logical_true, void *logical_false,
                                 int *is_set);
#endif

static int rank, size;
#define N 200000

static void statuses(void)
{
    MPI_Status s;
    memset(&s, 0, sizeof s);
    CHECK_MPI(MPI_Status_set_source(&s, 3));
    CHECK_MPI(MPI_Status_set_tag(&s, 44));
    CHECK_MPI(MPI_Status_set_error(&s, MPI_ERR_TAG));
    int src = -1, tag = -1, e = -1;
    CHECK_MPI(MPI_Status_get_source(&s, &src));
    CHECK_MPI(MPI_Status_get_tag(&s, &tag));
    CHECK_MPI(MPI_Status_get_error(&s, &e));
    CHECK(src == 3 && tag == 44 && e == MPI_ERR_TAG, "status %d %d %d", src, tag, e);
    CHECK(s.MPI_SOURCE == 3 && s.MPI_TAG == 44, "fields %d %d", s.MPI_SOURCE, s.MPI_TAG);
    CHECK_MPI(MPI_Status_set_elements_c(&s, MPI_DOUBLE, (MPI_Count)5));
    MPI_Count n = 0;
    CHECK_MPI(MPI_Get_elements_x(&s, MPI_DOUBLE, &n));
    CHECK(n == 5, "elements %lld", (long long)n);
    MPI_F08_status f;
    MPI_Status back;
    CHECK_MPI(MPI_Status_c2f08(&s, &f));
    CHECK_MPI(MPI_Status_f082c(&f, &back));
    CHECK(memcmp(&back, &s, sizeof s) == 0, "f08 round trip");
}

static void error_removal(void)
{
    int last0 = 0, *lastp, flag;
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &lastp, &flag));
    last0 = *lastp;
    int cls, code;
    CHECK_MPI(MPI_Add_error_class(&cls));
    CHECK_MPI(MPI_Add_error_code(cls, &code));
    CHECK_MPI(MPI_Add_error_string(code, (char *)"a user code"));
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &lastp, &flag));
    int last1 = *lastp;
    CHECK(last1 >= cls, "MPI_LASTUSEDCODE %d below the new class", last1);
    CHECK_KNOWN_BUG(last1 >= code, "MPI_LASTUSEDCODE %d below the new code (MPICH follows classes only)", last1);
    char str[MPI_MAX_ERROR_STRING];
    int len = 0;
    CHECK_MPI(MPI_Error_string(code, str, &len));
    CHECK(strcmp(str, "a user code") == 0, "string '%s'", str);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(MPI_Remove_error_code(code) != MPI_SUCCESS, "a code with a string was removed");
    CHECK_MPI(MPI_Remove_error_string(code));
    CHECK_MPI(MPI_Error_string(code, str, &len));
    CHECK(len == 0 && str[0] == 0, "string after removal '%s'", str);
    CHECK(MPI_Remove_error_class(cls) != MPI_SUCCESS, "a class with a code was removed");
    CHECK(MPI_Remove_error_code(MPI_ERR_TAG) != MPI_SUCCESS, "a predefined code was removed");
    CHECK_MPI(MPI_Remove_error_code(code));
    CHECK_MPI(MPI_Remove_error_class(cls));
    CHECK(MPI_Add_error_code(cls, &code) != MPI_SUCCESS, "a code was added to a removed class");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &lastp, &flag));
    /* It may or may not come down again (gmpi: yes; MPICH: no). */
    CHECK(*lastp >= last0 && *lastp <= last1, "MPI_LASTUSEDCODE %d after removals (%d, %d)", *lastp, last0, last1);
}

static void request_status(void)
{
    int in = -1, out = 7;
    MPI_Request r[3];
    r[0] = MPI_REQUEST_NULL;
    CHECK_MPI(MPI_Irecv(&in, 1, MPI_INT, rank, 91, MPI_COMM_WORLD, &r[1]));
    CHECK_MPI(MPI_Irecv(&in, 1, MPI_INT, rank, 92, MPI_COMM_WORLD, &r[2]));
    int flag = -1, idx = -2, outcount = -1, indices[3];
    MPI_Status st, sts[3];
    CHECK_MPI(MPI_Request_get_status_any(3, r, &idx, &flag, &st));
    CHECK(!flag && idx == MPI_UNDEFINED, "any: flag %d idx %d before a send", flag, idx);
    CHECK_MPI(MPI_Request_get_status_some(3, r, &outcount, indices, sts));
    CHECK(outcount == 0, "some: %d before a send", outcount);
    CHECK_MPI(MPI_Send(&out, 1, MPI_INT, rank, 92, MPI_COMM_WORLD));
    do {
        CHECK_MPI(MPI_Request_get_status_any(3, r, &idx, &flag, &st));
    } while (!flag);
    CHECK(idx == 2 && st.MPI_TAG == 92 && st.MPI_SOURCE == rank, "any: idx %d tag %d", idx, st.MPI_TAG);
    CHECK(r[2] != MPI_REQUEST_NULL, "get_status_any freed the request");
    CHECK_MPI(MPI_Request_get_status_all(3, r, &flag, sts));
    CHECK(!flag, "all: complete with a receive pending");
    CHECK_MPI(MPI_Request_get_status_some(3, r, &outcount, indices, sts));
    CHECK(outcount == 1 && indices[0] == 2 && sts[0].MPI_TAG == 92, "some: %d [%d]", outcount, indices[0]);
    CHECK_MPI(MPI_Send(&out, 1, MPI_INT, rank, 91, MPI_COMM_WORLD));
    do {
        CHECK_MPI(MPI_Request_get_status_all(3, r, &flag, sts));
    } while (!flag);
    CHECK(sts[1].MPI_TAG == 91 && sts[2].MPI_TAG == 92, "all: tags %d %d", sts[1].MPI_TAG, sts[2].MPI_TAG);
    CHECK(r[1] != MPI_REQUEST_NULL && r[2] != MPI_REQUEST_NULL, "get_status_all freed a request");
    CHECK_MPI(MPI_Waitall(3, r, MPI_STATUSES_IGNORE));
    CHECK(in == 7, "received %d", in);
    /* Only null requests: flag true, index undefined; outcount undefined. */
    CHECK_MPI(MPI_Request_get_status_any(3, r, &idx, &flag, &st));
    CHECK(flag && idx == MPI_UNDEFINED, "any over nulls: flag %d idx %d", flag, idx);
    CHECK_MPI(MPI_Request_get_status_some(3, r, &outcount, indices, sts));
    CHECK(outcount == MPI_UNDEFINED, "some over nulls: %d", outcount);
}

static void value_index(void)
{
    MPI_Datatype t;
    CHECK_MPI(MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &t));
    CHECK(t == MPI_DOUBLE_INT, "double,int");
    CHECK_MPI(MPI_Type_get_value_index(MPI_INT, MPI_INT, &t));
    CHECK(t == MPI_2INT, "int,int");
    CHECK_MPI(MPI_Type_get_value_index(MPI_LONG_DOUBLE, MPI_INT, &t));
    CHECK(t == MPI_LONG_DOUBLE_INT, "long double,int");
    CHECK_MPI(MPI_Type_get_value_index(MPI_FLOAT, MPI_LONG, &t));
    CHECK(t == MPI_DATATYPE_NULL, "float,long is no pair type");
}

static void null_names(void)
{
    /* MPI 4.1: the null handles have names. */
    char n[MPI_MAX_OBJECT_NAME];
    int len = -1;
    CHECK_MPI(MPI_Comm_get_name(MPI_COMM_NULL, n, &len));
    CHECK(strcmp(n, "MPI_COMM_NULL") == 0 && len == 13, "comm null name '%s' %d", n, len);
    CHECK_MPI(MPI_Type_get_name(MPI_DATATYPE_NULL, n, &len));
    CHECK(strcmp(n, "MPI_DATATYPE_NULL") == 0 && len == 17, "datatype null name '%s' %d", n, len);
    CHECK_MPI(MPI_Win_get_name(MPI_WIN_NULL, n, &len));
    CHECK(strcmp(n, "MPI_WIN_NULL") == 0 && len == 12, "win null name '%s' %d", n, len);
}

/* MPI 4.1: MPI_Win_shared_query on a window of MPI_Win_create answers
 * at least for this rank's own memory. */
static void shared_query_create(void)
{
    double mem[16];
    MPI_Win w;
    CHECK_MPI(MPI_Win_create(mem, sizeof mem, sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &w));
    MPI_Aint sz = -1;
    int du = -1;
    void *base = NULL;
    CHECK_MPI(MPI_Win_shared_query(w, rank, &sz, &du, &base));
    CHECK(sz == 0 || (sz == (MPI_Aint)sizeof mem && base == (void *)mem && du == (int)sizeof(double)),
          "own memory: size %ld base %p (mem %p) disp %d", (long)sz, base, (void *)mem, du);
    CHECK_MPI(MPI_Win_free(&w));
}

static void queries(void)
{
    MPI_Info info;
    int n = -1, flag = 0;
    CHECK_MPI(MPI_Get_hw_resource_info(&info));
    CHECK(info != MPI_INFO_NULL, "hw info");
    CHECK_MPI(MPI_Info_get_nkeys(info, &n));
    CHECK(n >= 0, "hw info keys %d", n);
    CHECK_MPI(MPI_Info_free(&info));
    int ma = 0, mi = 0;
    CHECK_MPI(MPI_Abi_get_version(&ma, &mi));
    CHECK(ma == -1 && mi == -1, "abi version %d.%d (the MPICH ABI, not the standard ABI)", ma, mi);
    CHECK_MPI(MPI_Abi_get_info(&info));
    char v[64];
    CHECK_MPI(MPI_Info_get(info, "mpi_aint_size", 63, v, &flag));
    CHECK(flag && atoi(v) == (int)sizeof(MPI_Aint), "mpi_aint_size %s", v);
    CHECK_MPI(MPI_Info_free(&info));
    int t = -1, f = -1, set = 0;
    CHECK_MPI(MPI_Abi_get_fortran_booleans(4, &t, &f, &set));
    CHECK(set && t == 1 && f == 0, "fortran booleans %d %d %d", t, f, set);
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "comm toint");
    CHECK(MPI_Type_fromint(MPI_Type_toint(MPI_DOUBLE)) == MPI_DOUBLE, "type toint");
}

static void buffers(void)
{
    MPI_Comm c;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    /* A buffer of the communicator: room for one message of N ints (large
     * enough to stay in flight until it is received). */
    int bsize = N * (int)sizeof(int) + MPI_BSEND_OVERHEAD;
    char *buf = malloc((size_t)bsize);
    CHECK_MPI(MPI_Comm_attach_buffer(c, buf, bsize));
    int *msg = malloc(N * sizeof(int)), *got = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++)
        msg[i] = rank * 1000 + i;
    CHECK_MPI(MPI_Bsend(msg, N, MPI_INT, rank, 1, c));
    /* The buffer is full and the process has none: a second send fails. */
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    int rc = MPI_Bsend(msg, N, MPI_INT, rank, 2, c);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER, "second Bsend into a full buffer: class %d", cls);
    /* Other communicators do not use it. */
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    rc = MPI_Bsend(msg, 1, MPI_INT, 0, 3, MPI_COMM_SELF);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER, "Bsend on another communicator without a buffer: class %d", cls);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
    CHECK_MPI(MPI_Recv(got, N, MPI_INT, rank, 1, c, MPI_STATUS_IGNORE));
    CHECK(got[N - 1] == rank * 1000 + N - 1, "got %d", got[N - 1]);
    CHECK_MPI(MPI_Comm_flush_buffer(c));
    /* Flushed: the space is back. */
    CHECK_MPI(MPI_Bsend(msg, N, MPI_INT, rank, 4, c));
    MPI_Request fr;
    CHECK_MPI(MPI_Comm_iflush_buffer(c, &fr));
    CHECK_MPI(MPI_Recv(got, N, MPI_INT, rank, 4, c, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&fr, MPI_STATUS_IGNORE));
    void *addr = NULL;
    int sz = -1;
    CHECK_MPI(MPI_Comm_detach_buffer(c, &addr, &sz));
    CHECK(addr == buf && sz == bsize, "detached %p %d", addr, sz);
    free(buf);
    free(msg);
    free(got);
    /* An automatic process buffer: no size limit. */
    CHECK_MPI(MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0));
    int big[5000];
    for (int i = 0; i < 5000; i++)
        big[i] = i;
    CHECK_MPI(MPI_Bsend(big, 5000, MPI_INT, rank, 5, c));
    CHECK_MPI(MPI_Bsend(big, 5000, MPI_INT, rank, 6, c));
    MPI_Request br;
    CHECK_MPI(MPI_Buffer_iflush(&br));
    CHECK_MPI(MPI_Recv(big, 5000, MPI_INT, rank, 6, c, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Recv(big, 5000, MPI_INT, rank, 5, c, MPI_STATUS_IGNORE));
    CHECK(big[4999] == 4999, "automatic buffer data");
    CHECK_MPI(MPI_Wait(&br, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Buffer_flush());
    CHECK_MPI(MPI_Buffer_detach(&addr, &sz));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && sz == 0, "automatic detach %p %d", addr, sz);
    CHECK_MPI(MPI_Comm_free(&c));
}

/* A session's buffer serves the communicators made from its groups. */
static void session_buffer(void)
{
    MPI_Session s;
    MPI_Group g;
    MPI_Comm c;
    CHECK_MPI(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    CHECK_MPI(MPI_Group_from_session_pset(s, "mpi://SELF", &g));
    CHECK_MPI(MPI_Comm_create_from_group(g, "mpi41.session", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
    int bsize = N * (int)sizeof(double) + MPI_BSEND_OVERHEAD;
    char *buf = malloc((size_t)bsize);
    CHECK_MPI(MPI_Session_attach_buffer(s, buf, bsize));
    double *d = calloc(N, sizeof(double)), *e = malloc(N * sizeof(double));
    d[2] = 3;
    CHECK_MPI(MPI_Bsend(d, N, MPI_DOUBLE, 0, 1, c));
    int rc = MPI_Bsend(d, N, MPI_DOUBLE, 0, 2, c), cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER, "the session's buffer is full: class %d", cls);
    CHECK_MPI(MPI_Recv(e, N, MPI_DOUBLE, 0, 1, c, MPI_STATUS_IGNORE));
    CHECK(e[2] == 3, "session buffered data");
    CHECK_MPI(MPI_Session_flush_buffer(s));
    void *addr;
    int sz;
    CHECK_MPI(MPI_Session_detach_buffer(s, &addr, &sz));
    CHECK(addr == buf && sz == bsize, "session detach");
    free(buf);
    free(d);
    free(e);
    CHECK_MPI(MPI_Comm_free(&c));
    CHECK_MPI(MPI_Group_free(&g));
    CHECK_MPI(MPI_Session_finalize(&s));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    statuses();
    error_removal();
    request_status();
    value_index();
    null_names();
    shared_query_create();
    queries();
    buffers();
    session_buffer();
    MPI_Barrier(MPI_COMM_WORLD);
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
