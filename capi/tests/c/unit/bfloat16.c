/* MPIX_BFLOAT16 (MPICH 5's bfloat16 handle, 0x4c00024c): a predefined type
 * of 2 bytes that MPI_Type_dup, MPI_Type_get_name and the reductions on
 * floating-point types (sum, product, min, max) accept, and the bitwise
 * ones refuse. Values are bfloat16 bit patterns (the upper half of a
 * float) in uint16_t. Rounding: 256 + 1 is halfway between the neighbours
 * 256 and 258 and goes to the even one, 256. Any np. */
#define TEST_NAME "bfloat16"
#include "check.h"
#include <stdint.h>
#include <string.h>

#ifndef MPIX_BFLOAT16
#define MPIX_BFLOAT16 ((MPI_Datatype)0x4c00024c)
#endif

static uint16_t bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* exact for the values used here */
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int sz;
    CHECK_MPI(MPI_Type_size(MPIX_BFLOAT16, &sz));
    CHECK(sz == 2, "MPI_Type_size(MPIX_BFLOAT16) = %d", sz);
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    CHECK_MPI(MPI_Type_get_name(MPIX_BFLOAT16, name, &len));
    CHECK(strcmp(name, "MPIX_BFLOAT16") == 0, "its name is %s", name);
    MPI_Datatype dup;
    CHECK_MPI(MPI_Type_dup(MPIX_BFLOAT16, &dup));

    uint16_t one[2] = {bf(1.0f), bf(0.5f)}, sum[2];
    CHECK_MPI(MPI_Allreduce(one, sum, 2, dup, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum[0] == bf((float)size) && sum[1] == bf(0.5f * size), "sum of %d ones: %#x %#x",
          size, sum[0], sum[1]);
    uint16_t mine = bf((float)rank - 1.5f), mx, mn;
    CHECK_MPI(MPI_Allreduce(&mine, &mx, 1, MPIX_BFLOAT16, MPI_MAX, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(&mine, &mn, 1, MPIX_BFLOAT16, MPI_MIN, MPI_COMM_WORLD));
    CHECK(mx == bf((float)size - 2.5f) && mn == bf(-1.5f), "max %#x min %#x", mx, mn);
    if (size >= 2) {
        /* 256 on rank 0, 1 on the others: the sum rounds to even at the first step. */
        uint16_t v = rank == 0 ? bf(256.0f) : bf(1.0f), r;
        MPI_Comm two;
        MPI_Comm_split(MPI_COMM_WORLD, rank < 2, rank, &two);
        if (rank < 2) {
            CHECK_MPI(MPI_Allreduce(&v, &r, 1, MPIX_BFLOAT16, MPI_SUM, two));
            CHECK(r == bf(256.0f), "256 + 1 in bfloat16: %#x", r);
        }
        MPI_Comm_free(&two);
    }
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    uint16_t a = bf(1.0f), b;
    int rc = MPI_Allreduce(&a, &b, 1, MPIX_BFLOAT16, MPI_BXOR, MPI_COMM_WORLD), cls = 0;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OP, "MPI_BXOR on MPIX_BFLOAT16: class %d", cls);
    CHECK_MPI(MPI_Type_free(&dup));
    if (rank == 0)
        printf("OK %s\n", TEST_NAME);
    MPI_Finalize();
    return 0;
}
