/*
 * fbind.c -- gmpi's Fortran bindings (mpif.h and 'use mpi'), written in C
 * on top of the C API in mpi.h.  Built into libmpi.so by the capi crate.
 *
 * Conventions (gfortran, MPICH ABI):
 *  - symbol = lower-case MPI name + one trailing underscore (mpi_send_);
 *  - every argument is passed by reference; INTEGER is MPI_Fint (int);
 *    INTEGER(KIND=MPI_ADDRESS_KIND) is MPI_Aint, (KIND=MPI_COUNT_KIND)
 *    MPI_Count; 'ierror' is the last regular argument;
 *  - handles have the same integer values in C and Fortran, so handle
 *    arguments (and arrays of them) are used as they are;
 *  - an INTEGER status(MPI_STATUS_SIZE) has MPI_Status's layout;
 *  - LOGICAL is an int: read as "non-zero is true", written as 1 / 0;
 *  - CHARACTER arguments get hidden size_t lengths after all regular
 *    arguments; input strings lose their trailing blanks, output
 *    strings are blank-padded;
 *  - MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS(ES)_IGNORE are the addresses
 *    of the common blocks gmpi_fc_... declared in mpif.h; they are
 *    recognised here by address and replaced with the C constants;
 *  - Fortran indices (Waitany, Testany, Waitsome, Testsome) are 1-based;
 *  - as in MPICH, the Fortran values of the predefined attribute keys
 *    (MPI_TAG_UB, ...) are the C values plus one; MPI_COMM_GET_ATTR
 *    returns the attribute's integer value for them, and the stored
 *    value itself (not a pointer) for user keys;
 *  - attribute callbacks given to MPI_COMM_CREATE_KEYVAL are Fortran
 *    subroutines and are called through C trampolines with Fortran
 *    conventions (by reference, ierror last).
 */
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef MPI_Fint fint;

/* ---- ABI assumptions ---------------------------------------------------- */
_Static_assert(sizeof(MPI_Fint) == sizeof(int), "MPI_Fint must be int");
_Static_assert(sizeof(MPI_Comm) == sizeof(fint), "handle size");
_Static_assert(sizeof(MPI_Group) == sizeof(fint), "handle size");
_Static_assert(sizeof(MPI_Datatype) == sizeof(fint), "handle size");
_Static_assert(sizeof(MPI_Op) == sizeof(fint), "handle size");
_Static_assert(sizeof(MPI_Request) == sizeof(fint), "handle size");
_Static_assert(sizeof(MPI_Message) == sizeof(fint), "handle size");
_Static_assert(sizeof(MPI_Errhandler) == sizeof(fint), "handle size");
_Static_assert(sizeof(MPI_Info) == sizeof(fint), "handle size");
_Static_assert(sizeof(MPI_Aint) == 8 && sizeof(MPI_Count) == 8,
               "MPI_ADDRESS_KIND = MPI_COUNT_KIND = 8");
_Static_assert(sizeof(MPI_Aint) == sizeof(void *), "MPI_Aint holds a pointer");
_Static_assert(sizeof(MPI_Status) == 5 * sizeof(fint), "MPI_STATUS_SIZE = 5");
_Static_assert(offsetof(MPI_Status, MPI_SOURCE) == 2 * sizeof(fint), "MPI_SOURCE = 3");
_Static_assert(offsetof(MPI_Status, MPI_TAG) == 3 * sizeof(fint), "MPI_TAG = 4");
_Static_assert(offsetof(MPI_Status, MPI_ERROR) == 4 * sizeof(fint), "MPI_ERROR = 5");

#define FAPI __attribute__((visibility("default")))

/* Store the return code of a C call into ierror. */
#define RET(call)                                                              \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (ierr) *ierr = (fint)rc_;                                           \
    } while (0)

/* Out-pointer to a handle (or array of handles): same size as fint. */
#define H(p) ((void *)(p))

#define FLOGICAL(x) ((fint)((x) ? 1 : 0))

/* ---- special addresses (common blocks of mpif.h) ------------------------ */
/* Weak references: they are defined by the Fortran program's common blocks
 * (never by this library), and are NULL when no Fortran code uses them. */
extern char gmpi_fc_bottom_ __attribute__((weak));
extern char gmpi_fc_in_place_ __attribute__((weak));
extern char gmpi_fc_status_ignore_ __attribute__((weak));
extern char gmpi_fc_statuses_ignore_ __attribute__((weak));

static inline int is_fc(const void *p, const void *sym) { return sym != NULL && p == sym; }

/* Choice buffer: MPI_BOTTOM / MPI_IN_PLACE -> C constants. */
static inline void *fbuf(void *p)
{
    if (is_fc(p, &gmpi_fc_bottom_)) return MPI_BOTTOM;
    if (is_fc(p, &gmpi_fc_in_place_)) return MPI_IN_PLACE;
    return p;
}

static inline int is_status_ignore(const fint *s)
{
    return is_fc(s, &gmpi_fc_status_ignore_) || is_fc(s, &gmpi_fc_statuses_ignore_);
}
static inline MPI_Status *fstatus(fint *s)
{
    return is_status_ignore(s) ? MPI_STATUS_IGNORE : (MPI_Status *)(void *)s;
}
static inline MPI_Status *fstatuses(fint *s)
{
    return is_status_ignore(s) ? MPI_STATUSES_IGNORE : (MPI_Status *)(void *)s;
}
/* Input status (Get_count & co.). */
#define CSTATUS(s) ((const MPI_Status *)(const void *)(s))

/* 0-based C index -> 1-based Fortran index (MPI_UNDEFINED stays). */
static inline fint findex(int i) { return i >= 0 ? i + 1 : i; }

/* ---- strings ------------------------------------------------------------ */
/* Fortran string -> malloc'ed C string without trailing blanks. */
static char *f2c_str(const char *s, size_t len)
{
    while (len > 0 && s[len - 1] == ' ') len--;
    char *c = malloc(len + 1);
    if (c) {
        memcpy(c, s, len);
        c[len] = '\0';
    }
    return c;
}

/* C string -> blank-padded Fortran string; returns the characters stored. */
static fint c2f_str(const char *src, char *dst, size_t dlen)
{
    size_t n = strlen(src);
    if (n > dlen) n = dlen;
    memcpy(dst, src, n);
    memset(dst + n, ' ', dlen - n);
    return (fint)n;
}

/* Run call_with_buf_len, which must write a C string into `buf` (cap+1 chars, declared
 * here) and its length into `len_`; copy the string out blank-padded and set
 * resultlen to the number of characters stored. */
#define STR_OUT(cap, call_with_buf_len, fstr, flen, resultlen)                 \
    do {                                                                       \
        char buf[(cap) + 1];                                                   \
        int len_ = 0;                                                          \
        buf[0] = '\0';                                                         \
        int rc_ = call_with_buf_len;                                           \
        buf[cap] = '\0';                                                       \
        fint n_ = c2f_str(buf, fstr, flen);                                    \
        if (resultlen) *(resultlen) = n_;                                      \
        if (ierr) *ierr = (fint)rc_;                                           \
    } while (0)

/* ======================================================================== */
/* Environment                                                              */
/* ======================================================================== */

FAPI void mpi_init_(fint *ierr) { RET(MPI_Init(NULL, NULL)); }

FAPI void mpi_init_thread_(fint *required, fint *provided, fint *ierr)
{
    RET(MPI_Init_thread(NULL, NULL, *required, provided));
}

FAPI void mpi_finalize_(fint *ierr) { RET(MPI_Finalize()); }

FAPI void mpi_initialized_(fint *flag, fint *ierr)
{
    int f = 0, rc = MPI_Initialized(&f);
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_finalized_(fint *flag, fint *ierr)
{
    int f = 0, rc = MPI_Finalized(&f);
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_abort_(fint *comm, fint *errorcode, fint *ierr)
{
    RET(MPI_Abort(*comm, *errorcode));
}

FAPI void mpi_query_thread_(fint *provided, fint *ierr) { RET(MPI_Query_thread(provided)); }

FAPI void mpi_is_thread_main_(fint *flag, fint *ierr)
{
    int f = 0, rc = MPI_Is_thread_main(&f);
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_get_version_(fint *version, fint *subversion, fint *ierr)
{
    RET(MPI_Get_version(version, subversion));
}

FAPI void mpi_get_library_version_(char *version, fint *resultlen, fint *ierr, size_t version_len)
{
    STR_OUT(MPI_MAX_LIBRARY_VERSION_STRING, MPI_Get_library_version(buf, &len_), version,
            version_len, resultlen);
}

FAPI void mpi_get_processor_name_(char *name, fint *resultlen, fint *ierr, size_t name_len)
{
    STR_OUT(MPI_MAX_PROCESSOR_NAME, MPI_Get_processor_name(buf, &len_), name, name_len, resultlen);
}

FAPI double mpi_wtime_(void) { return MPI_Wtime(); }
FAPI double mpi_wtick_(void) { return MPI_Wtick(); }

FAPI void mpi_error_string_(fint *errorcode, char *string, fint *resultlen, fint *ierr,
                            size_t string_len)
{
    STR_OUT(MPI_MAX_ERROR_STRING, MPI_Error_string(*errorcode, buf, &len_), string, string_len,
            resultlen);
}

FAPI void mpi_error_class_(fint *errorcode, fint *errorclass, fint *ierr)
{
    RET(MPI_Error_class(*errorcode, errorclass));
}

FAPI void mpi_comm_set_errhandler_(fint *comm, fint *errhandler, fint *ierr)
{
    RET(MPI_Comm_set_errhandler(*comm, *errhandler));
}

FAPI void mpi_comm_get_errhandler_(fint *comm, fint *errhandler, fint *ierr)
{
    RET(MPI_Comm_get_errhandler(*comm, H(errhandler)));
}

FAPI void mpi_errhandler_free_(fint *errhandler, fint *ierr)
{
    RET(MPI_Errhandler_free(H(errhandler)));
}

FAPI void mpi_comm_call_errhandler_(fint *comm, fint *errorcode, fint *ierr)
{
    RET(MPI_Comm_call_errhandler(*comm, *errorcode));
}

FAPI void mpi_get_address_(void *location, MPI_Aint *address, fint *ierr)
{
    RET(MPI_Get_address(fbuf(location), address));
}

FAPI MPI_Aint mpi_aint_add_(MPI_Aint *base, MPI_Aint *disp) { return MPI_Aint_add(*base, *disp); }
FAPI MPI_Aint mpi_aint_diff_(MPI_Aint *addr1, MPI_Aint *addr2)
{
    return MPI_Aint_diff(*addr1, *addr2);
}

FAPI void mpi_pcontrol_(fint *level, fint *ierr) { RET(MPI_Pcontrol(*level)); }

/* ======================================================================== */
/* Point-to-point                                                           */
/* ======================================================================== */

#define SEND_FN(fname, cname)                                                  \
    FAPI void fname(void *buf, fint *count, fint *datatype, fint *dest, fint *tag, \
                    fint *comm, fint *ierr)                                    \
    {                                                                          \
        RET(cname(fbuf(buf), *count, *datatype, *dest, *tag, *comm));          \
    }
SEND_FN(mpi_send_, MPI_Send)
SEND_FN(mpi_ssend_, MPI_Ssend)
SEND_FN(mpi_rsend_, MPI_Rsend)
SEND_FN(mpi_bsend_, MPI_Bsend)

/* Nonblocking sends and persistent send/recv requests. */
#define ISEND_FN(fname, cname)                                                 \
    FAPI void fname(void *buf, fint *count, fint *datatype, fint *peer, fint *tag, \
                    fint *comm, fint *request, fint *ierr)                     \
    {                                                                          \
        RET(cname(fbuf(buf), *count, *datatype, *peer, *tag, *comm, H(request))); \
    }
ISEND_FN(mpi_isend_, MPI_Isend)
ISEND_FN(mpi_issend_, MPI_Issend)
ISEND_FN(mpi_irsend_, MPI_Irsend)
ISEND_FN(mpi_ibsend_, MPI_Ibsend)
ISEND_FN(mpi_irecv_, MPI_Irecv)
ISEND_FN(mpi_send_init_, MPI_Send_init)
ISEND_FN(mpi_ssend_init_, MPI_Ssend_init)
ISEND_FN(mpi_recv_init_, MPI_Recv_init)

FAPI void mpi_recv_(void *buf, fint *count, fint *datatype, fint *source, fint *tag, fint *comm,
                    fint *status, fint *ierr)
{
    RET(MPI_Recv(fbuf(buf), *count, *datatype, *source, *tag, *comm, fstatus(status)));
}

FAPI void mpi_buffer_attach_(void *buffer, fint *size, fint *ierr)
{
    RET(MPI_Buffer_attach(buffer, *size));
}

/* The detached address cannot be used from Fortran: it is not stored. */
FAPI void mpi_buffer_detach_(void *buffer_addr, fint *size, fint *ierr)
{
    void *addr = NULL;
    (void)buffer_addr;
    RET(MPI_Buffer_detach(&addr, size));
}

FAPI void mpi_sendrecv_(void *sendbuf, fint *sendcount, fint *sendtype, fint *dest, fint *sendtag,
                        void *recvbuf, fint *recvcount, fint *recvtype, fint *source,
                        fint *recvtag, fint *comm, fint *status, fint *ierr)
{
    RET(MPI_Sendrecv(fbuf(sendbuf), *sendcount, *sendtype, *dest, *sendtag, fbuf(recvbuf),
                     *recvcount, *recvtype, *source, *recvtag, *comm, fstatus(status)));
}

FAPI void mpi_sendrecv_replace_(void *buf, fint *count, fint *datatype, fint *dest,
                                fint *sendtag, fint *source, fint *recvtag, fint *comm,
                                fint *status, fint *ierr)
{
    RET(MPI_Sendrecv_replace(fbuf(buf), *count, *datatype, *dest, *sendtag, *source, *recvtag,
                             *comm, fstatus(status)));
}

FAPI void mpi_probe_(fint *source, fint *tag, fint *comm, fint *status, fint *ierr)
{
    RET(MPI_Probe(*source, *tag, *comm, fstatus(status)));
}

FAPI void mpi_iprobe_(fint *source, fint *tag, fint *comm, fint *flag, fint *status, fint *ierr)
{
    int f = 0, rc = MPI_Iprobe(*source, *tag, *comm, &f, fstatus(status));
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_mprobe_(fint *source, fint *tag, fint *comm, fint *message, fint *status,
                      fint *ierr)
{
    RET(MPI_Mprobe(*source, *tag, *comm, H(message), fstatus(status)));
}

FAPI void mpi_improbe_(fint *source, fint *tag, fint *comm, fint *flag, fint *message,
                       fint *status, fint *ierr)
{
    int f = 0, rc = MPI_Improbe(*source, *tag, *comm, &f, H(message), fstatus(status));
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_mrecv_(void *buf, fint *count, fint *datatype, fint *message, fint *status,
                     fint *ierr)
{
    RET(MPI_Mrecv(fbuf(buf), *count, *datatype, H(message), fstatus(status)));
}

FAPI void mpi_imrecv_(void *buf, fint *count, fint *datatype, fint *message, fint *request,
                      fint *ierr)
{
    RET(MPI_Imrecv(fbuf(buf), *count, *datatype, H(message), H(request)));
}

FAPI void mpi_get_count_(fint *status, fint *datatype, fint *count, fint *ierr)
{
    RET(MPI_Get_count(CSTATUS(status), *datatype, count));
}

FAPI void mpi_get_elements_(fint *status, fint *datatype, fint *count, fint *ierr)
{
    RET(MPI_Get_elements(CSTATUS(status), *datatype, count));
}

FAPI void mpi_get_elements_x_(fint *status, fint *datatype, MPI_Count *count, fint *ierr)
{
    RET(MPI_Get_elements_x(CSTATUS(status), *datatype, count));
}

/* ---- completion --------------------------------------------------------- */

FAPI void mpi_wait_(fint *request, fint *status, fint *ierr)
{
    RET(MPI_Wait(H(request), fstatus(status)));
}

FAPI void mpi_waitall_(fint *count, fint *requests, fint *statuses, fint *ierr)
{
    RET(MPI_Waitall(*count, H(requests), fstatuses(statuses)));
}

FAPI void mpi_waitany_(fint *count, fint *requests, fint *index, fint *status, fint *ierr)
{
    int idx = MPI_UNDEFINED;
    int rc = MPI_Waitany(*count, H(requests), &idx, fstatus(status));
    *index = findex(idx);
    RET(rc);
}

/* indices: C writes 0-based indices into the Fortran array, then +1. */
static void fix_indices(int outcount, fint *indices)
{
    for (int i = 0; i < outcount; i++) indices[i] = findex(indices[i]);
}

FAPI void mpi_waitsome_(fint *incount, fint *requests, fint *outcount, fint *indices,
                        fint *statuses, fint *ierr)
{
    int n = MPI_UNDEFINED;
    int rc = MPI_Waitsome(*incount, H(requests), &n, indices, fstatuses(statuses));
    if (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) fix_indices(n, indices);
    *outcount = n;
    RET(rc);
}

FAPI void mpi_test_(fint *request, fint *flag, fint *status, fint *ierr)
{
    int f = 0, rc = MPI_Test(H(request), &f, fstatus(status));
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_testall_(fint *count, fint *requests, fint *flag, fint *statuses, fint *ierr)
{
    int f = 0, rc = MPI_Testall(*count, H(requests), &f, fstatuses(statuses));
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_testany_(fint *count, fint *requests, fint *index, fint *flag, fint *status,
                       fint *ierr)
{
    int idx = MPI_UNDEFINED, f = 0;
    int rc = MPI_Testany(*count, H(requests), &idx, &f, fstatus(status));
    *index = findex(idx);
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_testsome_(fint *incount, fint *requests, fint *outcount, fint *indices,
                        fint *statuses, fint *ierr)
{
    int n = MPI_UNDEFINED;
    int rc = MPI_Testsome(*incount, H(requests), &n, indices, fstatuses(statuses));
    if (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) fix_indices(n, indices);
    *outcount = n;
    RET(rc);
}

FAPI void mpi_request_free_(fint *request, fint *ierr) { RET(MPI_Request_free(H(request))); }

FAPI void mpi_request_get_status_(fint *request, fint *flag, fint *status, fint *ierr)
{
    int f = 0, rc = MPI_Request_get_status(*request, &f, fstatus(status));
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_cancel_(fint *request, fint *ierr) { RET(MPI_Cancel(H(request))); }

FAPI void mpi_test_cancelled_(fint *status, fint *flag, fint *ierr)
{
    int f = 0, rc = MPI_Test_cancelled(CSTATUS(status), &f);
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_start_(fint *request, fint *ierr) { RET(MPI_Start(H(request))); }

FAPI void mpi_startall_(fint *count, fint *requests, fint *ierr)
{
    RET(MPI_Startall(*count, H(requests)));
}

/* ======================================================================== */
/* Collectives                                                              */
/* ======================================================================== */

FAPI void mpi_barrier_(fint *comm, fint *ierr) { RET(MPI_Barrier(*comm)); }

FAPI void mpi_ibarrier_(fint *comm, fint *request, fint *ierr)
{
    RET(MPI_Ibarrier(*comm, H(request)));
}

FAPI void mpi_bcast_(void *buffer, fint *count, fint *datatype, fint *root, fint *comm,
                     fint *ierr)
{
    RET(MPI_Bcast(fbuf(buffer), *count, *datatype, *root, *comm));
}

FAPI void mpi_ibcast_(void *buffer, fint *count, fint *datatype, fint *root, fint *comm,
                      fint *request, fint *ierr)
{
    RET(MPI_Ibcast(fbuf(buffer), *count, *datatype, *root, *comm, H(request)));
}

FAPI void mpi_reduce_(void *sendbuf, void *recvbuf, fint *count, fint *datatype, fint *op,
                      fint *root, fint *comm, fint *ierr)
{
    RET(MPI_Reduce(fbuf(sendbuf), fbuf(recvbuf), *count, *datatype, *op, *root, *comm));
}

FAPI void mpi_ireduce_(void *sendbuf, void *recvbuf, fint *count, fint *datatype, fint *op,
                       fint *root, fint *comm, fint *request, fint *ierr)
{
    RET(MPI_Ireduce(fbuf(sendbuf), fbuf(recvbuf), *count, *datatype, *op, *root, *comm,
                    H(request)));
}

/* (sendbuf, recvbuf, count, datatype, op, comm): Allreduce, Scan, Exscan. */
#define REDUCE_ALL_FN(fname, cname)                                            \
    FAPI void fname(void *sendbuf, void *recvbuf, fint *count, fint *datatype, fint *op, \
                    fint *comm, fint *ierr)                                    \
    {                                                                          \
        RET(cname(fbuf(sendbuf), fbuf(recvbuf), *count, *datatype, *op, *comm)); \
    }
REDUCE_ALL_FN(mpi_allreduce_, MPI_Allreduce)
REDUCE_ALL_FN(mpi_scan_, MPI_Scan)
REDUCE_ALL_FN(mpi_exscan_, MPI_Exscan)
REDUCE_ALL_FN(mpi_reduce_scatter_block_, MPI_Reduce_scatter_block)

#define IREDUCE_ALL_FN(fname, cname)                                           \
    FAPI void fname(void *sendbuf, void *recvbuf, fint *count, fint *datatype, fint *op, \
                    fint *comm, fint *request, fint *ierr)                     \
    {                                                                          \
        RET(cname(fbuf(sendbuf), fbuf(recvbuf), *count, *datatype, *op, *comm, H(request))); \
    }
IREDUCE_ALL_FN(mpi_iallreduce_, MPI_Iallreduce)
IREDUCE_ALL_FN(mpi_iscan_, MPI_Iscan)

FAPI void mpi_reduce_scatter_(void *sendbuf, void *recvbuf, fint *recvcounts, fint *datatype,
                              fint *op, fint *comm, fint *ierr)
{
    RET(MPI_Reduce_scatter(fbuf(sendbuf), fbuf(recvbuf), recvcounts, *datatype, *op, *comm));
}

FAPI void mpi_reduce_local_(void *inbuf, void *inoutbuf, fint *count, fint *datatype, fint *op,
                            fint *ierr)
{
    RET(MPI_Reduce_local(fbuf(inbuf), fbuf(inoutbuf), *count, *datatype, *op));
}

/* (sbuf, scount, stype, rbuf, rcount, rtype, root, comm): Gather, Scatter. */
#define ROOTED_FN(fname, cname)                                                \
    FAPI void fname(void *sendbuf, fint *sendcount, fint *sendtype, void *recvbuf, \
                    fint *recvcount, fint *recvtype, fint *root, fint *comm, fint *ierr) \
    {                                                                          \
        RET(cname(fbuf(sendbuf), *sendcount, *sendtype, fbuf(recvbuf), *recvcount, *recvtype, \
                  *root, *comm));                                              \
    }
ROOTED_FN(mpi_gather_, MPI_Gather)
ROOTED_FN(mpi_scatter_, MPI_Scatter)

#define IROOTED_FN(fname, cname)                                               \
    FAPI void fname(void *sendbuf, fint *sendcount, fint *sendtype, void *recvbuf, \
                    fint *recvcount, fint *recvtype, fint *root, fint *comm, fint *request, \
                    fint *ierr)                                                \
    {                                                                          \
        RET(cname(fbuf(sendbuf), *sendcount, *sendtype, fbuf(recvbuf), *recvcount, *recvtype, \
                  *root, *comm, H(request)));                                  \
    }
IROOTED_FN(mpi_igather_, MPI_Igather)
IROOTED_FN(mpi_iscatter_, MPI_Iscatter)

/* (sbuf, scount, stype, rbuf, rcount, rtype, comm): Allgather, Alltoall. */
#define ALL_FN(fname, cname)                                                   \
    FAPI void fname(void *sendbuf, fint *sendcount, fint *sendtype, void *recvbuf, \
                    fint *recvcount, fint *recvtype, fint *comm, fint *ierr)   \
    {                                                                          \
        RET(cname(fbuf(sendbuf), *sendcount, *sendtype, fbuf(recvbuf), *recvcount, *recvtype, \
                  *comm));                                                     \
    }
ALL_FN(mpi_allgather_, MPI_Allgather)
ALL_FN(mpi_alltoall_, MPI_Alltoall)

#define IALL_FN(fname, cname)                                                  \
    FAPI void fname(void *sendbuf, fint *sendcount, fint *sendtype, void *recvbuf, \
                    fint *recvcount, fint *recvtype, fint *comm, fint *request, fint *ierr) \
    {                                                                          \
        RET(cname(fbuf(sendbuf), *sendcount, *sendtype, fbuf(recvbuf), *recvcount, *recvtype, \
                  *comm, H(request)));                                         \
    }
IALL_FN(mpi_iallgather_, MPI_Iallgather)
IALL_FN(mpi_ialltoall_, MPI_Ialltoall)

FAPI void mpi_gatherv_(void *sendbuf, fint *sendcount, fint *sendtype, void *recvbuf,
                       fint *recvcounts, fint *displs, fint *recvtype, fint *root, fint *comm,
                       fint *ierr)
{
    RET(MPI_Gatherv(fbuf(sendbuf), *sendcount, *sendtype, fbuf(recvbuf), recvcounts, displs,
                    *recvtype, *root, *comm));
}

FAPI void mpi_scatterv_(void *sendbuf, fint *sendcounts, fint *displs, fint *sendtype,
                        void *recvbuf, fint *recvcount, fint *recvtype, fint *root, fint *comm,
                        fint *ierr)
{
    RET(MPI_Scatterv(fbuf(sendbuf), sendcounts, displs, *sendtype, fbuf(recvbuf), *recvcount,
                     *recvtype, *root, *comm));
}

FAPI void mpi_allgatherv_(void *sendbuf, fint *sendcount, fint *sendtype, void *recvbuf,
                          fint *recvcounts, fint *displs, fint *recvtype, fint *comm, fint *ierr)
{
    RET(MPI_Allgatherv(fbuf(sendbuf), *sendcount, *sendtype, fbuf(recvbuf), recvcounts, displs,
                       *recvtype, *comm));
}

FAPI void mpi_alltoallv_(void *sendbuf, fint *sendcounts, fint *sdispls, fint *sendtype,
                         void *recvbuf, fint *recvcounts, fint *rdispls, fint *recvtype,
                         fint *comm, fint *ierr)
{
    RET(MPI_Alltoallv(fbuf(sendbuf), sendcounts, sdispls, *sendtype, fbuf(recvbuf), recvcounts,
                      rdispls, *recvtype, *comm));
}

FAPI void mpi_alltoallw_(void *sendbuf, fint *sendcounts, fint *sdispls, fint *sendtypes,
                         void *recvbuf, fint *recvcounts, fint *rdispls, fint *recvtypes,
                         fint *comm, fint *ierr)
{
    RET(MPI_Alltoallw(fbuf(sendbuf), sendcounts, sdispls, H(sendtypes), fbuf(recvbuf),
                      recvcounts, rdispls, H(recvtypes), *comm));
}

/* ---- user-defined operations -------------------------------------------- */
/* A Fortran SUBROUTINE f(invec, inoutvec, len, datatype) takes all its
 * arguments by reference, which is exactly MPI_User_function. */
FAPI void mpi_op_create_(MPI_User_function *function, fint *commute, fint *op, fint *ierr)
{
    RET(MPI_Op_create(function, *commute != 0, H(op)));
}

FAPI void mpi_op_free_(fint *op, fint *ierr) { RET(MPI_Op_free(H(op))); }

FAPI void mpi_op_commutative_(fint *op, fint *commute, fint *ierr)
{
    int c = 0, rc = MPI_Op_commutative(*op, &c);
    *commute = FLOGICAL(c);
    RET(rc);
}

/* ======================================================================== */
/* Communicators and groups                                                 */
/* ======================================================================== */

FAPI void mpi_comm_rank_(fint *comm, fint *rank, fint *ierr) { RET(MPI_Comm_rank(*comm, rank)); }
FAPI void mpi_comm_size_(fint *comm, fint *size, fint *ierr) { RET(MPI_Comm_size(*comm, size)); }

FAPI void mpi_comm_dup_(fint *comm, fint *newcomm, fint *ierr)
{
    RET(MPI_Comm_dup(*comm, H(newcomm)));
}

FAPI void mpi_comm_split_(fint *comm, fint *color, fint *key, fint *newcomm, fint *ierr)
{
    RET(MPI_Comm_split(*comm, *color, *key, H(newcomm)));
}

FAPI void mpi_comm_split_type_(fint *comm, fint *split_type, fint *key, fint *info,
                               fint *newcomm, fint *ierr)
{
    RET(MPI_Comm_split_type(*comm, *split_type, *key, *info, H(newcomm)));
}

FAPI void mpi_comm_create_(fint *comm, fint *group, fint *newcomm, fint *ierr)
{
    RET(MPI_Comm_create(*comm, *group, H(newcomm)));
}

FAPI void mpi_comm_free_(fint *comm, fint *ierr) { RET(MPI_Comm_free(H(comm))); }

FAPI void mpi_comm_compare_(fint *comm1, fint *comm2, fint *result, fint *ierr)
{
    RET(MPI_Comm_compare(*comm1, *comm2, result));
}

FAPI void mpi_comm_group_(fint *comm, fint *group, fint *ierr)
{
    RET(MPI_Comm_group(*comm, H(group)));
}

FAPI void mpi_comm_set_name_(fint *comm, char *name, fint *ierr, size_t name_len)
{
    char *c = f2c_str(name, name_len);
    if (!c) {
        RET(MPI_ERR_NO_MEM);
        return;
    }
    RET(MPI_Comm_set_name(*comm, c));
    free(c);
}

FAPI void mpi_comm_get_name_(fint *comm, char *name, fint *resultlen, fint *ierr,
                             size_t name_len)
{
    STR_OUT(MPI_MAX_OBJECT_NAME, MPI_Comm_get_name(*comm, buf, &len_), name, name_len, resultlen);
}

FAPI void mpi_comm_test_inter_(fint *comm, fint *flag, fint *ierr)
{
    int f = 0, rc = MPI_Comm_test_inter(*comm, &f);
    *flag = FLOGICAL(f);
    RET(rc);
}

FAPI void mpi_comm_remote_size_(fint *comm, fint *size, fint *ierr)
{
    RET(MPI_Comm_remote_size(*comm, size));
}

FAPI void mpi_comm_remote_group_(fint *comm, fint *group, fint *ierr)
{
    RET(MPI_Comm_remote_group(*comm, H(group)));
}

FAPI void mpi_intercomm_create_(fint *local_comm, fint *local_leader, fint *peer_comm,
                                fint *remote_leader, fint *tag, fint *newintercomm, fint *ierr)
{
    RET(MPI_Intercomm_create(*local_comm, *local_leader, *peer_comm, *remote_leader, *tag,
                             H(newintercomm)));
}

FAPI void mpi_intercomm_merge_(fint *intercomm, fint *high, fint *newintracomm, fint *ierr)
{
    RET(MPI_Intercomm_merge(*intercomm, *high != 0, H(newintracomm)));
}

/* ---- attributes --------------------------------------------------------- */

/* Fortran predefined communicator keys are the C ones plus one. */
static int is_c_predef_comm_keyval(int k)
{
    return k == MPI_TAG_UB || k == MPI_HOST || k == MPI_IO || k == MPI_WTIME_IS_GLOBAL ||
           k == MPI_UNIVERSE_SIZE || k == MPI_LASTUSEDCODE || k == MPI_APPNUM;
}
static int f2c_comm_keyval(int k) { return is_c_predef_comm_keyval(k - 1) ? k - 1 : k; }

FAPI void mpi_comm_get_attr_(fint *comm, fint *keyval, MPI_Aint *attribute_val, fint *flag,
                             fint *ierr)
{
    int ck = f2c_comm_keyval(*keyval), f = 0;
    void *v = NULL;
    int rc = MPI_Comm_get_attr(*comm, ck, &v, &f);
    if (rc == MPI_SUCCESS && f) {
        if (is_c_predef_comm_keyval(ck))
            *attribute_val = v ? (MPI_Aint) * (int *)v : 0; /* C gives a pointer to int */
        else
            *attribute_val = (MPI_Aint)(intptr_t)v; /* Fortran stores values */
    }
    *flag = FLOGICAL(rc == MPI_SUCCESS && f);
    RET(rc);
}

FAPI void mpi_comm_set_attr_(fint *comm, fint *keyval, MPI_Aint *attribute_val, fint *ierr)
{
    RET(MPI_Comm_set_attr(*comm, f2c_comm_keyval(*keyval), (void *)(intptr_t)*attribute_val));
}

FAPI void mpi_comm_delete_attr_(fint *comm, fint *keyval, fint *ierr)
{
    RET(MPI_Comm_delete_attr(*comm, f2c_comm_keyval(*keyval)));
}

FAPI void mpi_comm_free_keyval_(fint *keyval, fint *ierr) { RET(MPI_Comm_free_keyval(keyval)); }

/* Fortran attribute callbacks (MPI_COMM_COPY_ATTR_FUNCTION and friends). */
typedef void(f_copy_fn)(fint *oldobj, fint *keyval, MPI_Aint *extra_state,
                        MPI_Aint *attribute_val_in, MPI_Aint *attribute_val_out, fint *flag,
                        fint *ierr);
typedef void(f_delete_fn)(fint *obj, fint *keyval, MPI_Aint *attribute_val,
                          MPI_Aint *extra_state, fint *ierr);
/* Deprecated MPI-1 forms (MPI_NULL_COPY_FN, ...) with default INTEGERs. */
typedef void(f_copy_fn_i)(fint *oldobj, fint *keyval, fint *extra_state, fint *attribute_val_in,
                          fint *attribute_val_out, fint *flag, fint *ierr);
typedef void(f_delete_fn_i)(fint *obj, fint *keyval, fint *attribute_val, fint *extra_state,
                            fint *ierr);

/* The predefined Fortran callbacks named in mpif.h. */
#define F_PREDEF_CALLBACKS(null_copy, dup, null_delete, A)                     \
    FAPI void null_copy(fint *oldobj, fint *keyval, A *extra_state, A *in, A *out, fint *flag, \
                        fint *ierr)                                            \
    {                                                                          \
        (void)oldobj, (void)keyval, (void)extra_state, (void)in, (void)out;    \
        *flag = 0;                                                             \
        *ierr = MPI_SUCCESS;                                                   \
    }                                                                          \
    FAPI void dup(fint *oldobj, fint *keyval, A *extra_state, A *in, A *out, fint *flag, \
                  fint *ierr)                                                  \
    {                                                                          \
        (void)oldobj, (void)keyval, (void)extra_state;                         \
        *out = *in;                                                            \
        *flag = 1;                                                             \
        *ierr = MPI_SUCCESS;                                                   \
    }                                                                          \
    FAPI void null_delete(fint *obj, fint *keyval, A *attribute_val, A *extra_state, fint *ierr) \
    {                                                                          \
        (void)obj, (void)keyval, (void)attribute_val, (void)extra_state;       \
        *ierr = MPI_SUCCESS;                                                   \
    }
F_PREDEF_CALLBACKS(mpi_comm_null_copy_fn_, mpi_comm_dup_fn_, mpi_comm_null_delete_fn_, MPI_Aint)
F_PREDEF_CALLBACKS(mpi_type_null_copy_fn_, mpi_type_dup_fn_, mpi_type_null_delete_fn_, MPI_Aint)
F_PREDEF_CALLBACKS(mpi_win_null_copy_fn_, mpi_win_dup_fn_, mpi_win_null_delete_fn_, MPI_Aint)
F_PREDEF_CALLBACKS(mpi_null_copy_fn_, mpi_dup_fn_, mpi_null_delete_fn_, fint)

typedef void (*any_fn)(void);
#define SAME_FN(a, b) ((any_fn)(a) == (any_fn)(b))

/* C extra_state of a keyval created from Fortran.  It lives as long as the
 * program (the C callbacks may still run after MPI_COMM_FREE_KEYVAL). */
struct f_keyval {
    f_copy_fn *copy;
    f_delete_fn *del;
    MPI_Aint extra_state;
};

static int f_comm_copy_tramp(MPI_Comm oldcomm, int keyval, void *extra_state,
                             void *attribute_val_in, void *attribute_val_out, int *flag)
{
    struct f_keyval *kv = extra_state;
    fint c = (fint)oldcomm, k = keyval, f = 0, ierr = MPI_SUCCESS;
    MPI_Aint in = (MPI_Aint)(intptr_t)attribute_val_in, out = 0;
    kv->copy(&c, &k, &kv->extra_state, &in, &out, &f, &ierr);
    *flag = f != 0;
    if (*flag) *(void **)attribute_val_out = (void *)(intptr_t)out;
    return ierr;
}

static int f_comm_delete_tramp(MPI_Comm comm, int keyval, void *attribute_val, void *extra_state)
{
    struct f_keyval *kv = extra_state;
    fint c = (fint)comm, k = keyval, ierr = MPI_SUCCESS;
    MPI_Aint v = (MPI_Aint)(intptr_t)attribute_val;
    kv->del(&c, &k, &v, &kv->extra_state, &ierr);
    return ierr;
}

FAPI void mpi_comm_create_keyval_(f_copy_fn *comm_copy_attr_fn,
                                  f_delete_fn *comm_delete_attr_fn, fint *comm_keyval,
                                  MPI_Aint *extra_state, fint *ierr)
{
    MPI_Comm_copy_attr_function *ccopy = f_comm_copy_tramp;
    MPI_Comm_delete_attr_function *cdel = f_comm_delete_tramp;
    f_copy_fn *copy = comm_copy_attr_fn;
    f_delete_fn *del = comm_delete_attr_fn;

    if (SAME_FN(copy, mpi_comm_null_copy_fn_) || SAME_FN(copy, mpi_null_copy_fn_))
        ccopy = MPI_COMM_NULL_COPY_FN;
    else if (SAME_FN(copy, mpi_dup_fn_)) /* MPI-1 dup with the wrong kind */
        copy = mpi_comm_dup_fn_;
    if (SAME_FN(del, mpi_comm_null_delete_fn_) || SAME_FN(del, mpi_null_delete_fn_))
        cdel = MPI_COMM_NULL_DELETE_FN;

    struct f_keyval *kv = malloc(sizeof *kv);
    if (!kv) {
        RET(MPI_ERR_NO_MEM);
        return;
    }
    kv->copy = copy;
    kv->del = del;
    kv->extra_state = *extra_state;
    int rc = MPI_Comm_create_keyval(ccopy, cdel, comm_keyval, kv);
    if (rc != MPI_SUCCESS) free(kv);
    RET(rc);
}

/* ---- groups ------------------------------------------------------------- */

FAPI void mpi_group_incl_(fint *group, fint *n, fint *ranks, fint *newgroup, fint *ierr)
{
    RET(MPI_Group_incl(*group, *n, ranks, H(newgroup)));
}

FAPI void mpi_group_excl_(fint *group, fint *n, fint *ranks, fint *newgroup, fint *ierr)
{
    RET(MPI_Group_excl(*group, *n, ranks, H(newgroup)));
}

#define GROUP_SETOP_FN(fname, cname)                                           \
    FAPI void fname(fint *group1, fint *group2, fint *newgroup, fint *ierr)    \
    {                                                                          \
        RET(cname(*group1, *group2, H(newgroup)));                             \
    }
GROUP_SETOP_FN(mpi_group_union_, MPI_Group_union)
GROUP_SETOP_FN(mpi_group_intersection_, MPI_Group_intersection)
GROUP_SETOP_FN(mpi_group_difference_, MPI_Group_difference)

FAPI void mpi_group_translate_ranks_(fint *group1, fint *n, fint *ranks1, fint *group2,
                                     fint *ranks2, fint *ierr)
{
    RET(MPI_Group_translate_ranks(*group1, *n, ranks1, *group2, ranks2));
}

FAPI void mpi_group_rank_(fint *group, fint *rank, fint *ierr)
{
    RET(MPI_Group_rank(*group, rank));
}

FAPI void mpi_group_size_(fint *group, fint *size, fint *ierr)
{
    RET(MPI_Group_size(*group, size));
}

FAPI void mpi_group_compare_(fint *group1, fint *group2, fint *result, fint *ierr)
{
    RET(MPI_Group_compare(*group1, *group2, result));
}

FAPI void mpi_group_free_(fint *group, fint *ierr) { RET(MPI_Group_free(H(group))); }

/* ======================================================================== */
/* Datatypes                                                                */
/* ======================================================================== */

FAPI void mpi_type_contiguous_(fint *count, fint *oldtype, fint *newtype, fint *ierr)
{
    RET(MPI_Type_contiguous(*count, *oldtype, H(newtype)));
}

FAPI void mpi_type_vector_(fint *count, fint *blocklength, fint *stride, fint *oldtype,
                           fint *newtype, fint *ierr)
{
    RET(MPI_Type_vector(*count, *blocklength, *stride, *oldtype, H(newtype)));
}

FAPI void mpi_type_create_hvector_(fint *count, fint *blocklength, MPI_Aint *stride,
                                   fint *oldtype, fint *newtype, fint *ierr)
{
    RET(MPI_Type_create_hvector(*count, *blocklength, *stride, *oldtype, H(newtype)));
}

FAPI void mpi_type_indexed_(fint *count, fint *blocklengths, fint *displacements, fint *oldtype,
                            fint *newtype, fint *ierr)
{
    RET(MPI_Type_indexed(*count, blocklengths, displacements, *oldtype, H(newtype)));
}

FAPI void mpi_type_create_hindexed_(fint *count, fint *blocklengths, MPI_Aint *displacements,
                                    fint *oldtype, fint *newtype, fint *ierr)
{
    RET(MPI_Type_create_hindexed(*count, blocklengths, displacements, *oldtype, H(newtype)));
}

FAPI void mpi_type_create_indexed_block_(fint *count, fint *blocklength, fint *displacements,
                                         fint *oldtype, fint *newtype, fint *ierr)
{
    RET(MPI_Type_create_indexed_block(*count, *blocklength, displacements, *oldtype,
                                      H(newtype)));
}

FAPI void mpi_type_create_struct_(fint *count, fint *blocklengths, MPI_Aint *displacements,
                                  fint *types, fint *newtype, fint *ierr)
{
    RET(MPI_Type_create_struct(*count, blocklengths, displacements, H(types), H(newtype)));
}

FAPI void mpi_type_create_resized_(fint *oldtype, MPI_Aint *lb, MPI_Aint *extent, fint *newtype,
                                   fint *ierr)
{
    RET(MPI_Type_create_resized(*oldtype, *lb, *extent, H(newtype)));
}

FAPI void mpi_type_create_subarray_(fint *ndims, fint *sizes, fint *subsizes, fint *starts,
                                    fint *order, fint *oldtype, fint *newtype, fint *ierr)
{
    RET(MPI_Type_create_subarray(*ndims, sizes, subsizes, starts, *order, *oldtype, H(newtype)));
}

FAPI void mpi_type_commit_(fint *datatype, fint *ierr) { RET(MPI_Type_commit(H(datatype))); }
FAPI void mpi_type_free_(fint *datatype, fint *ierr) { RET(MPI_Type_free(H(datatype))); }

FAPI void mpi_type_dup_(fint *oldtype, fint *newtype, fint *ierr)
{
    RET(MPI_Type_dup(*oldtype, H(newtype)));
}

FAPI void mpi_type_size_(fint *datatype, fint *size, fint *ierr)
{
    RET(MPI_Type_size(*datatype, size));
}

FAPI void mpi_type_get_extent_(fint *datatype, MPI_Aint *lb, MPI_Aint *extent, fint *ierr)
{
    RET(MPI_Type_get_extent(*datatype, lb, extent));
}

FAPI void mpi_type_get_true_extent_(fint *datatype, MPI_Aint *true_lb, MPI_Aint *true_extent,
                                    fint *ierr)
{
    RET(MPI_Type_get_true_extent(*datatype, true_lb, true_extent));
}

FAPI void mpi_type_get_name_(fint *datatype, char *type_name, fint *resultlen, fint *ierr,
                             size_t type_name_len)
{
    STR_OUT(MPI_MAX_OBJECT_NAME, MPI_Type_get_name(*datatype, buf, &len_), type_name,
            type_name_len, resultlen);
}

FAPI void mpi_type_set_name_(fint *datatype, char *type_name, fint *ierr, size_t type_name_len)
{
    char *c = f2c_str(type_name, type_name_len);
    if (!c) {
        RET(MPI_ERR_NO_MEM);
        return;
    }
    RET(MPI_Type_set_name(*datatype, c));
    free(c);
}

FAPI void mpi_type_get_envelope_(fint *datatype, fint *num_integers, fint *num_addresses,
                                 fint *num_datatypes, fint *combiner, fint *ierr)
{
    RET(MPI_Type_get_envelope(*datatype, num_integers, num_addresses, num_datatypes, combiner));
}

FAPI void mpi_type_get_contents_(fint *datatype, fint *max_integers, fint *max_addresses,
                                 fint *max_datatypes, fint *array_of_integers,
                                 MPI_Aint *array_of_addresses, fint *array_of_datatypes,
                                 fint *ierr)
{
    RET(MPI_Type_get_contents(*datatype, *max_integers, *max_addresses, *max_datatypes,
                              array_of_integers, array_of_addresses, H(array_of_datatypes)));
}

FAPI void mpi_pack_(void *inbuf, fint *incount, fint *datatype, void *outbuf, fint *outsize,
                    fint *position, fint *comm, fint *ierr)
{
    RET(MPI_Pack(fbuf(inbuf), *incount, *datatype, outbuf, *outsize, position, *comm));
}

FAPI void mpi_unpack_(void *inbuf, fint *insize, fint *position, void *outbuf, fint *outcount,
                      fint *datatype, fint *comm, fint *ierr)
{
    RET(MPI_Unpack(inbuf, *insize, position, fbuf(outbuf), *outcount, *datatype, *comm));
}

FAPI void mpi_pack_size_(fint *incount, fint *datatype, fint *comm, fint *size, fint *ierr)
{
    RET(MPI_Pack_size(*incount, *datatype, *comm, size));
}

/* ======================================================================== */
/* Cartesian topologies                                                     */
/* ======================================================================== */
/* LOGICAL arrays (periods, remain_dims) are int arrays: passed as they are. */

FAPI void mpi_cart_create_(fint *comm_old, fint *ndims, fint *dims, fint *periods, fint *reorder,
                           fint *comm_cart, fint *ierr)
{
    RET(MPI_Cart_create(*comm_old, *ndims, dims, periods, *reorder != 0, H(comm_cart)));
}

FAPI void mpi_cart_coords_(fint *comm, fint *rank, fint *maxdims, fint *coords, fint *ierr)
{
    RET(MPI_Cart_coords(*comm, *rank, *maxdims, coords));
}

FAPI void mpi_cart_rank_(fint *comm, fint *coords, fint *rank, fint *ierr)
{
    RET(MPI_Cart_rank(*comm, coords, rank));
}

FAPI void mpi_cart_shift_(fint *comm, fint *direction, fint *disp, fint *rank_source,
                          fint *rank_dest, fint *ierr)
{
    RET(MPI_Cart_shift(*comm, *direction, *disp, rank_source, rank_dest));
}

FAPI void mpi_cart_get_(fint *comm, fint *maxdims, fint *dims, fint *periods, fint *coords,
                        fint *ierr)
{
    int rc = MPI_Cart_get(*comm, *maxdims, dims, periods, coords);
    int nd = 0;
    if (rc == MPI_SUCCESS && MPI_Cartdim_get(*comm, &nd) == MPI_SUCCESS)
        for (int i = 0; i < nd && i < *maxdims; i++) periods[i] = FLOGICAL(periods[i]);
    RET(rc);
}

FAPI void mpi_cartdim_get_(fint *comm, fint *ndims, fint *ierr)
{
    RET(MPI_Cartdim_get(*comm, ndims));
}

FAPI void mpi_cart_sub_(fint *comm, fint *remain_dims, fint *newcomm, fint *ierr)
{
    RET(MPI_Cart_sub(*comm, remain_dims, H(newcomm)));
}

FAPI void mpi_dims_create_(fint *nnodes, fint *ndims, fint *dims, fint *ierr)
{
    RET(MPI_Dims_create(*nnodes, *ndims, dims));
}

FAPI void mpi_topo_test_(fint *comm, fint *status, fint *ierr) { RET(MPI_Topo_test(*comm, status)); }
