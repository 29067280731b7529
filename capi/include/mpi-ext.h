/*
 * gmpi -- <mpi-ext.h>: Open MPI's extension header, for CUDA-aware programs
 * that include it to find the CUDA-awareness query.
 *
 * As in an Open MPI built with CUDA:
 *
 *   MPIX_CUDA_AWARE_SUPPORT is 1 at compile time: gmpi is CUDA-aware by
 *   build (it loads the CUDA driver at run time, where there is one);
 *
 *   MPIX_Query_cuda_support() answers at run time: 1 when the CUDA driver
 *   is loaded with a device, 0 under GMPI_CUDA=off or without libcuda or a
 *   device.  It may be called before MPI_Init (the driver is then probed as
 *   MPI_Init would, without creating a context) and after MPI_Finalize.
 *
 * The query itself, and MPICH's MPIX_GPU_query_support, are declared in
 * <mpi.h> (section 21), so programs written for MPICH need not include this
 * file.
 */

#ifndef GMPI_MPI_EXT_H_INCLUDED
#define GMPI_MPI_EXT_H_INCLUDED

#include <mpi.h>

/* Open MPI's "cuda" extension is present ... */
#define OMPI_HAVE_MPI_EXT_CUDA 1
/* ... and the library was built CUDA-aware. */
#define MPIX_CUDA_AWARE_SUPPORT 1

#endif /* GMPI_MPI_EXT_H_INCLUDED */
