/* gb_allgatherv: MPI_Allgatherv latency; see gather.c. */
#define GB_OP GB_ALLGATHERV
#include "gather.c"
