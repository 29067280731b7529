/* gb_scatter: MPI_Scatter latency; see gather.c. */
#define GB_OP GB_SCATTER
#include "gather.c"
