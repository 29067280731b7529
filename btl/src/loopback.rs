//! The `self` transport: fragments a rank sends to itself.
//!
//! Copies the fragment into a queue at submit time and hands it back on the
//! next [`Btl::progress`]. It never blocks and never refuses.

use std::collections::VecDeque;
use std::time::Duration;

use crate::{Btl, BtlError, Capabilities, Event, Rank, Submit};

/// Loopback transport for one rank.
#[derive(Debug)]
pub struct Loopback {
    me: Rank,
    caps: Capabilities,
    queue: VecDeque<Vec<u8>>,
}

impl Loopback {
    /// A loopback btl for rank `me`.
    pub fn new(me: Rank) -> Self {
        Self {
            me,
            caps: Capabilities {
                name: "self",
                eager_limit: 64 * 1024,
                max_send_size: 64 * 1024 + 256,
                get: false,
                put: false,
                exclusivity: 1 << 16,
                get_threshold: usize::MAX,
                // Device memory reaches this peer by address: the driver
                // copies device-to-device without an IPC handle.
                cuda_ipc: true,
                gpudirect: None,
            },
            queue: VecDeque::new(),
        }
    }
}

impl Btl for Loopback {
    fn caps(&self) -> &Capabilities {
        &self.caps
    }

    fn reaches(&self, peer: Rank) -> bool {
        peer == self.me
    }

    fn send(&mut self, peer: Rank, parts: &[&[u8]], _token: u64) -> Result<Submit, BtlError> {
        if peer != self.me {
            return Err(BtlError::Unreachable(peer));
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.caps.max_send_size {
            return Err(BtlError::TooLarge {
                len,
                max: self.caps.max_send_size,
            });
        }
        let mut v = Vec::with_capacity(len);
        for p in parts {
            v.extend_from_slice(p);
        }
        self.queue.push_back(v);
        Ok(Submit::Done)
    }

    fn passive(&self) -> bool {
        true
    }

    fn progress(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> usize {
        let mut n = 0;
        // Only what is queued now: frags sent from inside the callback wait
        // for the next pass, so progress always terminates.
        let ready = self.queue.len();
        for _ in 0..ready {
            let Some(f) = self.queue.pop_front() else {
                break;
            };
            on_event(Event::Frag {
                peer: self.me,
                data: &f,
            });
            n += 1;
        }
        n
    }

    fn wait(&mut self, _timeout: Duration) {}

    /// Nothing arrives from outside: an event is pending or none will be.
    fn can_watch(&self) -> bool {
        true
    }

    fn watch(&mut self, _wake: &std::sync::Arc<dyn crate::Wake>, timeout: Duration) -> Duration {
        if !self.queue.is_empty() {
            Duration::ZERO
        } else {
            timeout
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_back_in_order() {
        let mut l = Loopback::new(3);
        assert!(l.reaches(3) && !l.reaches(2));
        l.send(3, &[b"ab", b"c"], 0).unwrap();
        l.send(3, &[b"d"], 0).unwrap();
        let mut got = Vec::new();
        l.progress(&mut |e| {
            if let Event::Frag { peer, data } = e {
                got.push((peer, data.to_vec()));
            }
        });
        assert_eq!(got, vec![(3, b"abc".to_vec()), (3, b"d".to_vec())]);
        assert_eq!(l.send(1, &[b"x"], 0), Err(BtlError::Unreachable(1)));
    }
}
