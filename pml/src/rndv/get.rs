//! Rendezvous by single-copy get (`rndv/get`; `rndv/gpudirect` from device
//! memory a NIC can read).
//!
//! Sender: `Action::Register` → [`Pml::handle_registered`] → RNDV carrying
//! the btl's memory descriptor (or, unregistered, a RNDV without one: the
//! receiver then asks for the stream) → FIN ends the send, and
//! `Action::Deregister` hands the registration back to the btl.
//! Receiver: the matched RNDV's descriptor → `Action::Get` into the receive
//! buffer → `handle_get_done` (FIN, complete) or `handle_get_failed` (fall
//! back to the stream), both in `rndv/mod.rs`.

use gmpi_btl::{MemDesc, Pull, Rank};

use crate::action::Action;
use crate::request::{Matched, Req, SendState};
use crate::{Pml, ReqId, LOG};

/// The most request slots [`Pml::pulled_by`] walks: about 0.1 µs, against
/// the 4 µs or more of the get it decides for.
const PULLED_SCAN_MAX: usize = 256;

impl Pml {
    /// The driver registered send `token`'s buffer (`Some`: its
    /// descriptor) or could not (`None`: the message is streamed instead).
    pub fn handle_registered(&mut self, token: u64, desc: Option<MemDesc>) {
        if let (Some(d), Some(s)) = (desc, self.reqs.send_mut(ReqId(token))) {
            self.registered.insert(token, (s.btl, d));
        }
        if let Some((id, m, sync)) = self.end_setup(token, desc.is_some()) {
            self.send_rts(id, m, sync, desc, true);
        }
    }

    /// The rendezvous of send `token` is over (FIN, a fallback to the
    /// stream, or a failure): let the btl go of its registration.
    pub(crate) fn release_registration(&mut self, token: u64) {
        if let Some((btl, desc)) = self.registered.remove(&token) {
            self.actions.push_back(Action::Deregister { btl, desc });
        }
    }

    /// Pull matched rendezvous `m` into receive `id` with the btl's get.
    /// `consumed`: the receive reads the data as soon as it lands
    /// ([`Pull::Alone`]).
    pub(crate) fn start_get(&mut self, id: ReqId, m: Matched, desc: MemDesc, consumed: bool) {
        let Some(buf) = self.begin_pull(id, m) else {
            return;
        };
        tracing::debug!(target: LOG, "recv {} B from rank {}: rndv/get", m.want, m.peer);
        let pull = if self.pulled_by(m.peer) {
            Pull::Unhelped
        } else if consumed {
            Pull::Alone
        } else {
            Pull::Helped
        };
        self.actions.push_back(Action::Get {
            btl: m.btl,
            peer: m.peer,
            desc,
            offset: 0,
            dst: buf.addr,
            dst_kind: buf.kind,
            len: m.want as usize,
            token: id.0,
            pull,
        });
    }

    /// Whether `peer` is busy pulling messages of ours: two rendezvous sends
    /// of this rank to it or more wait for its reply. Then a get from it
    /// moves data both ways at once and `peer` has no idle time to help
    /// with it (a window of them each way, as `gb_bibw` posts: 10 % more
    /// bandwidth copied alone). With one message each way (a pairwise
    /// exchange, `MPI_Alltoall` at np 2), whichever rank ends its own pull
    /// first would otherwise wait, and its help wins (3-5 % at 512 KiB to
    /// 1 MiB). A scan of the requests in flight, once per rendezvous get
    /// (64 KiB or more), made only while there are at most
    /// [`PULLED_SCAN_MAX`] slots to walk (a program with thousands of
    /// requests posted gets as before, cooperatively).
    fn pulled_by(&self, peer: Rank) -> bool {
        if self.reqs.slots() > PULLED_SCAN_MAX {
            return false;
        }
        self.reqs
            .iter()
            .filter(|(_, r)| {
                matches!(r, Req::Send(s) if s.peer == peer && s.state == SendState::AwaitReply)
            })
            .nth(1)
            .is_some()
    }
}
