/* gb_alltoallv: MPI_Alltoallv latency; see gather.c. */
#define GB_OP GB_ALLTOALLV
#include "gather.c"
