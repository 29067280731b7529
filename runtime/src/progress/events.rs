//! The btls' events, turned into pml inputs.
//!
//! A fragment goes to [`Pml::handle_frag`] with the host memory as the
//! pml's one callback (an eager payload for a matched host receive is
//! written straight from the fragment). A streamed fragment is read by the
//! driver where [`Pml::stream_target`] says: host memory in place, device
//! memory through a temporary the pml then has copied in. Completions and
//! failures go to their `handle_*` input, except those of the staging
//! module's gets and of windows' RDMA transfers (`onesided.rs`), which end
//! there.

use gmpi_btl::{Event, StreamBody, STREAM_HEAD};
use gmpi_pml::{Pml, StreamTarget};

use super::{Driver, HostMemory};

impl<H: HostMemory> Driver<H> {
    /// Poll every btl that may have events; returns how many it handled.
    /// Inlined into [`Driver::progress`]: it is the body of every wait's
    /// spin.
    #[inline]
    pub(super) fn poll_btls(&mut self) -> usize {
        let mut n = 0;
        for (i, btl) in self.btls.iter_mut().enumerate() {
            if self.quiet[i] {
                continue;
            }
            let pml = &mut self.pml;
            let host = &mut self.host;
            let fatal = &mut self.fatal;
            let staging = &mut self.staging;
            let onesided = &mut self.onesided;
            let got = btl.progress(&mut |ev| {
                let res = match ev {
                    Event::Frag { peer, data } => pml.handle_frag(i, peer, data, host),
                    Event::FragStream {
                        peer,
                        head,
                        len,
                        taken,
                        body,
                    } => pml
                        .stream_target(peer, head, len, taken)
                        .map(|t| read_stream(pml, host, &t, body)),
                    Event::SendComplete { token } => {
                        pml.handle_send_done(token);
                        Ok(())
                    }
                    Event::GetComplete { token } if staging.owns(token) => {
                        staging.get_ended(token, Ok(()));
                        Ok(())
                    }
                    Event::GetFailed { token, error } if staging.owns(token) => {
                        staging.get_ended(token, Err(error.to_string()));
                        Ok(())
                    }
                    Event::GetComplete { token } | Event::PutComplete { token }
                        if onesided.owns(token) =>
                    {
                        onesided.ended(token, Ok(()));
                        Ok(())
                    }
                    Event::GetFailed { token, error } | Event::PutFailed { token, error }
                        if onesided.owns(token) =>
                    {
                        onesided.ended(token, Err(error.to_string()));
                        Ok(())
                    }
                    Event::PutComplete { token } | Event::PutFailed { token, .. } => {
                        // Only windows put; a token nobody waits for.
                        tracing::warn!(target: "pml", "a put nobody started ended (token {token:#x})");
                        Ok(())
                    }
                    Event::GetComplete { token } => {
                        pml.handle_get_done(token);
                        Ok(())
                    }
                    Event::GetFailed { token, error } => {
                        pml.handle_get_failed(token, &error.to_string());
                        Ok(())
                    }
                    Event::PeerFailed { peer } => {
                        pml.handle_peer_failed(peer);
                        Ok(())
                    }
                };
                if let Err(e) = res {
                    tracing::error!(target: "pml", "{}", gmpi_pml::error::chain(&e));
                    fatal.get_or_insert(e);
                }
            });
            if got == 0 && self.passive[i] {
                self.quiet[i] = true;
            }
            n += got;
        }
        n
    }
}

/// Read what has arrived of a streamed fragment's body to `t`: first the
/// header bytes still unread (discarded), then the payload, straight into
/// host memory or, for device memory, into a temporary the pml has copied
/// in. A short read means the rest has not arrived: the btl delivers the
/// fragment again when it has.
fn read_stream<H: HostMemory>(
    pml: &mut Pml,
    host: &mut H,
    t: &StreamTarget,
    body: &mut dyn StreamBody,
) {
    if t.skip > 0 {
        let mut skip = [0u8; STREAM_HEAD];
        let want = t.skip.min(STREAM_HEAD);
        if body.read(&mut skip[..want]) < t.skip {
            return;
        }
    }
    if t.len == 0 {
        pml.handle_stream_read(t, 0, None);
        return;
    }
    if t.kind.is_host() {
        let n = host.with_write(t.addr, t.len, |d| body.read(d));
        pml.handle_stream_read(t, n, None);
    } else {
        let mut tmp = vec![0u8; t.len];
        let n = body.read(&mut tmp);
        if n > 0 {
            tmp.truncate(n);
            pml.handle_stream_read(t, n, Some(tmp));
        }
    }
}
