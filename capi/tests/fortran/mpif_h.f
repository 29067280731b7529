! mpif_h.f -- fixed-form Fortran 77 style test of gmpi's mpif.h and
! Fortran bindings.  Run with any number of processes, e.g.
! mpirun -n 3 ./mpif_h.  Prints "OK mpif_h rank <r>" on success and
! calls MPI_ABORT on a failed check.
      PROGRAM MPIFH
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER IERR, RANK, NPROCS, LEFT, RIGHT, I, J, N, K
      INTEGER STATUS(MPI_STATUS_SIZE), STATS(MPI_STATUS_SIZE, 2)
      INTEGER REQS(2), IBUF(4), JBUF(4), COUNT, ISUM, EXPECT
      INTEGER VTYPE, TSIZE, COLOR, SUBCOMM, SUBRANK, SUBSIZE
      INTEGER DUPCOMM, RESULT, GROUP, EVENGRP, EVENCOMM, NEVEN
      INTEGER RANKS(64), TRANKS(64), GSIZE, GRANK, POS, PSIZE
      INTEGER OUTCNT, INDICES(2), STRUCTT, BLENS(2), TYPES(2)
      INTEGER NI, NA, ND, COMBINER, CINTS(4), CTYPES(2)
      INTEGER(KIND=MPI_ADDRESS_KIND) LB, EXTENT, A1, A2
      INTEGER(KIND=MPI_ADDRESS_KIND) DISPS(2), CADDRS(2)
      DOUBLE PRECISION A(4,3), ROW(3), DV(2), T1
      CHARACTER*64 PACKBUF
! Buffers reached only through MPI_BOTTOM live in a common block, so
! the compiler must assume that MPI calls read and write them.
      INTEGER SI(2)
      DOUBLE PRECISION SD
      COMMON /STRBUF/ SD, SI
      CHARACTER*(MPI_MAX_OBJECT_NAME) TNAME
      LOGICAL FLAG
      COMMON /MYRANK/ RANK

      CALL MPI_INIT(IERR)
      CALL CHKERR(IERR, 'MPI_INIT')
      CALL MPI_COMM_RANK(MPI_COMM_WORLD, RANK, IERR)
      CALL MPI_COMM_SIZE(MPI_COMM_WORLD, NPROCS, IERR)
      CALL CHECK(NPROCS .LE. 64, 'at most 64 ranks supported')
      LEFT = MOD(RANK - 1 + NPROCS, NPROCS)
      RIGHT = MOD(RANK + 1, NPROCS)
      T1 = MPI_WTIME()

! ---- ring with MPI_SENDRECV and MPI_STATUS_IGNORE
      DO I = 1, 4
         IBUF(I) = 10 * RANK + I
         JBUF(I) = -1
      END DO
      CALL MPI_SENDRECV(IBUF, 4, MPI_INTEGER, RIGHT, 5,
     &                  JBUF, 4, MPI_INTEGER, LEFT, 5,
     &                  MPI_COMM_WORLD, MPI_STATUS_IGNORE, IERR)
      CALL CHKERR(IERR, 'MPI_SENDRECV')
      DO I = 1, 4
         CALL CHECK(JBUF(I) .EQ. 10 * LEFT + I, 'sendrecv data')
      END DO

! ---- Probe + Get_count, then Recv with a real status
      CALL MPI_ISEND(IBUF, 3, MPI_INTEGER, RIGHT, 6, MPI_COMM_WORLD,
     &               REQS(1), IERR)
      CALL MPI_PROBE(LEFT, 6, MPI_COMM_WORLD, STATUS, IERR)
      CALL CHKERR(IERR, 'MPI_PROBE')
      CALL CHECK(STATUS(MPI_SOURCE) .EQ. LEFT, 'probe: MPI_SOURCE')
      CALL CHECK(STATUS(MPI_TAG) .EQ. 6, 'probe: MPI_TAG')
      CALL MPI_GET_COUNT(STATUS, MPI_INTEGER, COUNT, IERR)
      CALL CHECK(COUNT .EQ. 3, 'probe: MPI_GET_COUNT')
      CALL MPI_RECV(JBUF, COUNT, MPI_INTEGER, STATUS(MPI_SOURCE),
     &              STATUS(MPI_TAG), MPI_COMM_WORLD, STATUS, IERR)
      CALL CHECK(JBUF(3) .EQ. 10 * LEFT + 3, 'probe: recv data')
      CALL MPI_WAIT(REQS(1), MPI_STATUS_IGNORE, IERR)
      CALL CHKERR(IERR, 'MPI_WAIT')

! ---- Waitall with MPI_STATUSES_IGNORE, Waitsome (1-based)
      CALL MPI_IRECV(JBUF(1), 1, MPI_INTEGER, LEFT, 8,
     &               MPI_COMM_WORLD, REQS(1), IERR)
      CALL MPI_ISEND(RANK, 1, MPI_INTEGER, RIGHT, 8,
     &               MPI_COMM_WORLD, REQS(2), IERR)
      CALL MPI_WAITALL(2, REQS, MPI_STATUSES_IGNORE, IERR)
      CALL CHKERR(IERR, 'MPI_WAITALL')
      CALL CHECK(JBUF(1) .EQ. LEFT, 'waitall data')
      CALL CHECK(REQS(1) .EQ. MPI_REQUEST_NULL .AND.
     &           REQS(2) .EQ. MPI_REQUEST_NULL, 'waitall requests')
      CALL MPI_IRECV(JBUF(2), 1, MPI_INTEGER, RIGHT, 9,
     &               MPI_COMM_WORLD, REQS(1), IERR)
      CALL MPI_ISEND(RANK, 1, MPI_INTEGER, LEFT, 9,
     &               MPI_COMM_WORLD, REQS(2), IERR)
      N = 0
      DO WHILE (N .LT. 2)
         CALL MPI_WAITSOME(2, REQS, OUTCNT, INDICES, STATS, IERR)
         CALL CHKERR(IERR, 'MPI_WAITSOME')
         DO I = 1, OUTCNT
            CALL CHECK(INDICES(I) .GE. 1 .AND. INDICES(I) .LE. 2,
     &                 'waitsome: indices are 1-based')
            CALL CHECK(REQS(INDICES(I)) .EQ. MPI_REQUEST_NULL,
     &                 'waitsome: request freed')
            IF (INDICES(I) .EQ. 1) THEN
               CALL CHECK(STATS(MPI_SOURCE, I) .EQ. RIGHT,
     &                    'waitsome: status of the receive')
            END IF
         END DO
         N = N + OUTCNT
      END DO
      CALL CHECK(JBUF(2) .EQ. RIGHT, 'waitsome data')

! ---- vector datatype: send row RANK+1 of A(4,3) (stride 4)
      DO J = 1, 3
         DO I = 1, 4
            A(I, J) = 100.0D0 * RANK + 10.0D0 * I + J
         END DO
      END DO
      CALL MPI_TYPE_VECTOR(3, 1, 4, MPI_DOUBLE_PRECISION, VTYPE, IERR)
      CALL CHKERR(IERR, 'MPI_TYPE_VECTOR')
      CALL MPI_TYPE_COMMIT(VTYPE, IERR)
      CALL MPI_TYPE_SIZE(VTYPE, TSIZE, IERR)
      CALL CHECK(TSIZE .EQ. 24, 'vector: MPI_TYPE_SIZE')
      CALL MPI_TYPE_GET_EXTENT(VTYPE, LB, EXTENT, IERR)
      CALL CHECK(LB .EQ. 0 .AND. EXTENT .EQ. 72, 'vector: extent')
      K = MOD(RANK, 4) + 1
      CALL MPI_SENDRECV(A(K, 1), 1, VTYPE, RIGHT, 4,
     &                  ROW, 3, MPI_DOUBLE_PRECISION, LEFT, 4,
     &                  MPI_COMM_WORLD, STATUS, IERR)
      CALL CHKERR(IERR, 'vector sendrecv')
      CALL MPI_GET_COUNT(STATUS, MPI_DOUBLE_PRECISION, COUNT, IERR)
      CALL CHECK(COUNT .EQ. 3, 'vector: received count')
      K = MOD(LEFT, 4) + 1
      DO J = 1, 3
         CALL CHECK(ROW(J) .EQ. 100.0D0 * LEFT + 10.0D0 * K + J,
     &              'vector: received row')
      END DO
      CALL MPI_TYPE_SET_NAME(VTYPE, 'row_type', IERR)
      CALL MPI_TYPE_GET_NAME(VTYPE, TNAME, N, IERR)
      CALL CHECK(N .EQ. 8 .AND. TNAME .EQ. 'row_type', 'type name')
      CALL MPI_TYPE_GET_ENVELOPE(VTYPE, NI, NA, ND, COMBINER, IERR)
      CALL CHECK(COMBINER .EQ. MPI_COMBINER_VECTOR .AND. NI .EQ. 3
     &           .AND. NA .EQ. 0 .AND. ND .EQ. 1, 'type envelope')
      CALL MPI_TYPE_GET_CONTENTS(VTYPE, 4, 2, 2, CINTS, CADDRS,
     &                           CTYPES, IERR)
      CALL CHECK(CINTS(1) .EQ. 3 .AND. CINTS(2) .EQ. 1 .AND.
     &           CINTS(3) .EQ. 4 .AND.
     &           CTYPES(1) .EQ. MPI_DOUBLE_PRECISION, 'type contents')
      CALL MPI_TYPE_FREE(VTYPE, IERR)
      CALL CHECK(VTYPE .EQ. MPI_DATATYPE_NULL, 'MPI_TYPE_FREE')

! ---- struct datatype with MPI_GET_ADDRESS and MPI_BOTTOM
      CALL MPI_GET_ADDRESS(SI(1), A1, IERR)
      CALL MPI_GET_ADDRESS(SD, A2, IERR)
      CALL CHECK(A1 .NE. 0 .AND. A2 .NE. 0, 'MPI_GET_ADDRESS')
      CALL CHECK(A1 - A2 .EQ. 8, 'MPI_GET_ADDRESS: common layout')
      BLENS(1) = 2
      BLENS(2) = 1
      DISPS(1) = A1
      DISPS(2) = A2
      TYPES(1) = MPI_INTEGER
      TYPES(2) = MPI_DOUBLE_PRECISION
      CALL MPI_TYPE_CREATE_STRUCT(2, BLENS, DISPS, TYPES, STRUCTT,
     &                            IERR)
      CALL MPI_TYPE_COMMIT(STRUCTT, IERR)
      CALL CHKERR(IERR, 'struct commit')
      IF (RANK .EQ. 0) THEN
         SI(1) = 77
         SI(2) = 78
         SD = 7.5D0
      ELSE
         SI(1) = 0
         SI(2) = 0
         SD = 0.0D0
      END IF
      CALL MPI_BCAST(MPI_BOTTOM, 1, STRUCTT, 0, MPI_COMM_WORLD, IERR)
      CALL CHKERR(IERR, 'MPI_BCAST(MPI_BOTTOM)')
      CALL CHECK(SI(1) .EQ. 77 .AND. SI(2) .EQ. 78 .AND.
     &           SD .EQ. 7.5D0, 'struct bcast from MPI_BOTTOM')
      CALL MPI_TYPE_FREE(STRUCTT, IERR)

! ---- Reduce to root, in-place Allreduce of doubles
      CALL MPI_REDUCE(RANK, ISUM, 1, MPI_INTEGER, MPI_SUM, 0,
     &                MPI_COMM_WORLD, IERR)
      CALL CHKERR(IERR, 'MPI_REDUCE')
      IF (RANK .EQ. 0) THEN
         CALL CHECK(ISUM .EQ. NPROCS * (NPROCS - 1) / 2, 'reduce')
      END IF
      DV(1) = 1.5D0
      DV(2) = RANK
      CALL MPI_ALLREDUCE(MPI_IN_PLACE, DV, 2, MPI_DOUBLE_PRECISION,
     &                   MPI_SUM, MPI_COMM_WORLD, IERR)
      CALL CHKERR(IERR, 'MPI_ALLREDUCE(MPI_IN_PLACE)')
      CALL CHECK(DV(1) .EQ. 1.5D0 * NPROCS .AND.
     &           DV(2) .EQ. 0.5D0 * NPROCS * (NPROCS - 1),
     &           'in-place allreduce')

! ---- Comm_split by parity
      COLOR = MOD(RANK, 2)
      CALL MPI_COMM_SPLIT(MPI_COMM_WORLD, COLOR, -RANK, SUBCOMM, IERR)
      CALL CHKERR(IERR, 'MPI_COMM_SPLIT')
      CALL MPI_COMM_SIZE(SUBCOMM, SUBSIZE, IERR)
      CALL MPI_COMM_RANK(SUBCOMM, SUBRANK, IERR)
      CALL CHECK(SUBSIZE .EQ. (NPROCS + 1 - COLOR) / 2, 'split size')
      CALL CHECK(SUBRANK .EQ. SUBSIZE - 1 - RANK / 2,
     &           'split rank (key = -rank)')
      CALL MPI_ALLREDUCE(1, ISUM, 1, MPI_INTEGER, MPI_SUM, SUBCOMM,
     &                   IERR)
      CALL CHECK(ISUM .EQ. SUBSIZE, 'allreduce on split comm')
      CALL MPI_COMM_FREE(SUBCOMM, IERR)
      CALL CHECK(SUBCOMM .EQ. MPI_COMM_NULL, 'MPI_COMM_FREE')

! ---- Comm_dup / compare, groups and Comm_create
      CALL MPI_COMM_DUP(MPI_COMM_WORLD, DUPCOMM, IERR)
      CALL MPI_COMM_COMPARE(MPI_COMM_WORLD, DUPCOMM, RESULT, IERR)
      CALL CHECK(RESULT .EQ. MPI_CONGRUENT, 'compare dup')
      CALL MPI_COMM_COMPARE(DUPCOMM, DUPCOMM, RESULT, IERR)
      CALL CHECK(RESULT .EQ. MPI_IDENT, 'compare self')
      CALL MPI_COMM_GROUP(DUPCOMM, GROUP, IERR)
      CALL MPI_GROUP_SIZE(GROUP, GSIZE, IERR)
      CALL CHECK(GSIZE .EQ. NPROCS, 'MPI_GROUP_SIZE')
      NEVEN = 0
      DO I = 0, NPROCS - 1, 2
         NEVEN = NEVEN + 1
         RANKS(NEVEN) = I
      END DO
      CALL MPI_GROUP_INCL(GROUP, NEVEN, RANKS, EVENGRP, IERR)
      DO I = 1, NEVEN
         RANKS(I) = I - 1
      END DO
      CALL MPI_GROUP_TRANSLATE_RANKS(EVENGRP, NEVEN, RANKS, GROUP,
     &                               TRANKS, IERR)
      DO I = 1, NEVEN
         CALL CHECK(TRANKS(I) .EQ. 2 * (I - 1), 'translate ranks')
      END DO
      CALL MPI_GROUP_RANK(EVENGRP, GRANK, IERR)
      IF (COLOR .EQ. 0) THEN
         CALL CHECK(GRANK .EQ. RANK / 2, 'group rank (even)')
      ELSE
         CALL CHECK(GRANK .EQ. MPI_UNDEFINED, 'group rank (odd)')
      END IF
      CALL MPI_COMM_CREATE(DUPCOMM, EVENGRP, EVENCOMM, IERR)
      CALL CHKERR(IERR, 'MPI_COMM_CREATE')
      IF (COLOR .EQ. 0) THEN
         CALL MPI_COMM_SIZE(EVENCOMM, GSIZE, IERR)
         CALL CHECK(GSIZE .EQ. NEVEN, 'created comm size')
         CALL MPI_COMM_FREE(EVENCOMM, IERR)
      ELSE
         CALL CHECK(EVENCOMM .EQ. MPI_COMM_NULL, 'not in group')
      END IF
      CALL MPI_GROUP_FREE(EVENGRP, IERR)
      CALL MPI_GROUP_FREE(GROUP, IERR)
      CALL CHECK(GROUP .EQ. MPI_GROUP_NULL, 'MPI_GROUP_FREE')
      CALL MPI_COMM_FREE(DUPCOMM, IERR)

! ---- Pack / Unpack
      POS = 0
      IBUF(1) = RANK
      DV(1) = 2.25D0
      CALL MPI_PACK_SIZE(1, MPI_INTEGER, MPI_COMM_WORLD, PSIZE, IERR)
      CALL CHECK(PSIZE .GE. 4, 'MPI_PACK_SIZE')
      CALL MPI_PACK(IBUF, 1, MPI_INTEGER, PACKBUF, 64, POS,
     &              MPI_COMM_WORLD, IERR)
      CALL MPI_PACK(DV, 1, MPI_DOUBLE_PRECISION, PACKBUF, 64, POS,
     &              MPI_COMM_WORLD, IERR)
      CALL CHKERR(IERR, 'MPI_PACK')
      CALL MPI_SENDRECV_REPLACE(PACKBUF, POS, MPI_PACKED, RIGHT, 2,
     &                          LEFT, 2, MPI_COMM_WORLD, STATUS, IERR)
      CALL CHKERR(IERR, 'MPI_SENDRECV_REPLACE')
      N = POS
      POS = 0
      CALL MPI_UNPACK(PACKBUF, N, POS, JBUF, 1, MPI_INTEGER,
     &                MPI_COMM_WORLD, IERR)
      CALL MPI_UNPACK(PACKBUF, N, POS, DV(2), 1,
     &                MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, IERR)
      CALL CHKERR(IERR, 'MPI_UNPACK')
      CALL CHECK(JBUF(1) .EQ. LEFT .AND. DV(2) .EQ. 2.25D0,
     &           'pack/unpack data')

      CALL CHECK(MPI_WTIME() .GE. T1, 'MPI_WTIME')
      CALL MPI_BARRIER(MPI_COMM_WORLD, IERR)
      WRITE(*, '(A,I0)') 'OK mpif_h rank ', RANK
      CALL MPI_FINALIZE(IERR)
      END

      SUBROUTINE CHECK(COND, MSG)
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      LOGICAL COND
      CHARACTER*(*) MSG
      INTEGER RANK, IERR
      COMMON /MYRANK/ RANK
      IF (.NOT. COND) THEN
         WRITE(*, '(A,I0,A,A)') 'FAIL mpif_h rank ', RANK, ': ', MSG
         CALL MPI_ABORT(MPI_COMM_WORLD, 1, IERR)
         STOP 1
      END IF
      END

      SUBROUTINE CHKERR(IERR, MSG)
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER IERR
      CHARACTER*(*) MSG
      CALL CHECK(IERR .EQ. MPI_SUCCESS, MSG)
      END
