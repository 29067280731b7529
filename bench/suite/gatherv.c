/* gb_gatherv: MPI_Gatherv latency; see gather.c. */
#define GB_OP GB_GATHERV
#include "gather.c"
