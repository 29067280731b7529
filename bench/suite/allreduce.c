/* gb_allreduce: MPI_Allreduce (MPI_FLOAT, MPI_SUM) latency; see reduce.c. */
#define GB_ALLREDUCE 1
#include "reduce.c"
