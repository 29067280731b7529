//! One socket and its buffers: the outgoing queue of a peer ([`TxQueue`],
//! vectored writes), the receive buffer that frames are parsed from
//! ([`RxBuf`], zero-copy delivery) and the per-connection handshake state
//! ([`Conn`], [`Stage`]).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

use gmpi_btl::{Rank, StreamBody, STREAM_HEAD};
use mio::net::TcpStream;

use crate::auth::Nonce;
use crate::wire::{self, FrameKind, HsKind, WireError, FRAME_HDR, MAX_HANDSHAKE};

/// Small sends are appended to the last queued buffer up to this size.
const COALESCE: usize = 64 << 10;
/// Most slices handed to one `writev`.
const MAX_IOV: usize = 64;

/// Write `parts`, skipping their first `skip` bytes, with as few `writev`
/// calls as the socket allows. Returns the bytes written (less than the total
/// when the socket would block).
pub(crate) fn write_parts(w: &mut impl Write, parts: &[&[u8]], skip: usize) -> io::Result<usize> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut done = skip;
    while done < total {
        let mut iov = [IoSlice::new(&[]); 8];
        let mut k = 0;
        let mut off = done;
        for p in parts {
            if off >= p.len() {
                off -= p.len();
                continue;
            }
            if k == iov.len() {
                break;
            }
            iov[k] = IoSlice::new(&p[off..]);
            off = 0;
            k += 1;
        }
        match w.write_vectored(&iov[..k]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done - skip)
}

/// Bytes waiting to be written to one peer, in order.
#[derive(Debug, Default)]
pub(crate) struct TxQueue {
    bufs: VecDeque<Vec<u8>>,
    /// Bytes of the front buffer already written.
    off: usize,
    bytes: usize,
}

impl TxQueue {
    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Forget everything queued.
    pub fn clear(&mut self) {
        self.bufs.clear();
        self.off = 0;
        self.bytes = 0;
    }

    /// Copy `parts` (less their first `skip` bytes) to the end of the queue.
    pub fn push(&mut self, parts: &[&[u8]], mut skip: usize) {
        let total = parts.iter().map(|p| p.len()).sum::<usize>() - skip;
        if total == 0 {
            return;
        }
        let fits = self
            .bufs
            .back()
            .is_some_and(|b| b.len() + total <= COALESCE);
        if !fits {
            self.bufs
                .push_back(Vec::with_capacity(total.max(COALESCE / 4)));
        }
        let buf = self.bufs.back_mut().expect("just ensured");
        for p in parts {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            buf.extend_from_slice(&p[skip..]);
            skip = 0;
        }
        self.bytes += total;
    }

    /// Write as much as the socket takes. `Ok(true)`: the queue is empty.
    pub fn flush(&mut self, w: &mut impl Write) -> io::Result<bool> {
        while self.bytes > 0 {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut k = 0;
            for (i, b) in self.bufs.iter().enumerate().take(MAX_IOV) {
                iov[k] = IoSlice::new(if i == 0 { &b[self.off..] } else { b });
                k += 1;
            }
            match w.write_vectored(&iov[..k]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.consume(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn consume(&mut self, mut n: usize) {
        self.bytes -= n;
        while n > 0 {
            let front = self.bufs.front().expect("bytes accounted").len() - self.off;
            if n < front {
                self.off += n;
                return;
            }
            n -= front;
            self.off = 0;
            self.bufs.pop_front();
        }
    }
}

/// What [`RxBuf::next_frame`] found.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A whole frame: its kind and the range of its payload in the buffer.
    Frame(FrameKind, std::ops::Range<usize>),
    /// A [`FrameKind::Stream`] frame of at least [`STREAM_MIN`] bytes whose
    /// body has not all arrived: it is now open ([`RxBuf::open`]).
    Opened,
    /// Not enough bytes yet.
    Partial,
}

/// Streamed frames shorter than this wait in the buffer until whole (a
/// small body costs less to copy than to deliver in pieces).
pub(crate) const STREAM_MIN: usize = 16 << 10;

/// A streamed frame being read straight into the receiver's memory.
#[derive(Debug)]
pub(crate) struct Open {
    /// The body's first bytes.
    pub head: [u8; STREAM_HEAD],
    pub head_len: usize,
    /// The body's length.
    pub len: usize,
    /// Body bytes read so far.
    pub taken: usize,
    /// The receiver stopped early: the rest is read and dropped.
    pub discard: bool,
}

/// How a read of an open frame's body ended ([`Body`]).
#[derive(Debug, Default)]
pub(crate) struct BodyEnd {
    /// The socket had nothing more.
    pub would_block: bool,
    /// The peer ended its stream.
    pub eof: bool,
    /// A read failed.
    pub error: Option<io::Error>,
}

/// The rest of an open frame's body: the bytes already buffered, then the
/// socket, read without blocking.
#[derive(Debug)]
pub(crate) struct Body<'a, R> {
    pub buf: &'a mut RxBuf,
    pub stream: &'a mut R,
    pub end: BodyEnd,
}

impl<R: Read + std::fmt::Debug> StreamBody for Body<'_, R> {
    fn read(&mut self, dst: &mut [u8]) -> usize {
        let Some(open) = self.buf.open.as_mut() else {
            return 0;
        };
        let want = dst.len().min(open.len - open.taken);
        // Buffered bytes first.
        let have = (self.buf.end - self.buf.start).min(want);
        dst[..have].copy_from_slice(&self.buf.buf[self.buf.start..self.buf.start + have]);
        self.buf.start += have;
        let mut k = have;
        while k < want && self.end.error.is_none() && !self.end.eof && !self.end.would_block {
            match self.stream.read(&mut dst[k..want]) {
                Ok(0) => self.end.eof = true,
                Ok(n) => k += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.end.would_block = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.end.error = Some(e),
            }
        }
        open.taken += k;
        k
    }
}

/// Received bytes of an established connection.
#[derive(Debug)]
pub(crate) struct RxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_frag: usize,
    /// The streamed frame being read, if any: its body's next bytes are at
    /// `start` (those buffered), then in the socket.
    pub open: Option<Open>,
}

impl RxBuf {
    /// A buffer that always has room for one whole frame of up to `max_frag`
    /// payload bytes.
    pub fn new(max_frag: usize) -> Self {
        let cap = (2 * (max_frag + FRAME_HDR)).max(256 << 10);
        Self {
            buf: vec![0; cap],
            start: 0,
            end: 0,
            max_frag,
            open: None,
        }
    }

    /// Whether unparsed bytes are held.
    #[cfg(test)]
    pub fn has_bytes(&self) -> bool {
        self.end > self.start
    }

    /// The next frame, validated; a malformed header is an error at once
    /// (before its payload arrives).
    pub fn next_frame(&mut self) -> Result<Parsed, WireError> {
        let have = self.end - self.start;
        if have < FRAME_HDR {
            return Ok(Parsed::Partial);
        }
        let h: &[u8; FRAME_HDR] = self.buf[self.start..self.start + FRAME_HDR]
            .try_into()
            .expect("header bytes");
        let (kind, len) = wire::decode_frame_header(h, self.max_frag)?;
        if have < FRAME_HDR + len {
            let head_len = len.min(STREAM_HEAD);
            if kind == FrameKind::Stream && len >= STREAM_MIN && have >= FRAME_HDR + head_len {
                let b = self.start + FRAME_HDR;
                let mut head = [0; STREAM_HEAD];
                head[..head_len].copy_from_slice(&self.buf[b..b + head_len]);
                self.start = b;
                self.open = Some(Open {
                    head,
                    head_len,
                    len,
                    taken: 0,
                    discard: false,
                });
                return Ok(Parsed::Opened);
            }
            return Ok(Parsed::Partial);
        }
        let body = self.start + FRAME_HDR..self.start + FRAME_HDR + len;
        self.start = body.end;
        Ok(Parsed::Frame(kind, body))
    }

    /// Bytes of a range returned by [`RxBuf::next_frame`] (valid until the
    /// next [`RxBuf::fill`]).
    pub fn slice(&self, r: std::ops::Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    /// Read from `r` into the free space. Returns the bytes read (0 = end of
    /// stream) and whether the read filled the space offered (so more may be
    /// waiting in the socket).
    pub fn fill(&mut self, r: &mut impl Read) -> io::Result<(usize, bool)> {
        debug_assert!(self.open.is_none(), "an open frame's body is read by Body");
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.end < self.max_frag + FRAME_HDR {
            // Only a partial frame is held here (whole frames are delivered
            // before reading), so moving it down leaves room for a whole one.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let space = self.buf.len() - self.end;
        loop {
            match r.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok((n, n == space));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Client: TCP connect in flight to the peer's `addr_idx`-th address.
    Connecting,
    /// Server: waiting for `HELLO`.
    AwaitHello,
    /// Client: `HELLO` sent, waiting for `CHALLENGE`.
    AwaitChallenge,
    /// Server: `CHALLENGE` sent, waiting for `PROOF`.
    AwaitProof,
    /// Client: `PROOF` sent, waiting for `VERDICT`.
    AwaitVerdict,
    /// Authenticated and kept: frames flow.
    Established,
}

impl Stage {
    /// The handshake message this stage waits for.
    pub fn awaits(self) -> Option<HsKind> {
        match self {
            Stage::AwaitHello => Some(HsKind::Hello),
            Stage::AwaitChallenge => Some(HsKind::Challenge),
            Stage::AwaitProof => Some(HsKind::Proof),
            Stage::AwaitVerdict => Some(HsKind::Verdict),
            Stage::Connecting | Stage::Established => None,
        }
    }
}

/// One socket.
#[derive(Debug)]
pub(crate) struct Conn {
    pub stream: TcpStream,
    pub stage: Stage,
    /// Who is at the other end: known from the start for a client, after a
    /// well-formed `HELLO` for a server (authenticated only once
    /// `Established`).
    pub peer: Option<Rank>,
    /// We opened it.
    pub client: bool,
    /// Client: which of the peer's addresses this is.
    pub addr_idx: usize,
    pub addr: Option<SocketAddr>,
    /// Handshake bytes received so far.
    pub hs_in: [u8; MAX_HANDSHAKE],
    pub hs_have: usize,
    /// Handshake bytes not yet written.
    pub hs_out: Vec<u8>,
    pub my_nonce: Nonce,
    pub their_nonce: Nonce,
    /// The handshake must be over by then.
    pub deadline: Instant,
    /// Readiness as last reported (edge-triggered: cleared on `WouldBlock`).
    pub readable: bool,
    pub writable: bool,
    /// The peer closed or reset: a short read must not clear `readable`
    /// (the end of stream is still to be read, and no new edge will come).
    pub hup: bool,
    /// The peer said goodbye and ended its stream.
    pub eof: bool,
    /// Established: received bytes.
    pub rx: Option<RxBuf>,
    /// Queued in the btl's list of connections to look at.
    pub listed: bool,
}

impl Conn {
    pub fn new(stream: TcpStream, client: bool, deadline: Instant) -> Self {
        Self {
            stream,
            stage: if client {
                Stage::Connecting
            } else {
                Stage::AwaitHello
            },
            peer: None,
            client,
            addr_idx: 0,
            addr: None,
            hs_in: [0; MAX_HANDSHAKE],
            hs_have: 0,
            hs_out: Vec::new(),
            my_nonce: [0; 32],
            their_nonce: [0; 32],
            deadline,
            readable: false,
            writable: false,
            hup: false,
            eof: false,
            rx: None,
            listed: false,
        }
    }

    /// Write pending handshake bytes. `Ok(true)`: all written.
    pub fn flush_hs(&mut self) -> io::Result<bool> {
        while !self.hs_out.is_empty() {
            match self.stream.write(&self.hs_out) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.hs_out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Read toward the `want.wire_len()` bytes of the awaited handshake message,
    /// never past it (frames may follow it). `Ok(true)`: complete.
    pub fn read_hs(&mut self, want: HsKind) -> io::Result<bool> {
        let need = want.wire_len();
        while self.hs_have < need {
            match self.stream.read(&mut self.hs_in[self.hs_have..need]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.hs_have += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Take the complete handshake message, resetting the input.
    pub fn take_hs(&mut self, want: HsKind) -> &[u8] {
        let n = self.hs_have;
        self.hs_have = 0;
        &self.hs_in[..n.min(want.wire_len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `room` bytes per call and then blocks.
    struct Trickle {
        got: Vec<u8>,
        room: usize,
        calls: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(b)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.calls += 1;
            if self.calls.is_multiple_of(3) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.room - n);
                self.got.extend_from_slice(&b[..take]);
                n += take;
                if n == self.room {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn queue_keeps_order_through_partial_writes() {
        let mut q = TxQueue::default();
        let mut want = Vec::new();
        for i in 0..200u32 {
            let len = (i as usize * 977) % 100_000;
            let a = vec![i as u8; 3];
            let b = vec![(i >> 1) as u8; len];
            q.push(&[&a, &b], 1);
            want.extend_from_slice(&a[1..]);
            want.extend_from_slice(&b);
        }
        assert_eq!(q.bytes(), want.len());
        let mut w = Trickle {
            got: Vec::new(),
            room: 7777,
            calls: 0,
        };
        while !q.flush(&mut w).unwrap() {}
        assert!(q.is_empty());
        assert_eq!(w.got, want);
    }

    #[test]
    fn direct_writes_skip_and_stop_on_would_block() {
        let mut w = Trickle {
            got: Vec::new(),
            room: 5,
            calls: 0,
        };
        let n = write_parts(&mut w, &[b"abc", b"defgh", b"ij"], 1).unwrap();
        assert_eq!(n, 9);
        assert_eq!(w.got, b"bcdefghij");
        let mut w = Trickle {
            got: Vec::new(),
            room: 2,
            calls: 0,
        };
        let n = write_parts(&mut w, &[b"abcdefgh"], 0).unwrap();
        assert_eq!(n, 4, "two writes of 2, then WouldBlock");
    }

    #[test]
    fn rx_parses_frames_across_reads() {
        // Data and Stream frames mixed; a Stream frame of STREAM_MIN bytes
        // or more that has not all arrived opens, and its body is read
        // through `Body` in pieces, across reads that would block.
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for i in 0..50usize {
            let p = vec![i as u8; i * 1000];
            let kind = if i % 2 == 0 {
                FrameKind::Data
            } else {
                FrameKind::Stream
            };
            wire.extend_from_slice(&crate::wire::frame_header(kind, p.len()));
            wire.extend_from_slice(&p);
            want.push(p);
        }
        wire.extend_from_slice(&crate::wire::frame_header(FrameKind::Goodbye, 0));
        let mut rx = RxBuf::new(64 << 10);
        let mut src = io::Cursor::new(wire);
        #[derive(Debug)]
        struct Chunky<'a>(&'a mut io::Cursor<Vec<u8>>, u32);
        impl Read for Chunky<'_> {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                self.1 += 1;
                if self.1.is_multiple_of(3) {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let n = b.len().min(3001);
                self.0.read(&mut b[..n])
            }
        }
        let mut chunky = Chunky(&mut src, 0);
        let (mut got, mut opened) = (Vec::new(), 0);
        let mut cur = Vec::new();
        loop {
            if let Some(o) = rx.open.as_ref() {
                let len = o.len;
                assert_eq!(o.taken, cur.len());
                let mut body = Body {
                    buf: &mut rx,
                    stream: &mut chunky,
                    end: BodyEnd::default(),
                };
                let mut piece = [0u8; 777];
                loop {
                    let k = piece.len().min(len - cur.len());
                    let n = body.read(&mut piece[..k]);
                    cur.extend_from_slice(&piece[..n]);
                    if n < k || cur.len() == len {
                        break;
                    }
                }
                assert!(body.end.error.is_none() && !body.end.eof);
                if cur.len() == len {
                    rx.open = None;
                    got.push(std::mem::take(&mut cur));
                }
                continue;
            }
            match rx.next_frame().unwrap() {
                Parsed::Frame(FrameKind::Data | FrameKind::Stream, r) => {
                    got.push(rx.slice(r).to_vec());
                }
                Parsed::Frame(FrameKind::Goodbye, _) => break,
                Parsed::Opened => opened += 1,
                Parsed::Partial => match rx.fill(&mut chunky) {
                    Ok((n, _)) => assert!(n > 0, "stream ended before goodbye"),
                    Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
                },
            }
        }
        assert_eq!(got, want);
        assert!(opened > 0, "no Stream frame was opened");
        assert!(!rx.has_bytes());
    }

    #[test]
    fn rx_rejects_a_bad_header_before_its_payload() {
        let mut rx = RxBuf::new(1000);
        let mut h = crate::wire::frame_header(FrameKind::Data, 10).to_vec();
        h[0..4].copy_from_slice(&5000u32.to_le_bytes());
        rx.fill(&mut io::Cursor::new(h)).unwrap();
        assert!(matches!(rx.next_frame(), Err(WireError::TooLong { .. })));
    }
}
