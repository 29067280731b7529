/* external32 of the types with C padding or a long double: the pair types
 * (MPI_DOUBLE_INT, MPI_SHORT_INT, MPI_LONG_DOUBLE_INT), MPI_LONG_DOUBLE and
 * MPI_C_LONG_DOUBLE_COMPLEX (x86-64's 80-bit extended as IEEE binary128),
 * checked byte by byte against the big-endian encodings MPI 4.0 §13.5.2
 * gives, and unpacked back to the same values. */
#define TEST_NAME "external32_ld"
#include "check.h"
#include <math.h>
#include <string.h>

static void expect_bytes(const unsigned char *got, MPI_Aint n, const char *hex, const char *what)
{
    char buf[1024];
    CHECK(n * 2 < (MPI_Aint)sizeof buf, "%s: too long", what);
    for (MPI_Aint i = 0; i < n; i++) snprintf(buf + 2 * i, 3, "%02x", got[i]);
    CHECK(strcmp(buf, hex) == 0, "%s:\n got  %s\n want %s", what, buf, hex);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    unsigned char out[512];
    MPI_Aint pos, size, p2;

    struct { double v; int i; } di[2] = {{1.5, 7}, {-0.25, 9}}, di2[2];
    pos = 0;
    CHECK_MPI(MPI_Pack_external("external32", di, 2, MPI_DOUBLE_INT, out, sizeof out, &pos));
    CHECK_MPI(MPI_Pack_external_size("external32", 2, MPI_DOUBLE_INT, &size));
    CHECK(pos == 24 && size == 24, "MPI_DOUBLE_INT: %ld bytes, size %ld", (long)pos, (long)size);
    expect_bytes(out, pos, "3ff800000000000000000007bfd000000000000000000009", "MPI_DOUBLE_INT");
    p2 = 0;
    CHECK_MPI(MPI_Unpack_external("external32", out, pos, &p2, di2, 2, MPI_DOUBLE_INT));
    CHECK(di2[1].v == -0.25 && di2[1].i == 9, "MPI_DOUBLE_INT unpacked");

    struct { short v; int i; } si[2] = {{3, 7}, {-4, 9}};
    pos = 0;
    CHECK_MPI(MPI_Pack_external("external32", si, 2, MPI_SHORT_INT, out, sizeof out, &pos));
    expect_bytes(out, pos, "000300000007fffc00000009", "MPI_SHORT_INT");

#if defined(__x86_64__)
    long double x[5] = {1.0L, -2.5L, 1e-4940L, INFINITY, 0.0L}, y[5];
    pos = 0;
    CHECK_MPI(MPI_Pack_external("external32", x, 5, MPI_LONG_DOUBLE, out, sizeof out, &pos));
    CHECK_MPI(MPI_Pack_external_size("external32", 5, MPI_LONG_DOUBLE, &size));
    CHECK(pos == 80 && size == 80, "MPI_LONG_DOUBLE: %ld bytes, size %ld", (long)pos, (long)size);
    expect_bytes(out, 32,
                 "3fff0000000000000000000000000000"
                 "c0004000000000000000000000000000",
                 "MPI_LONG_DOUBLE 1.0L, -2.5L");
    expect_bytes(out + 48, 16, "7fff0000000000000000000000000000", "MPI_LONG_DOUBLE inf");
    p2 = 0;
    CHECK_MPI(MPI_Unpack_external("external32", out, pos, &p2, y, 5, MPI_LONG_DOUBLE));
    for (int i = 0; i < 5; i++) CHECK(x[i] == y[i], "MPI_LONG_DOUBLE [%d] unpacked differs", i);

    struct { long double v; int i; } li[2] = {{1.5L, 7}, {-0.25L, 9}}, li2[2];
    pos = 0;
    CHECK_MPI(MPI_Pack_external("external32", li, 2, MPI_LONG_DOUBLE_INT, out, sizeof out, &pos));
    expect_bytes(out, pos,
                 "3fff8000000000000000000000000000" "00000007"
                 "bffd0000000000000000000000000000" "00000009",
                 "MPI_LONG_DOUBLE_INT");
    p2 = 0;
    CHECK_MPI(MPI_Unpack_external("external32", out, pos, &p2, li2, 2, MPI_LONG_DOUBLE_INT));
    CHECK(li2[0].v == 1.5L && li2[0].i == 7 && li2[1].v == -0.25L && li2[1].i == 9,
          "MPI_LONG_DOUBLE_INT unpacked");

    long double _Complex z = 1.0L - 2.5L * 1.0iL, z2;
    pos = 0;
    CHECK_MPI(MPI_Pack_external("external32", &z, 1, MPI_C_LONG_DOUBLE_COMPLEX, out, sizeof out, &pos));
    expect_bytes(out, pos,
                 "3fff0000000000000000000000000000"
                 "c0004000000000000000000000000000",
                 "MPI_C_LONG_DOUBLE_COMPLEX");
    p2 = 0;
    CHECK_MPI(MPI_Unpack_external("external32", out, pos, &p2, &z2, 1, MPI_C_LONG_DOUBLE_COMPLEX));
    CHECK(z2 == z, "MPI_C_LONG_DOUBLE_COMPLEX unpacked");
#endif

    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
        printf("OK %s\n", TEST_NAME);
    MPI_Finalize();
    return 0;
}
