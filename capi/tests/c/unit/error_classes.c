/* Error classes and codes: every predefined class of the MPICH ABI is
 * known to MPI_Error_class and MPI_Error_string (up to MPI_ERR_ERRHANDLER,
 * 80, the last class of MPICH 4.1+); classes and codes added at run time
 * are numbered as MPICH numbers them (above MPI_ERR_LASTCODE), have the
 * empty string, and MPI_LASTUSEDCODE follows them. Any np >= 1. */
#define TEST_NAME "error_classes"
#include "check.h"
#include <string.h>

/* The predefined classes of MPICH's header (the ones newer than the header
 * this is built against by number). */
static const int predefined[] = {
    MPI_SUCCESS, MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_TAG, MPI_ERR_COMM,
    MPI_ERR_RANK, MPI_ERR_ROOT, MPI_ERR_GROUP, MPI_ERR_OP, MPI_ERR_TOPOLOGY, MPI_ERR_DIMS,
    MPI_ERR_ARG, MPI_ERR_UNKNOWN, MPI_ERR_TRUNCATE, MPI_ERR_OTHER, MPI_ERR_INTERN,
    MPI_ERR_IN_STATUS, MPI_ERR_PENDING, MPI_ERR_REQUEST, MPI_ERR_ACCESS, MPI_ERR_AMODE,
    MPI_ERR_BAD_FILE, MPI_ERR_CONVERSION, MPI_ERR_DUP_DATAREP, MPI_ERR_FILE_EXISTS,
    MPI_ERR_FILE_IN_USE, MPI_ERR_FILE, MPI_ERR_INFO, MPI_ERR_INFO_KEY, MPI_ERR_INFO_VALUE,
    MPI_ERR_INFO_NOKEY, MPI_ERR_IO, MPI_ERR_NAME, MPI_ERR_NO_MEM, MPI_ERR_NOT_SAME,
    MPI_ERR_NO_SPACE, MPI_ERR_NO_SUCH_FILE, MPI_ERR_PORT, MPI_ERR_QUOTA, MPI_ERR_READ_ONLY,
    MPI_ERR_SERVICE, MPI_ERR_SPAWN, MPI_ERR_UNSUPPORTED_DATAREP, MPI_ERR_UNSUPPORTED_OPERATION,
    MPI_ERR_WIN, MPI_ERR_BASE, MPI_ERR_LOCKTYPE, MPI_ERR_KEYVAL, MPI_ERR_RMA_CONFLICT,
    MPI_ERR_RMA_SYNC, MPI_ERR_SIZE, MPI_ERR_DISP, MPI_ERR_ASSERT, MPI_ERR_RMA_RANGE,
    MPI_ERR_RMA_ATTACH, MPI_ERR_RMA_SHARED, MPI_ERR_RMA_FLAVOR, MPI_T_ERR_MEMORY,
    MPI_T_ERR_NOT_INITIALIZED, MPI_T_ERR_CANNOT_INIT, MPI_T_ERR_INVALID_INDEX,
    MPI_T_ERR_INVALID_ITEM, MPI_T_ERR_INVALID_HANDLE, MPI_T_ERR_OUT_OF_HANDLES,
    MPI_T_ERR_OUT_OF_SESSIONS, MPI_T_ERR_INVALID_SESSION, MPI_T_ERR_CVAR_SET_NOT_NOW,
    MPI_T_ERR_CVAR_SET_NEVER, MPI_T_ERR_PVAR_NO_STARTSTOP, MPI_T_ERR_PVAR_NO_WRITE,
    MPI_T_ERR_PVAR_NO_ATOMIC, MPI_T_ERR_INVALID_NAME, MPI_T_ERR_INVALID, MPI_ERR_SESSION,
    MPI_ERR_PROC_ABORTED, MPI_ERR_VALUE_TOO_LARGE, MPI_T_ERR_NOT_SUPPORTED,
    79 /* MPI_T_ERR_NOT_ACCESSIBLE */, 80 /* MPI_ERR_ERRHANDLER */,
};

static void test_predefined(void)
{
    for (size_t k = 0; k < sizeof predefined / sizeof predefined[0]; k++) {
        int c = predefined[k], cls = -1, len = -1;
        char msg[MPI_MAX_ERROR_STRING];
        CHECK_MPI(MPI_Error_class(c, &cls));
        CHECK(cls == c, "Error_class(%d) = %d", c, cls);
        CHECK_MPI(MPI_Error_string(c, msg, &len));
        CHECK(len > 0 && (int)strlen(msg) == len, "Error_string(%d) empty", c);
    }
}

static int lastused(void)
{
    int *v = NULL, flag = 0;
    CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &v, &flag));
    CHECK(flag && v, "MPI_LASTUSEDCODE not set");
    return flag && v ? *v : -1;
}

static void expect_string(int code, const char *want)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = -1;
    msg[0] = 'X';
    CHECK_MPI(MPI_Error_string(code, msg, &len));
    CHECK(len == (int)strlen(want) && strcmp(msg, want) == 0,
          "Error_string(%#x) = '%s' (len %d), expected '%s'", code, msg, len, want);
}

static void test_dynamic(void)
{
    /* Before any is added, MPI_LASTUSEDCODE is MPI_ERR_LASTCODE. */
    CHECK(lastused() == MPI_ERR_LASTCODE, "initial MPI_LASTUSEDCODE %#x", lastused());

    int c1, c2, k1, k2, k3, cls;
    CHECK_MPI(MPI_Add_error_class(&c1));
    CHECK(c1 > MPI_ERR_LASTCODE, "new class %#x is not above MPI_ERR_LASTCODE", c1);
    CHECK(lastused() == c1, "MPI_LASTUSEDCODE %#x after new class %#x", lastused(), c1);
    CHECK_MPI(MPI_Error_class(c1, &cls));
    CHECK(cls == c1, "Error_class(new class %#x) = %#x", c1, cls);
    expect_string(c1, "");

    CHECK_MPI(MPI_Add_error_code(c1, &k1));
    CHECK(k1 != c1 && k1 > MPI_ERR_LASTCODE, "new code %#x of class %#x", k1, c1);
    /* (MPICH 4.0 leaves MPI_LASTUSEDCODE at the last class.) */
    CHECK_KNOWN_BUG(lastused() >= k1, "MPI_LASTUSEDCODE %#x below new code %#x", lastused(), k1);
    CHECK_MPI(MPI_Error_class(k1, &cls));
    CHECK(cls == c1, "Error_class(new code %#x) = %#x, expected %#x", k1, cls, c1);
    expect_string(k1, "");

    CHECK_MPI(MPI_Add_error_class(&c2));
    CHECK(c2 > MPI_ERR_LASTCODE && c2 != c1, "second class %#x", c2);
    CHECK(lastused() >= c2, "MPI_LASTUSEDCODE %#x below %#x", lastused(), c2);
    CHECK_KNOWN_BUG(lastused() >= k1, "MPI_LASTUSEDCODE %#x below %#x", lastused(), k1);

    /* a code of a predefined class */
    CHECK_MPI(MPI_Add_error_code(MPI_ERR_COMM, &k2));
    CHECK(k2 != MPI_ERR_COMM, "new code of MPI_ERR_COMM is %#x", k2);
    CHECK_MPI(MPI_Error_class(k2, &cls));
    CHECK(cls == MPI_ERR_COMM, "Error_class(%#x) = %d", k2, cls);
    CHECK(lastused() >= k2, "MPI_LASTUSEDCODE %#x below %#x", lastused(), k2);

    CHECK_MPI(MPI_Add_error_code(c2, &k3));
    CHECK_MPI(MPI_Add_error_string(k3, "third code"));
    expect_string(k3, "third code");
    CHECK_MPI(MPI_Add_error_string(c2, "second class"));
    expect_string(c2, "second class");
    expect_string(c1, "");
    CHECK_KNOWN_BUG(lastused() >= k3, "MPI_LASTUSEDCODE %#x below %#x", lastused(), k3);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    test_predefined();
    test_dynamic();
    REPORT_OK();
    MPI_Finalize();
    return 0;
}
