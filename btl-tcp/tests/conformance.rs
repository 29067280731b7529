//! The btl conformance suite (`gmpi_btl::conformance`) against two
//! `TcpBtl`s of this process over 127.0.0.1.

mod common;

use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::RawFd;

use common::*;
use gmpi_btl::conformance::{Can, Fixture, HostBuffers, Support};
use gmpi_btl::{Btl, BtlError, LocalMem, MemDesc, Pull, Rank, Submit};
use gmpi_btl_tcp::{TcpBtl, TcpConfig};
use nix::sys::socket::{getpeername, getsockname, shutdown, Shutdown, SockaddrIn};

/// Ranks 0 and 1, which know each other's cards.
struct TcpFixture {
    what: &'static str,
    /// Closed together on drop (a lone close waits for its peer's goodbye).
    btls: Vec<TcpBtl>,
    /// For the (refused) gets.
    mem: HostBuffers,
}

impl TcpFixture {
    fn new(what: &'static str, cfg: TcpConfig) -> Self {
        Self {
            what,
            btls: group(2, &cfg),
            mem: HostBuffers::default(),
        }
    }
}

impl Drop for TcpFixture {
    fn drop(&mut self) {
        close_all(std::mem::take(&mut self.btls));
    }
}

/// The IPv4 address of one end of socket `fd`, if it is one.
fn end(fd: RawFd, peer: bool) -> Option<SocketAddr> {
    let a: SockaddrIn = if peer {
        getpeername(fd).ok()?
    } else {
        getsockname(fd).ok()?
    };
    Some(SocketAddr::V4(SocketAddrV4::from(a)))
}

impl Fixture for TcpFixture {
    type Btl = TcpBtl;

    fn name(&self) -> String {
        format!("tcp, {}", self.what)
    }

    fn support(&self) -> Support {
        Support {
            back_pressure: Can::Yes,
            get: Can::no("tcp has no get: large messages take the pipelined rendezvous"),
            peer_failure: Can::Yes,
            wait_sleeps: Can::Yes,
        }
    }

    fn endpoints(&self) -> usize {
        2
    }

    fn btl(&mut self, i: usize) -> &mut TcpBtl {
        &mut self.btls[i]
    }

    fn rank(&self, i: usize) -> Rank {
        i as Rank
    }

    fn alloc(&mut self, _: usize, data: &[u8]) -> LocalMem {
        self.mem.alloc(data)
    }

    fn read(&self, _: usize, mem: LocalMem) -> Vec<u8> {
        self.mem.read(mem)
    }

    fn get(
        &mut self,
        i: usize,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
        alone: bool,
    ) -> Result<Submit, BtlError> {
        let b = &mut self.btls[i];
        // SAFETY: `dst` lies in a buffer of `self.mem`, kept until the
        // fixture is dropped, and the suite reads it only once the get is
        // over (`Fixture::get`).
        unsafe {
            if alone {
                b.get_as(peer, remote, offset, dst, token, Pull::Alone)
            } else {
                b.get(peer, remote, offset, dst, token)
            }
        }
    }

    /// The victim's sockets are shut down under it, without the goodbye of
    /// a clean close: to the survivor, a peer process that died. (The
    /// victim's connected sockets are those whose local end is its listening
    /// address, accepted, or whose peer is the survivor's, connected out;
    /// the survivor's own end of a connection matches neither.)
    fn kill(&mut self, i: usize) {
        let victim = self.btls[i].listen_addrs();
        let survivor = self.btls[1 - i].listen_addrs();
        let mut shut = 0;
        for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
            let name = entry.expect("fd entry").file_name();
            let Ok(fd) = name.to_string_lossy().parse::<RawFd>() else {
                continue;
            };
            let (Some(local), Some(peer)) = (end(fd, false), end(fd, true)) else {
                continue;
            };
            if victim.contains(&local) || survivor.contains(&peer) {
                shutdown(fd, Shutdown::Both).expect("shutdown");
                shut += 1;
            }
        }
        assert!(shut > 0, "no connection of rank {i} to shut down");
    }
}

gmpi_btl::conformance_tests!(default_config, || TcpFixture::new(
    "default configuration",
    cfg()
));
gmpi_btl::conformance_tests!(small_queue, || TcpFixture::new("256 KiB queues", {
    let mut c = cfg();
    c.queue_bytes = 256 << 10;
    c
}));
