//! The crate's only `unsafe`: adopting the inherited `PMI_FD` file descriptor.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::error::PmiError;

/// Takes ownership of the inherited descriptor `fd` named by `PMI_FD`, after checking
/// that it is open, and marks it close-on-exec so the rank's own children do not hold the
/// PMI connection open.
///
/// Call at most once per descriptor: the returned `OwnedFd` closes it on drop.
#[allow(unsafe_code)]
pub(crate) fn adopt_inherited_fd(fd: RawFd) -> Result<OwnedFd, PmiError> {
    if fd < 0 {
        return Err(PmiError::Env(format!("PMI_FD={fd} is not a descriptor")));
    }
    // SAFETY: fcntl(F_GETFD) on any integer is memory-safe; it only reports EBADF when
    // `fd` is not open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(PmiError::Env(format!(
            "PMI_FD={fd} is not an open descriptor: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: as above; setting FD_CLOEXEC on an open descriptor touches no memory.
    unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    // SAFETY: `fd` is open (checked above) and owned by nobody else in this process: the
    // launcher created it for this rank and the environment names it only for the PMI
    // client, which adopts it once (`PmiClient::from_env`).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
