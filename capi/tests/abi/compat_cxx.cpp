/*
 * Compile-only check that gmpi's mpi.h is usable from C++:
 *   g++ -Wall -Werror -pedantic -c compat_cxx.cpp
 * Same generated body as compat_c99.c, plus a few C++-specific uses.
 */
#include <mpi.h>

namespace {

int use_all()
{
    MPI_Status st = MPI_Status();
    st.MPI_SOURCE = MPI_ANY_SOURCE;
#include "use_names.h"
    return st.MPI_SOURCE;
}

// Handles must be usable as case labels and in constant expressions.
int classify(MPI_Op op)
{
    switch (op) {
    case MPI_SUM: return 1;
    case MPI_MAXLOC: return 2;
    default: return 0;
    }
}

const MPI_Datatype pair_types[] = { MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_2INT };

} // namespace

extern "C" int gmpi_compat_cxx();

int gmpi_compat_cxx()
{
    return use_all() + classify(MPI_SUM) + static_cast<int>(sizeof(pair_types));
}
