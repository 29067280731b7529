/* MPIX_C_FLOAT16 (MPICH's half-precision handle): a predefined type of 2
 * bytes that MPI_Type_dup, MPI_Type_get_name and the reductions on
 * floating-point types (sum, product, min, max) accept, and the logical and
 * bitwise ones refuse. Values are IEEE binary16 bit patterns in uint16_t, so
 * the test needs no C half-precision type. Any np. */
#define TEST_NAME "float16"
#include "check.h"
#include <stdint.h>
#include <string.h>

/* binary16 of small integers 0..8 and of 0.5 */
static const uint16_t H[9] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400,
                              0x4500, 0x4600, 0x4700, 0x4800};
#define HALF 0x3800

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int sz;
    CHECK_MPI(MPI_Type_size(MPIX_C_FLOAT16, &sz));
    CHECK(sz == 2, "MPI_Type_size(MPIX_C_FLOAT16) = %d", sz);
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    CHECK_MPI(MPI_Type_get_name(MPIX_C_FLOAT16, name, &len));
    CHECK(strcmp(name, "MPIX_C_FLOAT16") == 0, "its name is %s", name);
    MPI_Datatype dup;
    CHECK_MPI(MPI_Type_dup(MPIX_C_FLOAT16, &dup));
    CHECK_MPI(MPI_Type_size(dup, &sz));
    CHECK(sz == 2, "a dup's size is %d", sz);

    if (size <= 8) {
        uint16_t one[3] = {H[1], H[1], HALF}, sum[3];
        CHECK_MPI(MPI_Allreduce(one, sum, 3, dup, MPI_SUM, MPI_COMM_WORLD));
        CHECK(sum[0] == H[size] && sum[1] == H[size], "sum of %d ones: %#x", size, sum[0]);
        uint16_t mine = H[rank % 9], mx, mn;
        CHECK_MPI(MPI_Allreduce(&mine, &mx, 1, MPIX_C_FLOAT16, MPI_MAX, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Allreduce(&mine, &mn, 1, MPIX_C_FLOAT16, MPI_MIN, MPI_COMM_WORLD));
        CHECK(mx == H[size - 1] && mn == H[0], "max %#x min %#x", mx, mn);
        uint16_t two = H[2], prod;
        CHECK_MPI(MPI_Reduce(&two, &prod, 1, MPIX_C_FLOAT16, MPI_PROD, 0, MPI_COMM_WORLD));
        if (rank == 0 && size <= 3)
            CHECK(prod == H[1 << size], "2^%d is %#x", size, prod);
    }
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    uint16_t a = H[1], b;
    int rc = MPI_Allreduce(&a, &b, 1, MPIX_C_FLOAT16, MPI_BAND, MPI_COMM_WORLD), cls = 0;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OP, "MPI_BAND on MPIX_C_FLOAT16: class %d", cls);
    CHECK_MPI(MPI_Type_free(&dup));
    if (rank == 0)
        printf("OK %s\n", TEST_NAME);
    MPI_Finalize();
    return 0;
}
