//! Cross Memory Attach (`process_vm_readv`): the single-copy read behind
//! [`gmpi_btl::Btl::get`], and the start-up probes that decide whether it works.
//!
//! Two probes, because two different things can forbid it:
//! - [`self_test`] reads a word of our own process: catches a kernel without
//!   the system call (ENOSYS) or a seccomp filter that rejects it.
//! - [`peer_test`] reads the probe word another local rank published in the
//!   segment: catches ptrace restrictions between processes (Yama
//!   `ptrace_scope`, containers in different pid namespaces, LSMs).

#![forbid(unsafe_code)]

use std::io;

use crate::segment;

/// The word every rank publishes for its peers' probe.
static PROBE: u64 = u64::from_le_bytes(*b"gmpi-cma");

/// Address of this process's probe word.
pub(crate) fn probe_addr() -> u64 {
    std::ptr::addr_of!(PROBE) as u64
}

/// Value of the probe word.
pub(crate) const PROBE_VALUE: u64 = u64::from_le_bytes(*b"gmpi-cma");

/// Read exactly `dst.len()` bytes at `addr` in process `pid`, looping over
/// partial reads.
pub(crate) fn read_exact(pid: u64, addr: u64, dst: &mut [u8]) -> Result<(), String> {
    let pid = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("invalid pid {pid} in memory descriptor"))?;
    let mut done = 0;
    while done < dst.len() {
        let at = addr
            .checked_add(done as u64)
            .ok_or_else(|| format!("address {addr:#x} + {done} overflows"))?;
        match segment::vm_read(pid, at, &mut dst[done..]) {
            Ok(0) => {
                return Err(format!(
                "process_vm_readv from pid {pid} at {at:#x} read nothing ({done} of {} bytes done)",
                dst.len()
            ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "process_vm_readv of {} bytes from pid {pid} at {at:#x}: {e}",
                    dst.len() - done
                ))
            }
        }
    }
    Ok(())
}

/// Read our own probe word through the system call.
pub(crate) fn self_test() -> Result<(), String> {
    let mut buf = [0u8; 8];
    read_exact(u64::from(std::process::id()), probe_addr(), &mut buf)
        .map_err(|e| format!("self test failed: {e}"))?;
    check(buf, PROBE_VALUE)
}

/// Read the probe word `(addr, expected)` that process `pid` published.
pub(crate) fn peer_test(pid: u64, addr: u64, expected: u64) -> Result<(), String> {
    let mut buf = [0u8; 8];
    read_exact(pid, addr, &mut buf)?;
    check(buf, expected)
}

fn check(buf: [u8; 8], expected: u64) -> Result<(), String> {
    let got = u64::from_le_bytes(buf);
    if got == expected {
        Ok(())
    } else {
        Err(format!(
            "probe word read back as {got:#x}, expected {expected:#x}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_with_offsets() {
        self_test().unwrap();
        let src: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let me = u64::from(std::process::id());
        let mut dst = vec![0u8; 1234];
        read_exact(me, src.as_ptr() as u64 + 777, &mut dst).unwrap();
        assert_eq!(dst, &src[777..777 + 1234]);
        read_exact(me, src.as_ptr() as u64, &mut []).unwrap();
    }

    #[test]
    fn bad_pid_and_bad_address_fail() {
        let mut dst = [0u8; 8];
        assert!(read_exact(0, probe_addr(), &mut dst).is_err());
        assert!(read_exact(u64::MAX, probe_addr(), &mut dst).is_err());
        // pid_max is at most 2^22, so this pid cannot exist.
        let e = read_exact(i32::MAX as u64, probe_addr(), &mut dst).unwrap_err();
        assert!(e.contains("pid"), "{e}");
        let me = u64::from(std::process::id());
        assert!(
            read_exact(me, 8, &mut dst).is_err(),
            "page zero is unmapped"
        );
    }
}
