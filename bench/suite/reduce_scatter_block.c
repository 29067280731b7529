/* gb_reduce_scatter_block: MPI_Reduce_scatter_block latency; see reduce_scatter.c. */
#define GB_BLOCK 1
#include "reduce_scatter.c"
