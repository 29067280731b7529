! module mpi -- gmpi's Fortran 90 'use mpi' module.
!
! It carries exactly the definitions of mpif.h (included below), so
! 'use mpi' and "include 'mpif.h'" share one list of constants,
! handles and special common blocks.  No explicit interfaces are
! provided: calls are resolved against the C bindings in fbind.c
! (mpi_send_ etc.), exactly as with mpif.h.
!
! Build: gfortran -c -J<moddir> mpi.f90   (produces <moddir>/mpi.mod)
module mpi
  implicit none
  include 'mpif.h'
end module mpi
