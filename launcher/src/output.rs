//! Line forwarding of the ranks' stdout and stderr.
//!
//! One [`LineForwarder`] per (rank, stream). Bytes read from the rank's pipe are pushed
//! in; whole lines come out, so a line of one rank is never split by bytes of another.
//! With tagging each line is prefixed `[rank] `. A partial line is held until its newline,
//! end of file, or (untagged only) until the pipe has been quiet for [`QUIET_FLUSH`], so
//! a prompt without newline still shows up.
//!
//! A [`Sink`] puts gmpirun's own stdout and stderr behind a writer thread, for the
//! multi-host root: a reader that stalls (`| less`, a paused terminal) must not stall
//! the loop that keeps the heartbeats of every host going.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an untagged partial line may wait for its newline before it is written.
pub const QUIET_FLUSH: Duration = Duration::from_millis(100);

/// A partial line longer than this is written out without waiting for its newline.
const MAX_PENDING: usize = 1 << 20;

/// Forwards one stream of one rank, line by line; see the module documentation.
#[derive(Debug)]
pub struct LineForwarder {
    /// `Some("[r] ")` when tagging.
    prefix: Option<Vec<u8>>,
    /// Bytes of the current, incomplete line.
    pending: Vec<u8>,
    /// When the pending bytes last grew.
    last_input: Instant,
}

impl LineForwarder {
    /// A forwarder for `rank`; `tag` selects `[rank] ` prefixes.
    pub fn new(rank: u32, tag: bool) -> Self {
        Self {
            prefix: tag.then(|| format!("[{rank}] ").into_bytes()),
            pending: Vec::new(),
            last_input: Instant::now(),
        }
    }

    /// Takes `data` read from the pipe and writes every line it completes to `out`.
    pub fn push(&mut self, data: &[u8], out: &mut dyn Write) {
        self.last_input = Instant::now();
        let Some(last_newline) = data.iter().rposition(|&b| b == b'\n') else {
            self.pending.extend_from_slice(data);
            if self.pending.len() > MAX_PENDING {
                self.flush_partial(out);
            }
            return;
        };
        let (complete, rest) = data.split_at(last_newline + 1);
        let mut buf = Vec::with_capacity(self.pending.len() + complete.len() + 16);
        match &self.prefix {
            None => {
                buf.append(&mut self.pending);
                buf.extend_from_slice(complete);
            }
            Some(prefix) => {
                let mut first = true;
                for line in complete.split_inclusive(|&b| b == b'\n') {
                    buf.extend_from_slice(prefix);
                    if std::mem::take(&mut first) {
                        buf.append(&mut self.pending);
                    }
                    buf.extend_from_slice(line);
                }
            }
        }
        write_ignoring_errors(out, &buf);
        self.pending.extend_from_slice(rest);
    }

    /// When the held partial line should be written if nothing more arrives (untagged
    /// only); `None` when nothing is held or tagging waits for the newline.
    pub fn flush_deadline(&self) -> Option<Instant> {
        (self.prefix.is_none() && !self.pending.is_empty()).then(|| self.last_input + QUIET_FLUSH)
    }

    /// Writes a held partial line whose quiet time has passed.
    pub fn flush_if_quiet(&mut self, now: Instant, out: &mut dyn Write) {
        if self.flush_deadline().is_some_and(|d| d <= now) {
            self.flush_partial(out);
        }
    }

    /// End of file: writes whatever is held (tagged: with its prefix and a newline).
    pub fn finish(&mut self, out: &mut dyn Write) {
        if !self.pending.is_empty() {
            self.flush_partial(out);
        }
    }

    fn flush_partial(&mut self, out: &mut dyn Write) {
        let mut buf = Vec::with_capacity(self.pending.len() + 16);
        if let Some(prefix) = &self.prefix {
            buf.extend_from_slice(prefix);
            buf.append(&mut self.pending);
            buf.push(b'\n');
        } else {
            buf.append(&mut self.pending);
        }
        write_ignoring_errors(out, &buf);
    }
}

/// Our own stdout/stderr may be closed or a broken pipe (`gmpirun ... | head`): the job
/// goes on and the output is dropped, as a shell pipeline would.
fn write_ignoring_errors(out: &mut dyn Write, buf: &[u8]) {
    let _ = out.write_all(buf).and_then(|()| out.flush());
}

/// gmpirun's stdout and stderr, written in order by a thread; see the module
/// documentation.
#[derive(Debug)]
pub struct Sink {
    tx: Option<mpsc::Sender<(bool, Vec<u8>)>>,
    queued: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Starts the writer thread.
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel::<(bool, Vec<u8>)>();
        let queued = Arc::new(AtomicUsize::new(0));
        let left = Arc::clone(&queued);
        let thread = std::thread::spawn(move || {
            for (is_err, data) in rx {
                if is_err {
                    write_ignoring_errors(&mut std::io::stderr(), &data);
                } else {
                    write_ignoring_errors(&mut std::io::stdout(), &data);
                }
                left.fetch_sub(data.len(), Ordering::Relaxed);
            }
        });
        Self {
            tx: Some(tx),
            queued,
            thread: Some(thread),
        }
    }

    /// A writer to gmpirun's stdout.
    pub fn out(&self) -> SinkWriter<'_> {
        SinkWriter {
            sink: self,
            is_err: false,
        }
    }

    /// A writer to gmpirun's stderr.
    pub fn err(&self) -> SinkWriter<'_> {
        SinkWriter {
            sink: self,
            is_err: true,
        }
    }

    /// Bytes handed over but not written yet.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Writes everything handed over, then stops the thread.
    pub fn close(mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Default for Sink {
    fn default() -> Self {
        Self::new()
    }
}

/// One stream of a [`Sink`]: every `write` is handed over whole, in order.
#[derive(Debug)]
pub struct SinkWriter<'a> {
    sink: &'a Sink,
    is_err: bool,
}

impl Write for SinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(tx) = &self.sink.tx {
            self.sink.queued.fetch_add(buf.len(), Ordering::Relaxed);
            if tx.send((self.is_err, buf.to_vec())).is_err() {
                self.sink.queued.fetch_sub(buf.len(), Ordering::Relaxed);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_lines_are_whole() {
        let mut f = LineForwarder::new(3, false);
        let mut out = Vec::new();
        f.push(b"hel", &mut out);
        assert!(out.is_empty());
        assert!(f.flush_deadline().is_some());
        f.push(b"lo\nwor", &mut out);
        assert_eq!(out, b"hello\n");
        f.finish(&mut out);
        assert_eq!(out, b"hello\nwor");
    }

    #[test]
    fn tagged_lines_are_prefixed() {
        let mut f = LineForwarder::new(1, true);
        let mut out = Vec::new();
        f.push(b"a\nb", &mut out);
        f.push(b"c\nd\ne\nlast", &mut out);
        assert_eq!(f.flush_deadline(), None);
        f.finish(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[1] a\n[1] bc\n[1] d\n[1] e\n[1] last\n"
        );
    }

    #[test]
    fn quiet_partial_is_flushed() {
        let mut f = LineForwarder::new(0, false);
        let mut out = Vec::new();
        f.push(b"prompt> ", &mut out);
        f.flush_if_quiet(Instant::now(), &mut out);
        assert!(out.is_empty());
        f.flush_if_quiet(Instant::now() + QUIET_FLUSH * 2, &mut out);
        assert_eq!(out, b"prompt> ");
        assert_eq!(f.flush_deadline(), None);
    }
}
