/* Reductions on the character types, as MPICH takes them: MPI_CHAR,
 * MPI_SIGNED_CHAR and MPI_UNSIGNED_CHAR with every arithmetic, logical
 * and bitwise op (OSU's reduction benchmarks reduce MPI_CHAR with
 * MPI_SUM); MPI_BYTE with the bitwise ops only. Any np >= 1. */
#define TEST_NAME "reduce_char"
#include "check.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    MPI_Datatype chars[] = {MPI_CHAR, MPI_SIGNED_CHAR, MPI_UNSIGNED_CHAR};
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND,
                    MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
    for (int t = 0; t < 3; t++) {
        for (int o = 0; o < 10; o++) {
            char in[4] = {1, 2, 3, (char)rank}, out[4] = {0};
            CHECK_MPI(MPI_Allreduce(in, out, 4, chars[t], ops[o], MPI_COMM_WORLD));
            if (ops[o] == MPI_SUM) {
                CHECK(out[0] == (char)size && out[2] == (char)(3 * size),
                      "SUM on type %d: %d %d", t, out[0], out[2]);
            }
            if (ops[o] == MPI_MAX)
                CHECK(out[3] == (char)(size - 1), "MAX on type %d: %d", t, out[3]);
        }
    }
    char in = 6, out = 0;
    CHECK_MPI(MPI_Reduce(&in, &out, 1, MPI_CHAR, MPI_SUM, 0, MPI_COMM_WORLD));
    if (rank == 0) CHECK(out == (char)(6 * size), "Reduce SUM MPI_CHAR %d", out);

    /* MPI_BYTE: bitwise ops only, as in the standard and MPICH */
    CHECK_MPI(MPI_Allreduce(&in, &out, 1, MPI_BYTE, MPI_BOR, MPI_COMM_WORLD));
    CHECK(out == 6, "BOR on MPI_BYTE %d", out);
    int rc = MPI_Allreduce(&in, &out, 1, MPI_BYTE, MPI_SUM, MPI_COMM_WORLD), cls = -1;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OP, "SUM on MPI_BYTE returned %d (class %d)", rc, cls);

    REPORT_OK();
    MPI_Finalize();
    return 0;
}
