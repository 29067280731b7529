//! Probes: [`Pml::iprobe`] looks at the unexpected queue; [`Pml::improbe`]
//! takes a message out of matching for [`Pml::mrecv`] alone (MPI's matched
//! probe), so no later receive or probe can see it.

use crate::memory::HostWrite;
use crate::request::{RecvReq, Req};
use crate::{Buf, Pml, ReqId, Status};

impl Pml {
    /// Look for a matching unexpected message without receiving it.
    pub fn iprobe(&self, ctx: u32, src: Option<u32>, tag: Option<i32>) -> Option<Status> {
        self.matching
            .peek_unexpected(ctx, src, tag)
            .map(|u| Status {
                source: u.m.src,
                tag: u.m.tag,
                len: u.m.len,
                cancelled: false,
            })
    }

    /// Match a message and take it out of matching without receiving it
    /// (`MPI_Improbe`): its status, and the handle under which only
    /// [`Pml::mrecv`] can receive it. Later receives and probes never see it.
    pub fn improbe(
        &mut self,
        ctx: u32,
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Option<(Status, u64)> {
        let u = self.matching.take_unexpected(ctx, src, tag)?;
        let st = Status {
            source: u.m.src,
            tag: u.m.tag,
            len: u.m.len,
            cancelled: false,
        };
        let id = self.next_claim;
        self.next_claim += 1;
        self.claimed.insert(id, u);
        Some((st, id))
    }

    /// Receive into `buf` the message [`Pml::improbe`] matched as `msg`
    /// (`MPI_Mrecv`). `None` if `msg` names no matched message.
    pub fn mrecv(&mut self, msg: u64, buf: Buf, w: &mut dyn HostWrite) -> Option<ReqId> {
        let u = self.claimed.remove(&msg)?;
        let id = self
            .reqs
            .insert(Req::Recv(RecvReq::posted(None, buf, false)));
        self.deliver(id, u, w);
        Some(id)
    }
}
