//! `MPI_Status` exactly as MPICH lays it out.

use std::ffi::c_int;

use crate::abi::consts::{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_PROC_NULL, MPI_SUCCESS};

/// `MPI_Status` exactly as MPICH lays it out (20 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}

impl MPI_Status {
    /// The status of a completed operation (`MPI_ERROR` left as given).
    pub fn set(&mut self, st: &gmpi::Status) {
        self.MPI_SOURCE = st.source();
        self.MPI_TAG = st.tag();
        self.set_bytes(st.bytes() as u64, st.is_cancelled());
    }

    /// Store the byte count and the cancelled flag.
    pub fn set_bytes(&mut self, bytes: u64, cancelled: bool) {
        self.count_lo = bytes as u32 as c_int;
        self.count_hi_and_cancelled = (((bytes >> 32) as c_int) << 1) | cancelled as c_int;
    }

    /// Bytes received.
    pub fn bytes(&self) -> u64 {
        (self.count_lo as u32 as u64) | (((self.count_hi_and_cancelled as u32 >> 1) as u64) << 32)
    }

    /// Whether the operation was cancelled.
    pub fn cancelled(&self) -> bool {
        self.count_hi_and_cancelled & 1 != 0
    }

    /// The status of an inactive or null request ("empty" in the
    /// standard): any source, any tag, no data.
    pub fn inactive() -> Self {
        Self {
            MPI_SOURCE: MPI_ANY_SOURCE,
            ..Self::empty()
        }
    }

    /// The status of a receive from `MPI_PROC_NULL`.
    pub fn empty() -> Self {
        Self {
            count_lo: 0,
            count_hi_and_cancelled: 0,
            MPI_SOURCE: MPI_PROC_NULL,
            MPI_TAG: MPI_ANY_TAG,
            MPI_ERROR: MPI_SUCCESS,
        }
    }
}
