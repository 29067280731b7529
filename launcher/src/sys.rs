//! Operating-system plumbing of gmpirun; the crate's only `unsafe` is here.
//!
//! Signals are taken through a `signalfd` (they are blocked in gmpirun and unblocked
//! again in each child before `exec`), children (ranks, proxies, launch agents) are made
//! leaders of their own process group and are killed by the kernel if their parent dies
//! (`PR_SET_PDEATHSIG`), and a rank keeps exactly one inherited descriptor: its PMI
//! socket. Also here: `poll` and `waitpid` (for `reactor.rs`), `/proc` scans for
//! children, `/dev/shm` cleanup, the host's name and interface addresses.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::sys::signal::{killpg, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// `poll` the descriptors `fds`, one per token in `tokens`, for at most `timeout`
/// (`None` blocks): the tokens that have events, with their events. An interrupted
/// `poll` (EINTR) reports none. The one wait of gmpirun's event loop (`reactor.rs`).
pub fn poll_tokens<T>(
    tokens: Vec<T>,
    fds: &mut [PollFd<'_>],
    timeout: Option<Duration>,
) -> nix::Result<Vec<(T, PollFlags)>> {
    let timeout = match timeout {
        None => PollTimeout::NONE,
        Some(d) => PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX),
    };
    match poll(fds, timeout) {
        Ok(_) | Err(Errno::EINTR) => {}
        Err(e) => return Err(e),
    }
    Ok(tokens
        .into_iter()
        .zip(fds.iter())
        .filter_map(|(t, fd)| fd.revents().filter(|r| !r.is_empty()).map(|r| (t, r)))
        .collect())
}

/// Waits until `fd` has one of `events` or `deadline` passes: whether it has (an
/// interrupted wait says no). For the handshakes, before an event loop runs.
pub fn wait_fd(fd: BorrowedFd<'_>, events: PollFlags, deadline: Instant) -> nix::Result<bool> {
    let wait = deadline.saturating_duration_since(Instant::now());
    let mut fds = [PollFd::new(fd, events)];
    Ok(!poll_tokens(vec![()], &mut fds, Some(wait))?.is_empty())
}

/// The signals gmpirun handles through its signalfd.
pub const HANDLED_SIGNALS: [Signal; 4] = [
    Signal::SIGCHLD,
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
];

/// Blocks [`HANDLED_SIGNALS`] in this (single-threaded) process and returns a
/// non-blocking signalfd that reports them.
pub fn signal_fd() -> io::Result<SignalFd> {
    let mut set = SigSet::empty();
    for sig in HANDLED_SIGNALS {
        set.add(sig);
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
    Ok(SignalFd::with_flags(
        &set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?)
}

/// A connected pair of Unix stream sockets, both close-on-exec: `(launcher end, rank end)`.
pub fn pmi_socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?)
}

/// Puts `fd` in non-blocking mode (only for descriptors gmpirun alone owns: never its
/// own stdin/stdout, whose open file description the invoking shell shares).
pub fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    let fd = fd.as_fd();
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Makes the child of `cmd` the leader of a new process group, lets it inherit `pmi_fd`
/// (which is close-on-exec in gmpirun, so no other child gets it), and unblocks every
/// signal in it before `exec`; binds it to `cpus` when given (`bind.rs`), so every
/// thread the program starts inherits the mask.
pub fn prepare_child(cmd: &mut Command, pmi_fd: RawFd, cpus: Option<CpuSet>) {
    prepare(cmd, Some(pmi_fd), cpus);
}

/// As [`prepare_child`] for a helper process (a proxy, or the launch agent that starts
/// one): own process group (a Ctrl-C at the terminal reaches gmpirun alone, which ends
/// the job in order), killed if gmpirun dies, no descriptor inherited.
pub fn prepare_helper(cmd: &mut Command) {
    prepare(cmd, None, None);
}

fn prepare(cmd: &mut Command, pmi_fd: Option<RawFd>, cpus: Option<CpuSet>) {
    cmd.process_group(0);
    let parent = std::process::id() as libc::pid_t;
    let hook = move || -> io::Result<()> {
        // If gmpirun itself is killed (SIGKILL leaves it no chance to clean up),
        // the kernel kills its ranks: no orphan keeps running.
        // SAFETY: prctl with integer arguments touches no memory.
        if unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
        // gmpirun may have died between fork and the prctl above.
        // SAFETY: getppid has no arguments and cannot fail.
        if unsafe { libc::getppid() } != parent {
            return Err(io::Error::other("gmpirun exited while starting the rank"));
        }
        if let Some(pmi_fd) = pmi_fd {
            // SAFETY: fcntl on an integer descriptor touches no memory; `pmi_fd` is open
            // in the child because fork copied it from the parent, which holds it until
            // spawn returns.
            let flags = unsafe { libc::fcntl(pmi_fd, libc::F_GETFD) };
            if flags < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: as above.
            if unsafe { libc::fcntl(pmi_fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(set) = &cpus {
            // The set was built before the fork; this is one system call.
            sched_setaffinity(Pid::from_raw(0), set)?;
        }
        SigSet::empty().thread_set_mask()?;
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec and only makes async-signal-safe system
    // calls (prctl, getppid, fcntl, sched_setaffinity, sigprocmask); it allocates nothing and takes no lock
    // (the `io::Error::other` of the parent-died path allocates, but then the child is
    // about to report failure and exit).
    unsafe { cmd.pre_exec(hook) };
}

/// Makes gmpirun the reaper of orphaned descendants of its ranks, so none is left
/// behind as a zombie or escapes the end-of-job cleanup unseen.
pub fn become_subreaper() {
    // Best effort: without it orphans go to init, which reaps them.
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Sends `sig` to process group `pgid`; `false` when the group no longer exists.
pub fn signal_group(pgid: Pid, sig: Signal) -> bool {
    !matches!(killpg(pgid, sig), Err(Errno::ESRCH))
}

/// Whether process group `pgid` still has members (zombies included).
pub fn group_exists(pgid: Pid) -> bool {
    !matches!(killpg(pgid, None), Err(Errno::ESRCH))
}

/// How a child ended, as `waitpid` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// Exited with this status.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

impl ExitKind {
    /// `exited with status N` / `was killed by signal N (SIGX)`.
    pub fn describe(self) -> String {
        match self {
            ExitKind::Code(c) => format!("exited with status {c}"),
            ExitKind::Signal(s) => {
                let name = Signal::try_from(s).map_or("unknown", |s| s.as_str());
                format!("was killed by signal {s} ({name})")
            }
        }
    }

    /// How a reaped child ended; `None` for a status that is not an end (stopped,
    /// continued).
    pub fn from_wait(status: &WaitStatus) -> Option<Self> {
        match *status {
            WaitStatus::Exited(_, code) => Some(ExitKind::Code(code)),
            WaitStatus::Signaled(_, sig, _) => Some(ExitKind::Signal(sig as i32)),
            _ => None,
        }
    }
}

/// Reaps one child that has ended, without blocking: `Some((pid, how))`, or `None` when
/// no child has ended (or none is left). Statuses that are not an end are skipped.
pub fn reap_one() -> Option<(Pid, ExitKind)> {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(status) => {
                let pid = status.pid()?;
                if let Some(how) = ExitKind::from_wait(&status) {
                    return Some((pid, how));
                }
            }
            Err(Errno::EINTR) => {}
            // ECHILD: nothing left to wait for.
            Err(_) => return None,
        }
    }
}

/// Raw number of a descriptor, for `PMI_FD`.
pub fn raw(fd: &impl AsRawFd) -> RawFd {
    fd.as_raw_fd()
}

/// 16 lowercase hex digits from the kernel's random source.
pub fn random_job_id() -> io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Removes every entry of `/dev/shm` whose name starts with `prefix` (segments of this
/// job that a rank did not unlink). Best effort; returns how many were removed.
pub fn remove_shm_segments(prefix: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

/// Every process whose parent is this one, zombies included (from `/proc`).
pub fn child_pids() -> Vec<Pid> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state, ppid, ...
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(me) {
            out.push(Pid::from_raw(pid));
        }
    }
    out
}

/// This host's name (empty if the kernel will not say).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

/// The IPv4 addresses of this host's interfaces that are up, loopback last: where the
/// proxies may reach gmpirun.
pub fn local_addresses() -> Vec<IpAddr> {
    let mut addrs: Vec<IpAddr> = Vec::new();
    if let Ok(list) = nix::ifaddrs::getifaddrs() {
        for ifa in list {
            if !ifa.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP) {
                continue;
            }
            if let Some(sin) = ifa.address.as_ref().and_then(|a| a.as_sockaddr_in()) {
                let ip = IpAddr::V4(sin.ip());
                if !addrs.contains(&ip) {
                    addrs.push(ip);
                }
            }
        }
    }
    addrs.sort_by_key(|a| a.is_loopback());
    if !addrs.iter().any(|a| a.is_loopback()) {
        addrs.push(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    }
    addrs
}

/// Opens `/dev/null` on whichever of descriptors 0, 1, 2 is closed, so that no socket or
/// pipe gmpirun creates later lands there and gets mistaken for stdin/stdout/stderr.
pub fn ensure_std_fds() {
    let open = [
        fcntl(io::stdin().as_fd(), FcntlArg::F_GETFD).is_ok(),
        fcntl(io::stdout().as_fd(), FcntlArg::F_GETFD).is_ok(),
        fcntl(io::stderr().as_fd(), FcntlArg::F_GETFD).is_ok(),
    ];
    for (fd, is_open) in open.into_iter().enumerate() {
        if is_open {
            continue;
        }
        // open(2) returns the lowest free descriptor: the closed one, lower ones being
        // open already. Keep it open for the life of the process.
        match std::fs::OpenOptions::new()
            .read(fd == 0)
            .write(fd != 0)
            .open("/dev/null")
        {
            Ok(f) if f.as_raw_fd() == fd as RawFd => std::mem::forget(f),
            _ => {}
        }
    }
}
