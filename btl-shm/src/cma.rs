//! Cross Memory Attach (`process_vm_readv` / `process_vm_writev`): the
//! single-copy read behind [`gmpi_btl::Btl::get`], the write with which the
//! owner of the data helps a cooperative get (`coop.rs`), and the start-up
//! probes that decide whether they work.
//!
//! Two probes for reading, because two different things can forbid it:
//! - [`self_test`] reads a word of our own process: catches a kernel without
//!   the system call (ENOSYS) or a seccomp filter that rejects it.
//! - [`peer_test`] reads the probe word another local rank published in the
//!   segment: catches ptrace restrictions between processes (Yama
//!   `ptrace_scope`, containers in different pid namespaces, LSMs).
//!
//! Writing needs the same ptrace permission as reading, so [`self_test_write`]
//! (a write into our own memory: a seccomp filter may allow one call and
//! not the other) is its only extra probe.

#![forbid(unsafe_code)]

use std::io;

use crate::segment::{self, Dst};

/// The word every rank publishes for its peers' probe.
static PROBE: u64 = u64::from_le_bytes(*b"gmpi-cma");

/// Address of this process's probe word.
pub(crate) fn probe_addr() -> u64 {
    std::ptr::addr_of!(PROBE) as u64
}

/// Value of the probe word.
pub(crate) const PROBE_VALUE: u64 = u64::from_le_bytes(*b"gmpi-cma");

fn check_pid(pid: u64) -> Result<i32, String> {
    i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("invalid pid {pid} in memory descriptor"))
}

/// Read exactly `dst.len()` bytes at `addr` in process `pid`, looping over
/// partial reads.
pub(crate) fn read_exact(pid: u64, addr: u64, dst: Dst) -> Result<(), String> {
    let pid = check_pid(pid)?;
    let mut done = 0;
    while done < dst.len() {
        let at = addr
            .checked_add(done as u64)
            .ok_or_else(|| format!("address {addr:#x} + {done} overflows"))?;
        match segment::vm_read(pid, at, dst.sub(done, dst.len() - done)) {
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

/// Write exactly the `len` bytes of our memory at `local` to `remote` in
/// process `pid`, looping over partial writes.
pub(crate) fn write_exact(pid: u64, local: u64, remote: u64, len: usize) -> Result<(), String> {
    let pid = check_pid(pid)?;
    let mut done = 0;
    while done < len {
        let (Some(from), Some(to)) = (
            local.checked_add(done as u64),
            remote.checked_add(done as u64),
        ) else {
            return Err(format!("address {local:#x}/{remote:#x} + {done} overflows"));
        };
        match segment::vm_write(pid, from, to, len - done) {
            Ok(0) => {
                return Err(format!(
                    "process_vm_writev to pid {pid} at {to:#x} wrote nothing ({done} of {len} bytes done)"
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "process_vm_writev of {} bytes to pid {pid} at {to:#x}: {e}",
                    len - done
                ))
            }
        }
    }
    Ok(())
}

/// Read our own probe word through the system call.
pub(crate) fn self_test() -> Result<(), String> {
    let mut buf = [0u8; 8];
    read_exact(
        u64::from(std::process::id()),
        probe_addr(),
        Dst::lent(&mut buf),
    )
    .map_err(|e| format!("self test failed: {e}"))?;
    check(buf, PROBE_VALUE)
}

/// Write a word into our own memory through `process_vm_writev`.
pub(crate) fn self_test_write() -> Result<(), String> {
    let src = PROBE_VALUE.to_le_bytes();
    let mut buf = [0u8; 8];
    write_exact(
        u64::from(std::process::id()),
        src.as_ptr() as u64,
        buf.as_mut_ptr() as u64,
        buf.len(),
    )
    .map_err(|e| format!("write self test failed: {e}"))?;
    check(buf, PROBE_VALUE)
}

/// Read the probe word `(addr, expected)` that process `pid` published.
pub(crate) fn peer_test(pid: u64, addr: u64, expected: u64) -> Result<(), String> {
    let mut buf = [0u8; 8];
    read_exact(pid, addr, Dst::lent(&mut buf))?;
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
        read_exact(me, src.as_ptr() as u64 + 777, Dst::lent(&mut dst)).unwrap();
        assert_eq!(dst, &src[777..777 + 1234]);
        read_exact(me, src.as_ptr() as u64, Dst::lent(&mut [])).unwrap();
    }

    #[test]
    fn writes_own_memory_with_offsets() {
        self_test_write().unwrap();
        let src: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let me = u64::from(std::process::id());
        let mut dst = vec![0u8; 5000];
        write_exact(
            me,
            src.as_ptr() as u64 + 777,
            dst.as_mut_ptr() as u64 + 100,
            1234,
        )
        .unwrap();
        assert_eq!(&dst[100..100 + 1234], &src[777..777 + 1234]);
        assert!(dst[..100].iter().chain(&dst[1334..]).all(|&b| b == 0));
        write_exact(me, src.as_ptr() as u64, dst.as_mut_ptr() as u64, 0).unwrap();
        // Unmapped source or destination: an error, never a crash.
        assert!(write_exact(me, 8, dst.as_mut_ptr() as u64, 8).is_err());
        assert!(write_exact(me, src.as_ptr() as u64, 8, 8).is_err());
        assert!(write_exact(0, src.as_ptr() as u64, dst.as_mut_ptr() as u64, 8).is_err());
    }

    #[test]
    fn bad_pid_and_bad_address_fail() {
        let mut dst = [0u8; 8];
        assert!(read_exact(0, probe_addr(), Dst::lent(&mut dst)).is_err());
        assert!(read_exact(u64::MAX, probe_addr(), Dst::lent(&mut dst)).is_err());
        // pid_max is at most 2^22, so this pid cannot exist.
        let e = read_exact(i32::MAX as u64, probe_addr(), Dst::lent(&mut dst)).unwrap_err();
        assert!(e.contains("pid"), "{e}");
        let me = u64::from(std::process::id());
        assert!(
            read_exact(me, 8, Dst::lent(&mut dst)).is_err(),
            "page zero is unmapped"
        );
    }
}
