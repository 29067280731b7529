! use_mpi.f90 -- Fortran 90 'use mpi' test of the gmpi Fortran bindings.
! Run with any number of processes (>= 1), e.g. mpirun -n 3 ./use_mpi
! Prints "OK use_mpi rank <r>" on success; MPI_Abort on a failed check.

module use_mpi_support
  implicit none
  integer :: my_rank = -1
  integer :: copies = 0, deletes = 0
contains
  subroutine check(cond, msg)
    use mpi
    logical, intent(in) :: cond
    character(len=*), intent(in) :: msg
    integer :: ierr
    if (.not. cond) then
      write(*, '(A,I0,A,A)') 'FAIL use_mpi rank ', my_rank, ': ', msg
      flush(6)
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
      stop 1
    end if
  end subroutine check

  subroutine ok(ierr, what)
    use mpi
    integer, intent(in) :: ierr
    character(len=*), intent(in) :: what
    call check(ierr == MPI_SUCCESS, 'ierror /= MPI_SUCCESS in ' // what)
  end subroutine ok

  ! MPI_COMM_COPY_ATTR_FUNCTION: copies value + 1
  subroutine copy_plus_one(oldcomm, keyval, extra_state, attribute_val_in, &
                           attribute_val_out, flag, ierr)
    use mpi
    integer :: oldcomm, keyval, ierr
    integer(kind=MPI_ADDRESS_KIND) :: extra_state, attribute_val_in, attribute_val_out
    logical :: flag
    if (extra_state /= 42) then
      ierr = MPI_ERR_OTHER
      return
    end if
    attribute_val_out = attribute_val_in + 1
    flag = .true.
    copies = copies + 1
    ierr = MPI_SUCCESS
  end subroutine copy_plus_one

  ! MPI_COMM_DELETE_ATTR_FUNCTION: counts deletions
  subroutine count_delete(comm, keyval, attribute_val, extra_state, ierr)
    use mpi
    integer :: comm, keyval, ierr
    integer(kind=MPI_ADDRESS_KIND) :: attribute_val, extra_state
    deletes = deletes + 1
    ierr = MPI_SUCCESS
  end subroutine count_delete

  ! MPI_USER_FUNCTION: inoutvec = invec + inoutvec for integers
  subroutine my_isum(invec, inoutvec, len, datatype)
    integer :: len, datatype
    integer :: invec(len), inoutvec(len)
    integer :: i
    do i = 1, len
      inoutvec(i) = invec(i) + inoutvec(i)
    end do
  end subroutine my_isum
end module use_mpi_support

program use_mpi_test
  use mpi
  use use_mpi_support
  implicit none
  integer :: ierr, rank, nprocs, left, right, i, c, cnt, idx
  integer :: status(MPI_STATUS_SIZE), statuses(MPI_STATUS_SIZE, 2)
  integer :: req, reqs(2), ival(4), rval(4), isum, imax, iv(3)
  integer :: version, subversion, provided, resultlen, color, subcomm
  integer :: subrank, subsize, expect, result, dupcomm, keyval, myop
  integer :: ndims, dims(1), cartcomm, src, dst, coords(1), cls, vtype, tsize
  integer :: bval(2), gval(64), sval, xval
  integer :: lcomm, icomm, mcomm, rsize, half
  logical :: flag, periods(1), commute
  double precision :: dsum, dv(2), t1, t2
  integer(kind=MPI_ADDRESS_KIND) :: attr, lb, extent
  character(len=MPI_MAX_PROCESSOR_NAME) :: pname
  character(len=MPI_MAX_OBJECT_NAME) :: cname
  character(len=MPI_MAX_ERROR_STRING) :: estr
  character(len=MPI_MAX_LIBRARY_VERSION_STRING) :: libver

  call MPI_Init(ierr)
  call ok(ierr, 'MPI_Init')
  call MPI_Initialized(flag, ierr)
  call check(flag, 'MPI_Initialized returned .false.')
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call ok(ierr, 'MPI_Comm_rank')
  my_rank = rank
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  call ok(ierr, 'MPI_Comm_size')
  call check(nprocs >= 1 .and. rank >= 0 .and. rank < nprocs, 'rank/size')
  call MPI_Get_version(version, subversion, ierr)
  call check(version >= 3, 'MPI_Get_version')
  call MPI_Query_thread(provided, ierr)
  call ok(ierr, 'MPI_Query_thread')
  call check(provided >= MPI_THREAD_SINGLE .and. provided <= MPI_THREAD_MULTIPLE, &
             'MPI_Query_thread value')
  t1 = MPI_Wtime()
  call check(MPI_Wtick() > 0.0d0, 'MPI_Wtick')

  left = mod(rank - 1 + nprocs, nprocs)
  right = mod(rank + 1, nprocs)

  ! ---- ring: Isend right, Recv from MPI_ANY_SOURCE, check the status ----
  do i = 1, 4
    ival(i) = 100 * rank + i
  end do
  rval = -1
  call MPI_Isend(ival, 4, MPI_INTEGER, right, 7, MPI_COMM_WORLD, req, ierr)
  call ok(ierr, 'MPI_Isend')
  call MPI_Recv(rval, 4, MPI_INTEGER, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, status, ierr)
  call ok(ierr, 'MPI_Recv')
  call check(status(MPI_SOURCE) == left, 'ring: status(MPI_SOURCE)')
  call check(status(MPI_TAG) == 7, 'ring: status(MPI_TAG)')
  call MPI_Get_count(status, MPI_INTEGER, cnt, ierr)
  call check(cnt == 4, 'ring: MPI_Get_count')
  do i = 1, 4
    call check(rval(i) == 100 * left + i, 'ring: received data')
  end do
  call MPI_Wait(req, status, ierr)
  call ok(ierr, 'MPI_Wait')
  call check(req == MPI_REQUEST_NULL, 'MPI_Wait: request not MPI_REQUEST_NULL')

  ! ---- Irecv from both neighbours, Waitany (1-based) + Waitall ----
  bval = -1
  call MPI_Irecv(bval(1), 1, MPI_INTEGER, left, 11, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Irecv(bval(2), 1, MPI_INTEGER, right, 12, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Send(rank, 1, MPI_INTEGER, right, 11, MPI_COMM_WORLD, ierr)
  call MPI_Send(rank, 1, MPI_INTEGER, left, 12, MPI_COMM_WORLD, ierr)
  call MPI_Waitany(2, reqs, idx, status, ierr)
  call ok(ierr, 'MPI_Waitany')
  call check(idx == 1 .or. idx == 2, 'MPI_Waitany: index not 1-based')
  call check(reqs(idx) == MPI_REQUEST_NULL, 'MPI_Waitany: completed request')
  call check(status(MPI_TAG) == 10 + idx, 'MPI_Waitany: status(MPI_TAG)')
  call MPI_Waitall(2, reqs, statuses, ierr)
  call ok(ierr, 'MPI_Waitall')
  call check(bval(1) == left .and. bval(2) == right, 'Irecv/Waitall data')
  call MPI_Waitany(2, reqs, idx, status, ierr)
  call ok(ierr, 'MPI_Waitany on null requests')
  ! (MPICH 4.0's own Fortran binding wrongly returns MPI_UNDEFINED + 1)
  call MPI_Get_library_version(libver, resultlen, ierr)
  call ok(ierr, 'MPI_Get_library_version')
  call check(resultlen > 0 .and. len_trim(libver) == resultlen, 'library version string')
  call check(idx == MPI_UNDEFINED .or. (index(libver, 'MPICH') > 0 .and. &
             idx == MPI_UNDEFINED + 1), 'MPI_Waitany on null requests: MPI_UNDEFINED')

  ! ---- Sendrecv ring with doubles ----
  dv(1) = rank + 0.5d0
  call MPI_Sendrecv(dv(1), 1, MPI_DOUBLE_PRECISION, right, 3, dv(2), 1, &
                    MPI_DOUBLE_PRECISION, left, 3, MPI_COMM_WORLD, status, ierr)
  call ok(ierr, 'MPI_Sendrecv')
  call check(dv(2) == left + 0.5d0, 'MPI_Sendrecv data')
  call check(status(MPI_SOURCE) == left, 'MPI_Sendrecv status')

  ! ---- Allreduce (INTEGER, DOUBLE PRECISION) against closed forms ----
  call MPI_Allreduce(rank + 1, isum, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call ok(ierr, 'MPI_Allreduce')
  call check(isum == nprocs * (nprocs + 1) / 2, 'Allreduce INTEGER SUM')
  call MPI_Allreduce(rank + 1, imax, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD, ierr)
  call check(imax == nprocs, 'Allreduce INTEGER MAX')
  call MPI_Allreduce(0.5d0 * rank, dsum, 1, MPI_DOUBLE_PRECISION, MPI_SUM, &
                     MPI_COMM_WORLD, ierr)
  call check(dsum == 0.25d0 * nprocs * (nprocs - 1), 'Allreduce DOUBLE PRECISION SUM')

  ! ---- MPI_IN_PLACE Allreduce ----
  iv = (/ rank, 1, -rank /)
  call MPI_Allreduce(MPI_IN_PLACE, iv, 3, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call ok(ierr, 'MPI_Allreduce(MPI_IN_PLACE)')
  call check(iv(1) == nprocs * (nprocs - 1) / 2 .and. iv(2) == nprocs .and. &
             iv(3) == -(nprocs * (nprocs - 1) / 2), 'Allreduce MPI_IN_PLACE')

  ! ---- user-defined op ----
  call MPI_Op_create(my_isum, .true., myop, ierr)
  call ok(ierr, 'MPI_Op_create')
  call MPI_Op_commutative(myop, commute, ierr)
  call check(commute, 'MPI_Op_commutative')
  iv = (/ rank, 2 * rank, 1 /)
  call MPI_Allreduce(MPI_IN_PLACE, iv, 3, MPI_INTEGER, myop, MPI_COMM_WORLD, ierr)
  call ok(ierr, 'Allreduce with user op')
  call check(iv(1) == nprocs * (nprocs - 1) / 2 .and. iv(2) == nprocs * (nprocs - 1) &
             .and. iv(3) == nprocs, 'user op result')
  call MPI_Op_free(myop, ierr)
  call check(myop == MPI_OP_NULL, 'MPI_Op_free')

  ! ---- Bcast, Gather, Scan, Exscan ----
  xval = -1
  if (rank == 0) xval = 4242
  call MPI_Bcast(xval, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call check(xval == 4242, 'MPI_Bcast')
  call check(nprocs <= 64, 'test supports at most 64 ranks')
  gval = -1
  call MPI_Gather(rank * 3, 1, MPI_INTEGER, gval, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call ok(ierr, 'MPI_Gather')
  if (rank == 0) then
    do i = 1, nprocs
      call check(gval(i) == 3 * (i - 1), 'MPI_Gather data')
    end do
  end if
  call MPI_Scan(rank + 1, sval, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(sval == (rank + 1) * (rank + 2) / 2, 'MPI_Scan')
  sval = -7
  call MPI_Exscan(rank + 1, sval, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank > 0) call check(sval == rank * (rank + 1) / 2, 'MPI_Exscan')

  ! ---- Iallreduce + Test loop, Ibarrier + Wait ----
  call MPI_Iallreduce(rank, isum, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, req, ierr)
  call ok(ierr, 'MPI_Iallreduce')
  flag = .false.
  do while (.not. flag)
    call MPI_Test(req, flag, status, ierr)
    call ok(ierr, 'MPI_Test')
  end do
  call check(isum == nprocs * (nprocs - 1) / 2, 'MPI_Iallreduce')
  call MPI_Ibarrier(MPI_COMM_WORLD, req, ierr)
  call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
  call ok(ierr, 'MPI_Ibarrier/MPI_Wait')

  ! ---- Comm_split by parity ----
  color = mod(rank, 2)
  call MPI_Comm_split(MPI_COMM_WORLD, color, rank, subcomm, ierr)
  call ok(ierr, 'MPI_Comm_split')
  call MPI_Comm_rank(subcomm, subrank, ierr)
  call MPI_Comm_size(subcomm, subsize, ierr)
  if (color == 0) then
    call check(subsize == (nprocs + 1) / 2, 'split: size (even)')
  else
    call check(subsize == nprocs / 2, 'split: size (odd)')
  end if
  call check(subrank == rank / 2, 'split: rank')
  call MPI_Allreduce(rank, isum, 1, MPI_INTEGER, MPI_SUM, subcomm, ierr)
  expect = 0
  do i = color, nprocs - 1, 2
    expect = expect + i
  end do
  call check(isum == expect, 'split: allreduce on the new communicator')
  call MPI_Comm_compare(MPI_COMM_WORLD, subcomm, result, ierr)
  if (nprocs > 1) call check(result == MPI_UNEQUAL, 'MPI_Comm_compare(world, split)')
  call MPI_Comm_set_name(subcomm, 'parity_comm   ', ierr)
  call ok(ierr, 'MPI_Comm_set_name')
  cname = 'garbage'
  call MPI_Comm_get_name(subcomm, cname, resultlen, ierr)
  call check(resultlen == 11 .and. cname == 'parity_comm', 'Comm_get_name after set_name')
  call MPI_Comm_free(subcomm, ierr)
  call check(subcomm == MPI_COMM_NULL, 'MPI_Comm_free')

  ! ---- names ----
  pname = 'x'
  call MPI_Get_processor_name(pname, resultlen, ierr)
  call ok(ierr, 'MPI_Get_processor_name')
  call check(resultlen > 0 .and. resultlen <= MPI_MAX_PROCESSOR_NAME, &
             'processor name length')
  call check(len_trim(pname) == resultlen, 'processor name is blank-padded')
  cname = 'x'
  call MPI_Comm_get_name(MPI_COMM_WORLD, cname, resultlen, ierr)
  call ok(ierr, 'MPI_Comm_get_name')
  call check(cname == 'MPI_COMM_WORLD' .and. resultlen == 14, 'name of MPI_COMM_WORLD')
  call MPI_Error_class(MPI_ERR_TAG, cls, ierr)
  call check(cls == MPI_ERR_TAG, 'MPI_Error_class')
  call MPI_Error_string(MPI_ERR_TAG, estr, resultlen, ierr)
  call check(resultlen > 0 .and. len_trim(estr) == resultlen, 'MPI_Error_string')

  ! ---- attributes ----
  call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, attr, flag, ierr)
  call ok(ierr, 'MPI_Comm_get_attr(MPI_TAG_UB)')
  call check(flag .and. attr >= 32767, 'MPI_TAG_UB value')
  call MPI_Comm_create_keyval(copy_plus_one, count_delete, keyval, 42_MPI_ADDRESS_KIND, ierr)
  call ok(ierr, 'MPI_Comm_create_keyval')
  call MPI_Comm_dup(MPI_COMM_WORLD, dupcomm, ierr)
  call MPI_Comm_set_attr(dupcomm, keyval, 12345678901_MPI_ADDRESS_KIND, ierr)
  call ok(ierr, 'MPI_Comm_set_attr')
  call MPI_Comm_get_attr(dupcomm, keyval, attr, flag, ierr)
  call check(flag .and. attr == 12345678901_MPI_ADDRESS_KIND, 'get user attribute')
  call MPI_Comm_dup(dupcomm, subcomm, ierr)
  call check(copies == 1, 'copy callback ran once')
  call MPI_Comm_get_attr(subcomm, keyval, attr, flag, ierr)
  call check(flag .and. attr == 12345678902_MPI_ADDRESS_KIND, 'copied attribute')
  call MPI_Comm_compare(dupcomm, subcomm, result, ierr)
  call check(result == MPI_CONGRUENT, 'MPI_Comm_compare(dup, dup)')
  call MPI_Comm_free(subcomm, ierr)
  call check(deletes == 1, 'delete callback on MPI_Comm_free')
  call MPI_Comm_delete_attr(dupcomm, keyval, ierr)
  call check(deletes == 2, 'delete callback on MPI_Comm_delete_attr')
  call MPI_Comm_get_attr(dupcomm, keyval, attr, flag, ierr)
  call check(.not. flag, 'attribute deleted')
  call MPI_Comm_free_keyval(keyval, ierr)
  call check(keyval == MPI_KEYVAL_INVALID, 'MPI_Comm_free_keyval')
  call MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, keyval, &
                              0_MPI_ADDRESS_KIND, ierr)
  call MPI_Comm_set_attr(dupcomm, keyval, -5_MPI_ADDRESS_KIND, ierr)
  call MPI_Comm_dup(dupcomm, subcomm, ierr)
  call MPI_Comm_get_attr(subcomm, keyval, attr, flag, ierr)
  call check(flag .and. attr == -5, 'MPI_COMM_DUP_FN copies the value')
  call MPI_Comm_free(subcomm, ierr)
  call MPI_Comm_free_keyval(keyval, ierr)
  call MPI_Comm_free(dupcomm, ierr)

  ! ---- a derived datatype ----
  call MPI_Type_contiguous(3, MPI_DOUBLE_PRECISION, vtype, ierr)
  call MPI_Type_commit(vtype, ierr)
  call MPI_Type_size(vtype, tsize, ierr)
  call check(tsize == 24, 'MPI_Type_size(contiguous)')
  call MPI_Type_get_extent(vtype, lb, extent, ierr)
  call check(lb == 0 .and. extent == 24, 'MPI_Type_get_extent(contiguous)')
  call MPI_Type_free(vtype, ierr)
  call check(vtype == MPI_DATATYPE_NULL, 'MPI_Type_free')

  ! ---- 1-D periodic Cartesian topology: shift == ring ----
  dims(1) = 0
  call MPI_Dims_create(nprocs, 1, dims, ierr)
  call check(dims(1) == nprocs, 'MPI_Dims_create')
  periods(1) = .true.
  call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., cartcomm, ierr)
  call ok(ierr, 'MPI_Cart_create')
  call MPI_Topo_test(cartcomm, c, ierr)
  call check(c == MPI_CART, 'MPI_Topo_test')
  call MPI_Cartdim_get(cartcomm, ndims, ierr)
  call check(ndims == 1, 'MPI_Cartdim_get')
  call MPI_Cart_shift(cartcomm, 0, 1, src, dst, ierr)
  call check(src == left .and. dst == right, 'MPI_Cart_shift')
  periods(1) = .false.
  call MPI_Cart_get(cartcomm, 1, dims, periods, coords, ierr)
  call check(periods(1) .and. coords(1) == rank .and. dims(1) == nprocs, 'MPI_Cart_get')
  call MPI_Comm_free(cartcomm, ierr)

  ! intercommunicator between the low and the high half of the world
  if (nprocs >= 2) then
    half = nprocs / 2
    call MPI_Comm_split(MPI_COMM_WORLD, min(rank / half, 1), rank, lcomm, ierr)
    call ok(ierr, 'MPI_Comm_split (halves)')
    if (rank < half) then
      call MPI_Intercomm_create(lcomm, 0, MPI_COMM_WORLD, half, 9, icomm, ierr)
    else
      call MPI_Intercomm_create(lcomm, 0, MPI_COMM_WORLD, 0, 9, icomm, ierr)
    end if
    call ok(ierr, 'MPI_Intercomm_create')
    call MPI_Comm_test_inter(icomm, flag, ierr)
    call MPI_Comm_remote_size(icomm, rsize, ierr)
    if (rank < half) then
      call check(flag .and. rsize == nprocs - half, 'MPI_Comm_remote_size')
    else
      call check(flag .and. rsize == half, 'MPI_Comm_remote_size')
    end if
    call MPI_Allreduce(1, isum, 1, MPI_INTEGER, MPI_SUM, icomm, ierr)
    call check(ierr == MPI_SUCCESS .and. isum == rsize, 'MPI_Allreduce on an intercommunicator')
    call MPI_Intercomm_merge(icomm, rank >= half, mcomm, ierr)
    call ok(ierr, 'MPI_Intercomm_merge')
    call MPI_Comm_rank(mcomm, c, ierr)
    call check(c == rank, 'MPI_Intercomm_merge: rank')
    call MPI_Comm_free(mcomm, ierr)
    call MPI_Comm_free(icomm, ierr)
    call MPI_Comm_free(lcomm, ierr)
  end if

  t2 = MPI_Wtime()
  call check(t2 >= t1, 'MPI_Wtime is monotonic')
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call ok(ierr, 'MPI_Barrier')
  write(*, '(A,I0)') 'OK use_mpi rank ', rank
  call MPI_Finalize(ierr)
  call ok(ierr, 'MPI_Finalize')
end program use_mpi_test
