/* gb_scatterv: MPI_Scatterv latency; see gather.c. */
#define GB_OP GB_SCATTERV
#include "gather.c"
