//! The btl conformance suite (feature `conformance`): the checks every
//! transport must pass, for btl authors' tests. It reaches a btl only through
//! the public [`Btl`] trait, so a check that passes here holds for the pml.
//!
//! A btl's tests implement [`Fixture`] (a few connected endpoints, the
//! memory a get may write, a way to kill an endpoint) and run the checks,
//! one `#[test]` each, with [`conformance_tests!`](crate::conformance_tests):
//!
//! ```text
//! gmpi_btl::conformance_tests!(default_config, || MyFixture::new(MyConfig::default()));
//! ```
//!
//! (`btl/tests/conformance.rs` does it for the simulated fabric and
//! loopback, `btl-shm/src/conformance.rs` and `btl-tcp/tests/conformance.rs`
//! for shm and tcp.)
//!
//! The checks:
//! - [`ordering`]: fragments of mixed sizes (0 B, 1 B, the eager limit,
//!   `max_send_size`), sent and stream-sent, with and without tokens, arrive
//!   in submission order, byte-exact, each once.
//! - [`gather_lists`]: a fragment submitted as several parts (empty ones
//!   too) arrives as their concatenation.
//! - [`back_pressure`]: submitting until [`Submit::NoResource`], then
//!   progressing, lets every fragment through in order; a refused fragment
//!   leaves nothing behind; token 0 is never answered `Queued`, and every
//!   `Queued` send gets exactly one [`Event::SendComplete`].
//! - [`too_large`]: a fragment above `max_send_size` is refused with
//!   [`BtlError::TooLarge`], never truncated, and the btl goes on.
//! - [`get_bounds`]: gets inside a registered region read the right bytes
//!   (offset 0 and inner offsets, [`Btl::get`] and [`Btl::get_as`] with [`crate::Pull::Alone`]) and
//!   write nothing outside their destination; gets past the end or with a
//!   forged descriptor fail and write nothing; every queued get completes
//!   exactly once. A btl without `get` refuses it.
//! - [`put_bounds`]: puts into memory exposed by [`Btl::register_window`]
//!   write the right bytes at offset 0 and inner offsets, and nothing
//!   else of the owner's memory; puts past the end or with a forged
//!   descriptor fail and write nothing; every queued put completes
//!   exactly once, as [`Event::PutComplete`] or [`Event::PutFailed`]. A
//!   btl without `put` exposes nothing and refuses it.
//! - [`peer_failure`]: once a peer is killed, the survivor reports
//!   [`Event::PeerFailed`] for it exactly once within a bounded number of
//!   passes, and sends to it fail instead of hanging.
//! - [`wait`]: [`Btl::wait`] returns promptly when an event is pending, and
//!   (where it sleeps at all) does not return early without cause more often
//!   than spurious wake-ups explain.
//!
//! What a fixture cannot do ([`Support`]: loopback has no peer to lose, tcp
//! has no get, the simulated fabric's `wait` never sleeps) it says, with the
//! reason; the check is then [`Outcome::Skipped`] (or [`Outcome::Partly`])
//! and says so loudly, and where the btl's own [`Capabilities`] tell, the
//! check first verifies that the fixture hides nothing the btl claims.
//!
//! No check asserts speed: bounds are in progress passes (an idle pass waits
//! a millisecond in each endpoint's [`Btl::wait`]) and timeouts are generous
//! upper bounds or lower bounds on sleeping.

use std::time::{Duration, Instant};

use crate::{Btl, BtlError, Capabilities, Event, LocalMem, MemDesc, Rank, Submit};

/// Whether a fixture's btl can take part in (part of) a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Can {
    /// It can: the check runs.
    Yes,
    /// It cannot, for this reason: the check is skipped and says why.
    No(String),
}

impl Can {
    /// [`Can::No`] with `why`.
    pub fn no(why: impl Into<String>) -> Self {
        Self::No(why.into())
    }
}

/// What a [`Fixture`]'s btl can be checked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// [`Btl::send`] refuses with [`Submit::NoResource`] once enough is
    /// submitted and nothing progresses (a bounded queue or ring). Without
    /// it, [`back_pressure`] still checks delivery and tokens.
    pub back_pressure: Can,
    /// [`Btl::register`] and [`Btl::get`] work between the two endpoints.
    pub get: Can,
    /// [`Fixture::kill`] makes an endpoint fail in a way the other detects.
    pub peer_failure: Can,
    /// [`Btl::wait`] sleeps when nothing is pending (rather than returning
    /// at once, which the trait allows).
    pub wait_sleeps: Can,
}

/// A few connected endpoints of one btl, built fresh for each check.
///
/// Endpoint 0 is the sender (and, for gets, the owner of the memory); the
/// last endpoint is the receiver (the getter). A fixture with one endpoint
/// (loopback) sends to itself.
pub trait Fixture {
    /// The btl under test.
    type Btl: Btl;

    /// A name for messages (`"sim, queued"`).
    fn name(&self) -> String;

    /// What this btl can be checked for.
    fn support(&self) -> Support;

    /// How many endpoints (1 or 2).
    fn endpoints(&self) -> usize;

    /// Endpoint `i`.
    fn btl(&mut self, i: usize) -> &mut Self::Btl;

    /// The rank of endpoint `i` (what the others address it by).
    fn rank(&self, i: usize) -> Rank;

    /// Memory of endpoint `i`'s process (its address space: real memory, or
    /// the rank's `SimMemory`) holding `data`, valid and at this address as
    /// long as the fixture lives, and after its endpoints are dropped.
    fn alloc(&mut self, i: usize, data: &[u8]) -> LocalMem;

    /// The bytes of `mem`, memory of endpoint `i` from [`Fixture::alloc`].
    fn read(&self, i: usize, mem: LocalMem) -> Vec<u8>;

    /// Endpoint `i`'s [`Btl::get`] (or, with `alone`, [`Btl::get_as`] with [`crate::Pull::Alone`])
    /// into `dst`, which lies inside memory [`Fixture::alloc`] gave
    /// endpoint `i`. The suite reads `dst` only once the get is over (its
    /// answer was `Done` or an error, or endpoint `i` reported
    /// `GetComplete`/`GetFailed` with `token`), and keeps the fixture alive
    /// until then: with `alloc`'s guarantee that is `Btl::get`'s contract,
    /// which an implementation's `SAFETY` comment can cite.
    #[allow(clippy::too_many_arguments)]
    fn get(
        &mut self,
        i: usize,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        dst: LocalMem,
        token: u64,
        alone: bool,
    ) -> Result<Submit, BtlError>;

    /// Endpoint `i`'s [`Btl::put`] from `src`, which lies inside memory
    /// [`Fixture::alloc`] gave endpoint `i`. The suite neither writes nor
    /// frees `src` until the put is over (as for [`Fixture::get`]), which
    /// with `alloc`'s guarantee is `Btl::put`'s contract: the default
    /// calls it so.
    fn put(
        &mut self,
        i: usize,
        peer: Rank,
        remote: &MemDesc,
        offset: u64,
        src: LocalMem,
        token: u64,
    ) -> Result<Submit, BtlError> {
        // SAFETY: `src` is memory `alloc` gave endpoint `i` (valid while the
        // fixture lives, which the suite keeps alive until the put ends),
        // and the suite does not write it meanwhile (see above).
        #[allow(unsafe_code)]
        unsafe {
            self.btl(i).put(peer, remote, offset, src, token)
        }
    }

    /// Make endpoint `i` fail the way this btl's peers fail (its process
    /// dies, its link drops, its memory turns to garbage); the suite does
    /// not use endpoint `i` afterwards. Only called where
    /// [`Support::peer_failure`] is [`Can::Yes`].
    fn kill(&mut self, i: usize);
}

/// The memory of a fixture whose endpoints share this process's address
/// space (shm, tcp and ib endpoints on threads): [`Fixture::alloc`] and
/// [`Fixture::read`] for them. Buffers live, at their addresses, as long as
/// this value; a fixture declares it after its endpoints, so they are
/// dropped first and no get outlives the memory it writes.
#[derive(Debug, Default)]
pub struct HostBuffers(Vec<Box<[u8]>>);

impl HostBuffers {
    /// A new buffer holding `data` ([`Fixture::alloc`]).
    pub fn alloc(&mut self, data: &[u8]) -> LocalMem {
        let mut b: Box<[u8]> = data.into();
        let mem = LocalMem::of(&mut b);
        self.0.push(b);
        mem
    }

    /// The bytes of `mem`, a buffer [`HostBuffers::alloc`] gave
    /// ([`Fixture::read`]).
    ///
    /// # Panics
    /// If `mem` is not one of them.
    pub fn read(&self, mem: LocalMem) -> Vec<u8> {
        self.0
            .iter()
            .find(|b| b.as_ptr() as u64 == mem.addr && b.len() == mem.len)
            .expect("memory from alloc")
            .to_vec()
    }
}

/// What a check did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every part of it ran and passed.
    Ran,
    /// Not run: the fixture cannot do it (the reason).
    Skipped(String),
    /// Ran and passed, except a part the fixture cannot do (the reason).
    Partly(String),
}

/// Print what a check did, loudly when it did not all run (for
/// [`conformance_tests!`](crate::conformance_tests)).
pub fn report(check: &str, outcome: &Outcome) {
    match outcome {
        Outcome::Ran => {}
        Outcome::Skipped(why) => eprintln!("conformance: {check}: SKIPPED: {why}"),
        Outcome::Partly(why) => eprintln!("conformance: {check}: PARTLY SKIPPED: {why}"),
    }
}

/// One `#[test]` per conformance check, in a module named `$module`,
/// each building its fixtures with `$new` (an expression of a closure type
/// `FnMut() -> impl Fixture`). Skips are printed to stderr.
#[macro_export]
macro_rules! conformance_tests {
    ($module:ident, $new:expr) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            $crate::conformance_tests!(@one $new; ordering gather_lists back_pressure too_large get_bounds put_bounds peer_failure wait);
        }
    };
    (@one $new:expr; $($check:ident)*) => {
        $(
            #[test]
            fn $check() {
                let mut new = $new;
                let outcome = $crate::conformance::$check(&mut new);
                $crate::conformance::report(stringify!($check), &outcome);
            }
        )*
    };
}

/// Progress passes a check drives before it gives up on a condition.
pub const PASSES: usize = 100_000;

/// How long an idle pass waits in each endpoint.
const IDLE: Duration = Duration::from_millis(1);

/// What one endpoint reported.
#[derive(Debug, Default)]
struct Log {
    frags: Vec<(Rank, Vec<u8>)>,
    /// A streamed fragment being read.
    partial: Option<(Rank, Vec<u8>)>,
    sent: Vec<u64>,
    got: Vec<u64>,
    get_failed: Vec<u64>,
    put: Vec<u64>,
    put_failed: Vec<u64>,
    failed: Vec<Rank>,
}

/// A one-sided transfer of the checks: [`Btl::get`] or [`Btl::put`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Xfer {
    Get,
    Put,
}

impl Xfer {
    fn name(self) -> &'static str {
        match self {
            Xfer::Get => "get",
            Xfer::Put => "put",
        }
    }
}

impl Log {
    /// The tokens of `x`'s transfers that completed, and that failed.
    fn ended(&self, x: Xfer) -> (&[u64], &[u64]) {
        match x {
            Xfer::Get => (&self.got, &self.get_failed),
            Xfer::Put => (&self.put, &self.put_failed),
        }
    }

    /// Completions (good or failed) of transfer `token` of kind `x`.
    fn ends(&self, x: Xfer, token: u64) -> usize {
        let (ok, failed) = self.ended(x);
        ok.iter().chain(failed).filter(|&&t| t == token).count()
    }
}

fn progress_into<B: Btl>(b: &mut B, log: &mut Log) -> usize {
    b.progress(&mut |e| match e {
        Event::Frag { peer, data } => {
            assert!(
                log.partial.is_none(),
                "a fragment from rank {peer} overtook a streamed one"
            );
            log.frags.push((peer, data.to_vec()));
        }
        Event::FragStream {
            peer,
            head,
            len,
            taken,
            body,
        } => {
            let (from, v) = log.partial.get_or_insert_with(|| (peer, Vec::new()));
            assert_eq!(
                (*from, v.len()),
                (peer, taken),
                "a streamed fragment resumed from another peer or offset"
            );
            assert!(
                head.len() == len.min(crate::STREAM_HEAD),
                "FragStream head of {} bytes for a body of {len}",
                head.len()
            );
            let at = v.len();
            v.resize(len, 0);
            let n = body.read(&mut v[at..]);
            v.truncate(at + n);
            if v.len() == len {
                let done = log.partial.take().expect("partial");
                log.frags.push(done);
            }
        }
        Event::SendComplete { token } => log.sent.push(token),
        Event::GetComplete { token } => log.got.push(token),
        Event::GetFailed { token, .. } => log.get_failed.push(token),
        Event::PutComplete { token } => log.put.push(token),
        Event::PutFailed { token, .. } => log.put_failed.push(token),
        Event::PeerFailed { peer } => log.failed.push(peer),
    })
}

/// A fixture under test, with what each endpoint reported.
struct Rig<F: Fixture> {
    f: F,
    logs: Vec<Log>,
    dead: Vec<bool>,
    name: String,
}

impl<F: Fixture> Rig<F> {
    fn new(new: &mut dyn FnMut() -> F) -> Self {
        let f = new();
        let n = f.endpoints();
        assert!(
            (1..=2).contains(&n),
            "a fixture has 1 or 2 endpoints, not {n}"
        );
        Self {
            name: f.name(),
            logs: (0..n).map(|_| Log::default()).collect(),
            dead: vec![false; n],
            f,
        }
    }

    /// (sender, receiver): the first and last endpoints.
    fn ends(&self) -> (usize, usize) {
        (0, self.logs.len() - 1)
    }

    fn caps(&mut self, i: usize) -> Capabilities {
        self.f.btl(i).caps().clone()
    }

    /// One progress pass over every live endpoint; an idle pass waits
    /// [`IDLE`] in each.
    fn pass(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.logs.len() {
            if !self.dead[i] {
                n += progress_into(self.f.btl(i), &mut self.logs[i]);
            }
        }
        if n == 0 {
            for i in 0..self.logs.len() {
                if !self.dead[i] {
                    self.f.btl(i).wait(IDLE);
                }
            }
        }
        n
    }

    /// Pass until `done` holds; fails the check after [`PASSES`].
    fn drive(&mut self, what: &str, mut done: impl FnMut(&[Log]) -> bool) {
        for _ in 0..PASSES {
            if done(&self.logs) {
                return;
            }
            self.pass();
        }
        assert!(
            done(&self.logs),
            "{}: {what}: not reached in {PASSES} progress passes",
            self.name
        );
    }

    /// A few more passes, for whatever should *not* happen to show up.
    fn settle(&mut self) {
        for _ in 0..32 {
            self.pass();
        }
    }

    /// Submit transfer `token` of kind `x` from endpoint `at` (`submit`,
    /// again while it answers `NoResource`) and see it end: whether it
    /// succeeded. Its token goes to `queued` (answered `Queued`) or
    /// `finished` (answered at once).
    fn transfer(
        &mut self,
        x: Xfer,
        at: usize,
        token: u64,
        queued: &mut Vec<u64>,
        finished: &mut Vec<u64>,
        mut submit: impl FnMut(&mut F) -> Result<Submit, BtlError>,
    ) -> bool {
        let mut res = submit(&mut self.f);
        for _ in 0..PASSES {
            if res != Ok(Submit::NoResource) {
                break;
            }
            self.pass();
            res = submit(&mut self.f);
        }
        let what = x.name();
        match res {
            Ok(Submit::Done) => {
                finished.push(token);
                true
            }
            Ok(Submit::Queued) => {
                queued.push(token);
                self.drive(&format!("a queued {what}'s completion"), |l| {
                    l[at].ends(x, token) > 0
                });
                self.logs[at].ended(x).0.contains(&token)
            }
            Ok(Submit::NoResource) => panic!("{}: a {what} refused for {PASSES} passes", self.name),
            Err(_) => {
                finished.push(token);
                false
            }
        }
    }

    /// Every queued transfer of kind `x` at endpoint `at` (`queued`) ended
    /// exactly once, and none of those answered at once (`finished`) ended
    /// again.
    fn check_ends(&self, x: Xfer, at: usize, queued: &[u64], finished: &[u64]) {
        let (name, what) = (&self.name, x.name());
        for &t in queued {
            let n = self.logs[at].ends(x, t);
            assert_eq!(n, 1, "{name}: queued {what} {t} completed {n} times");
        }
        for &t in finished {
            assert_eq!(
                self.logs[at].ends(x, t),
                0,
                "{name}: {what} {t} answered at once, then completed again"
            );
        }
    }

    /// Send (or stream-send) until the btl takes the fragment, passing
    /// while it answers `NoResource`; returns `Done` or `Queued`.
    fn submit(
        &mut self,
        from: usize,
        to: Rank,
        parts: &[&[u8]],
        token: u64,
        stream: bool,
    ) -> Submit {
        for _ in 0..PASSES {
            let b = self.f.btl(from);
            let res = if stream {
                b.send_stream(to, parts, token)
            } else {
                b.send(to, parts, token)
            };
            match res {
                Ok(Submit::NoResource) => {
                    self.pass();
                }
                Ok(s) => {
                    assert!(
                        !(token == 0 && s == Submit::Queued),
                        "{}: a send with token 0 was answered Queued",
                        self.name
                    );
                    return s;
                }
                Err(e) => panic!(
                    "{}: send of {} bytes to rank {to}: {e}",
                    self.name,
                    len(parts)
                ),
            }
        }
        panic!(
            "{}: a send of {} bytes was refused for {PASSES} passes",
            self.name,
            len(parts)
        )
    }
}

fn len(parts: &[&[u8]]) -> usize {
    parts.iter().map(|p| p.len()).sum()
}

/// Checkable bytes: fragment `seq`'s `len` bytes (its number first, where it
/// fits).
fn pattern(seq: u64, len: usize) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let head = seq.to_le_bytes();
    let k = len.min(8);
    v[..k].copy_from_slice(&head[..k]);
    v
}

/// Sizes for fragment `i`: every 8 fragments, 0 B, 1 B, the eager limit,
/// `max_send_size` and its neighbours, the rest spread over `0..=max`.
fn size(caps: &Capabilities, i: usize) -> usize {
    let max = caps.max_send_size;
    let eager = caps.eager_limit.min(max);
    let mut x = (i as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
    x ^= x >> 29;
    match i % 8 {
        0 => 0,
        1 => 1,
        2 => eager,
        3 => max,
        4 => (eager + 1).min(max),
        5 => max - 1,
        6 => (x % 64) as usize,
        _ => (x % (max as u64 + 1)) as usize,
    }
}

/// Fragments `want` arrived at `log`, from `from`, in order, each once.
fn check_stream(name: &str, log: &Log, from: Rank, want: &[Vec<u8>]) {
    let got: Vec<&(Rank, Vec<u8>)> = log.frags.iter().collect();
    assert_eq!(
        got.len(),
        want.len(),
        "{name}: {} fragments arrived, {} were sent",
        got.len(),
        want.len()
    );
    for (i, ((peer, g), w)) in got.iter().zip(want).enumerate() {
        assert_eq!(*peer, from, "{name}: fragment {i} from the wrong rank");
        assert!(
            g == w,
            "{name}: fragment {i} differs: {} bytes arrived, {} sent{}",
            g.len(),
            w.len(),
            match g.iter().zip(w).position(|(a, b)| a != b) {
                Some(at) => format!(", first difference at byte {at}"),
                None => String::new(),
            }
        );
    }
}

/// `SendComplete`s are exactly one per `Queued` send.
fn check_send_tokens(name: &str, log: &Log, queued: &[u64]) {
    let mut want = queued.to_vec();
    want.sort_unstable();
    let mut got = log.sent.clone();
    got.sort_unstable();
    assert_eq!(
        got, want,
        "{name}: SendComplete tokens (left) are not exactly the Queued sends' (right)"
    );
}

/// Fragments of mixed sizes, sent and stream-sent, with and without
/// tokens, arrive in order, byte-exact, each once.
pub fn ordering<F: Fixture>(new: &mut dyn FnMut() -> F) -> Outcome {
    let mut r = Rig::new(new);
    let (a, b) = r.ends();
    let caps = r.caps(a);
    let to = r.f.rank(b);
    let n = 400;
    let frags: Vec<Vec<u8>> = (0..n).map(|i| pattern(i as u64, size(&caps, i))).collect();
    let mut queued = Vec::new();
    for (i, f) in frags.iter().enumerate() {
        let token = if i % 2 == 0 { 0 } else { 1000 + i as u64 };
        if r.submit(a, to, &[f], token, i % 5 == 3) == Submit::Queued {
            queued.push(token);
        }
    }
    r.drive("every fragment delivered", |l| {
        l[b].frags.len() >= n && l[a].sent.len() >= queued.len()
    });
    r.settle();
    check_stream(&r.name, &r.logs[b], r.f.rank(a), &frags);
    check_send_tokens(&r.name, &r.logs[a], &queued);
    Outcome::Ran
}

/// A fragment submitted as several parts, empty ones included, arrives as
/// their concatenation.
pub fn gather_lists<F: Fixture>(new: &mut dyn FnMut() -> F) -> Outcome {
    let mut r = Rig::new(new);
    let (a, b) = r.ends();
    let caps = r.caps(a);
    let to = r.f.rank(b);
    let max = caps.max_send_size;
    let mut want = Vec::new();
    let totals = [0, 1, 2, 3, caps.eager_limit.min(max), max / 2 + 1, max];
    for (seq, total) in totals.into_iter().enumerate() {
        let whole = pattern(seq as u64, total);
        let (x, rest) = whole.split_at(total / 3);
        let (y, z) = rest.split_at(rest.len() / 2);
        let sixteenth = (total / 16).max(1);
        let many: Vec<&[u8]> = whole.chunks(sixteenth).collect();
        let splits: Vec<Vec<&[u8]>> = vec![
            vec![&whole],
            vec![&[], &whole, &[]],
            vec![x, y, z],
            vec![&[], x, &[], &[], y, z, &[]],
            many,
            vec![&[]; 5],
        ];
        for (k, parts) in splits.iter().enumerate() {
            // The last split is five empty parts: an empty fragment.
            let expect = if k == splits.len() - 1 {
                Vec::new()
            } else {
                whole.clone()
            };
            r.submit(a, to, parts, 0, k % 2 == 1);
            want.push(expect);
        }
    }
    let n = want.len();
    r.drive("every gathered fragment delivered", |l| {
        l[b].frags.len() >= n
    });
    r.settle();
    check_stream(&r.name, &r.logs[b], r.f.rank(a), &want);
    Outcome::Ran
}

/// Submitting until `NoResource` (or a large bound), then progressing, lets
/// every fragment through in order; `NoResource` takes nothing; token 0 is
/// never `Queued` and every `Queued` send completes exactly once.
pub fn back_pressure<F: Fixture>(new: &mut dyn FnMut() -> F) -> Outcome {
    let mut r = Rig::new(new);
    let (a, b) = r.ends();
    let caps = r.caps(a);
    let support = r.f.support();
    let (from, to) = (r.f.rank(a), r.f.rank(b));
    let max = caps.max_send_size;
    let eager = caps.eager_limit.min(max);
    // Connect first (a lazily connecting btl refuses for other reasons).
    r.submit(a, to, &[b"warm-up"], 0, false);
    r.drive("the warm-up fragment delivered", |l| l[b].frags.len() == 1);
    r.logs[b].frags.clear();
    // Submit without progressing anyone until the btl refuses.
    let bound_frags = 4096;
    let bound_bytes = 64 << 20;
    let sizes = [max, 1, eager, max / 2, 0];
    let frag = |i: usize| pattern(i as u64, sizes[i % sizes.len()]);
    let token_of = |i: usize| if i % 2 == 1 { 1 + i as u64 } else { 0 };
    let mut frags = Vec::new();
    let mut queued = Vec::new();
    let mut bytes = 0;
    let mut refused = None;
    while frags.len() < bound_frags && bytes < bound_bytes {
        let i = frags.len();
        let f = frag(i);
        let token = token_of(i);
        match r.f.btl(a).send(to, &[&f], token) {
            Ok(Submit::Done) => {}
            Ok(Submit::Queued) => {
                assert_ne!(
                    token, 0,
                    "{}: a send with token 0 was answered Queued",
                    r.name
                );
                queued.push(token);
            }
            Ok(Submit::NoResource) => {
                refused = Some(f);
                break;
            }
            Err(e) => panic!("{}: send {i} of {} bytes: {e}", r.name, f.len()),
        }
        bytes += f.len();
        frags.push(f);
    }
    let k = frags.len();
    if let (Can::Yes, None) = (&support.back_pressure, &refused) {
        panic!(
            "{}: {k} fragments ({bytes} bytes) taken with nothing progressing, never NoResource",
            r.name
        );
    }
    if let Some(f) = refused {
        // What was taken arrives; the refused fragment does not, in whole or
        // in part, until it is submitted again.
        r.drive("every fragment taken before the refusal delivered", |l| {
            l[b].frags.len() >= k
        });
        r.settle();
        assert_eq!(
            r.logs[b].frags.len(),
            k,
            "{}: a fragment refused with NoResource was delivered (whole or in part)",
            r.name
        );
        check_stream(&r.name, &r.logs[b], from, &frags);
        frags.push(f);
        if r.submit(a, to, &[&frags[k]], token_of(k), false) == Submit::Queued {
            queued.push(token_of(k));
        }
        // And on: more than fills the queue again, retried as refused.
        for i in k + 1..2 * k + 64 {
            let f = frag(i);
            if r.submit(a, to, &[&f], token_of(i), false) == Submit::Queued {
                queued.push(token_of(i));
            }
            frags.push(f);
        }
    }
    let n = frags.len();
    r.drive("every fragment delivered", |l| {
        l[b].frags.len() >= n && l[a].sent.len() >= queued.len()
    });
    r.settle();
    check_stream(&r.name, &r.logs[b], from, &frags);
    check_send_tokens(&r.name, &r.logs[a], &queued);
    match support.back_pressure {
        Can::Yes => Outcome::Ran,
        Can::No(why) => Outcome::Partly(format!(
            "{}: never refuses ({why}): delivery and tokens checked, NoResource not",
            r.name
        )),
    }
}

/// A fragment above `max_send_size` is refused with `TooLarge`, never
/// truncated or delivered, and the btl goes on.
pub fn too_large<F: Fixture>(new: &mut dyn FnMut() -> F) -> Outcome {
    let mut r = Rig::new(new);
    let (a, b) = r.ends();
    let caps = r.caps(a);
    let to = r.f.rank(b);
    let max = caps.max_send_size;
    let big = pattern(1, max + 1);
    let (x, y) = big.split_at(max);
    let (p, q) = big.split_at(1);
    let splits: [(&str, Vec<&[u8]>, bool); 5] = [
        ("one part", vec![&big], false),
        ("max + 1", vec![x, y], false),
        ("1 + max", vec![p, q], false),
        ("with empty parts", vec![&[], x, &[], y], false),
        ("streamed", vec![&big], true),
    ];
    for (k, (how, parts, stream)) in splits.iter().enumerate() {
        let ep = r.f.btl(a);
        let token = 77 + k as u64;
        let res = if *stream {
            ep.send_stream(to, parts, token)
        } else {
            ep.send(to, parts, token)
        };
        assert_eq!(
            res,
            Err(BtlError::TooLarge { len: max + 1, max }),
            "{}: a fragment of max_send_size + 1 bytes ({how})",
            r.name
        );
    }
    let last = pattern(2, max);
    r.submit(a, to, &[&last], 0, false);
    r.submit(a, to, &[b"after"], 0, false);
    r.drive("the fragments after the refusals delivered", |l| {
        l[b].frags.len() >= 2
    });
    r.settle();
    check_stream(&r.name, &r.logs[b], r.f.rank(a), &[last, b"after".to_vec()]);
    assert!(
        r.logs[a].sent.is_empty(),
        "{}: SendComplete for a refused fragment: {:?}",
        r.name,
        r.logs[a].sent
    );
    Outcome::Ran
}

/// The (offset, length) spans the get and put checks move inside a region
/// of `region` bytes: all of it, one byte, none, inner offsets, the last
/// byte, and a large tail.
fn spans(region: usize) -> [(usize, usize); 7] {
    [
        (0, region),
        (0, 1),
        (0, 0),
        (4097, 1000),
        (region - 1, 1),
        (13, region - 13),
        (3, 300_000),
    ]
}

/// Guard bytes on both sides of a get's destination.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xA5;

/// Gets inside a registered region read the right bytes; gets outside it or
/// with a forged descriptor fail and write nothing; every queued get
/// completes exactly once. A btl without get refuses it.
pub fn get_bounds<F: Fixture>(new: &mut dyn FnMut() -> F) -> Outcome {
    let mut r = Rig::new(new);
    let (owner, getter) = r.ends();
    let support = r.f.support();
    let claims = r.caps(getter).get;
    if let Can::No(why) = support.get {
        assert!(
            !claims,
            "{}: the fixture says no get ({why}) but the btl's caps().get is true",
            r.name
        );
        // It refuses a get, and registers nothing.
        let dst = r.f.alloc(getter, &[GUARD_BYTE; 16]);
        assert_eq!(r.f.btl(owner).register(dst.addr, 16), None, "{}", r.name);
        let remote = MemDesc {
            addr: dst.addr,
            len: 16,
            key: 0,
        };
        let peer = r.f.rank(owner);
        for alone in [false, true] {
            let res = r.f.get(getter, peer, &remote, 0, dst, 1, alone);
            assert!(
                res.is_err(),
                "{}: a btl without get answered {res:?} (alone: {alone})",
                r.name
            );
        }
        r.settle();
        assert_eq!(r.f.read(getter, dst), [GUARD_BYTE; 16], "{}", r.name);
        return Outcome::Skipped(format!("{}: {why}", r.name));
    }
    assert!(
        claims,
        "{}: the fixture says get, caps().get says no",
        r.name
    );
    assert_eq!(r.logs.len(), 2, "{}: a get needs two endpoints", r.name);
    let peer = r.f.rank(owner);
    // The region, with a tail that is allocated but not registered: a btl
    // that skips its bounds check reads it and is caught.
    let region = (1 << 20) + 77;
    let data = pattern(5, region + 4096);
    let src = r.f.alloc(owner, &data);
    let desc =
        r.f.btl(owner)
            .register(src.addr, region as u64)
            .unwrap_or_else(|| panic!("{}: register refused with caps().get", r.name));
    let mut token = 100;
    let mut queued = Vec::new();
    let mut finished = Vec::new();
    // One get into a guarded buffer; returns (its result, the window, all).
    let mut get = |r: &mut Rig<F>, remote: &MemDesc, off: u64, len: usize, alone: bool| {
        token += 1;
        let buf = r.f.alloc(getter, &vec![GUARD_BYTE; len + 2 * GUARD]);
        let dst = LocalMem {
            addr: buf.addr + GUARD as u64,
            len,
        };
        let ok = r.transfer(Xfer::Get, getter, token, &mut queued, &mut finished, |f| {
            f.get(getter, peer, remote, off, dst, token, alone)
        });
        let all = r.f.read(getter, buf);
        (ok, all)
    };
    let guards_ok = |all: &[u8]| {
        all[..GUARD].iter().all(|&x| x == GUARD_BYTE)
            && all[all.len() - GUARD..].iter().all(|&x| x == GUARD_BYTE)
    };
    for (k, (off, len)) in spans(region).into_iter().enumerate() {
        let alone = k % 2 == 1;
        let (ok, all) = get(&mut r, &desc, off as u64, len, alone);
        assert!(
            ok,
            "{}: a get of {len} bytes at offset {off} (alone: {alone}) failed",
            r.name
        );
        assert!(
            guards_ok(&all),
            "{}: a get of {len} bytes at offset {off} wrote outside its destination",
            r.name
        );
        assert!(
            all[GUARD..GUARD + len] == data[off..off + len],
            "{}: a get of {len} bytes at offset {off} (alone: {alone}) read the wrong bytes",
            r.name
        );
    }
    let bad = bad_transfers(desc, region, true);
    for (k, (what, remote, off, len)) in bad.into_iter().enumerate() {
        let alone = k % 2 == 1;
        let (ok, all) = get(&mut r, &remote, off, len, alone);
        assert!(
            !ok,
            "{}: a get {what} ({len} bytes at offset {off} of {remote:?}) succeeded",
            r.name
        );
        assert!(
            all.iter().all(|&x| x == GUARD_BYTE),
            "{}: a failed get {what} wrote into its destination",
            r.name
        );
    }
    r.settle();
    r.check_ends(Xfer::Get, getter, &queued, &finished);
    Outcome::Ran
}

/// Transfers a btl must refuse: past the end of `desc` (`region` bytes),
/// at overflowing offsets, with forged keys, of a region larger than it;
/// with `unmapped`, of memory nobody registered either. (what, the
/// descriptor, offset, length).
fn bad_transfers(
    desc: MemDesc,
    region: usize,
    unmapped: bool,
) -> Vec<(&'static str, MemDesc, u64, usize)> {
    let forged = |key| MemDesc { key, ..desc };
    let v = [
        (true, ("past the end", desc, region as u64 - 8, 16)),
        (true, ("at the end", desc, region as u64, 1)),
        (
            unmapped,
            ("of nothing past the end", desc, region as u64 + 1, 0),
        ),
        (true, ("far past the end", desc, region as u64 + 4000, 64)),
        (true, ("at an overflowing offset", desc, u64::MAX - 7, 16)),
        (true, ("with a forged key", forged(u64::MAX), 0, 64)),
        (
            unmapped,
            ("with another forged key", forged(i32::MAX as u64), 0, 64),
        ),
        (
            unmapped,
            (
                "of unmapped memory",
                MemDesc {
                    addr: 16,
                    len: 4096,
                    key: desc.key,
                },
                0,
                64,
            ),
        ),
        (true, ("of a large region past the end", desc, 4096, region)),
    ];
    v.into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, b)| b)
        .collect()
}

/// Puts into exposed memory write exactly their bytes; bad ones fail and
/// write nothing; queued ones complete once (see the module header).
pub fn put_bounds<F: Fixture>(new: &mut dyn FnMut() -> F) -> Outcome {
    let mut r = Rig::new(new);
    let (owner, putter) = r.ends();
    if !r.caps(putter).put {
        // It exposes nothing and refuses a put.
        let mem = r.f.alloc(owner, &[GUARD_BYTE; 16]);
        assert_eq!(
            r.f.btl(owner).register_window(mem.addr, 16),
            None,
            "{}: a btl without put exposed a window",
            r.name
        );
        let src = r.f.alloc(putter, &[1; 16]);
        let remote = MemDesc {
            addr: mem.addr,
            len: 16,
            key: 0,
        };
        let peer = r.f.rank(owner);
        let res = r.f.put(putter, peer, &remote, 0, src, 1);
        assert!(
            res.is_err(),
            "{}: a btl without put answered {res:?}",
            r.name
        );
        r.settle();
        assert_eq!(r.f.read(owner, mem), [GUARD_BYTE; 16], "{}", r.name);
        return Outcome::Skipped(format!("{}: no put (caps().put is false)", r.name));
    }
    assert_eq!(r.logs.len(), 2, "{}: a put needs two endpoints", r.name);
    let peer = r.f.rank(owner);
    // The window, then a tail allocated but not exposed: a btl that skips
    // its bounds check writes it and is caught.
    let region = (1 << 20) + 77;
    let mut want = vec![GUARD_BYTE; region + 4096];
    let mem = r.f.alloc(owner, &want);
    let desc =
        r.f.btl(owner)
            .register_window(mem.addr, region as u64)
            .unwrap_or_else(|| panic!("{}: register_window refused with caps().put", r.name));
    let mut token = 500;
    let mut queued = Vec::new();
    let mut finished = Vec::new();
    let mut put = |r: &mut Rig<F>, remote: &MemDesc, off: u64, data: &[u8]| {
        token += 1;
        let src = r.f.alloc(putter, data);
        r.transfer(Xfer::Put, putter, token, &mut queued, &mut finished, |f| {
            f.put(putter, peer, remote, off, src, token)
        })
    };
    for (k, (off, len)) in spans(region).into_iter().enumerate() {
        let data = pattern(20 + k as u64, len);
        let ok = put(&mut r, &desc, off as u64, &data);
        assert!(
            ok,
            "{}: a put of {len} bytes at offset {off} failed",
            r.name
        );
        want[off..off + len].copy_from_slice(&data);
        assert!(
            r.f.read(owner, mem) == want,
            "{}: after a put of {len} bytes at offset {off}, the owner's memory is not what \
             was written (or bytes outside it changed)",
            r.name
        );
    }
    let bad = bad_transfers(desc, region, false);
    for (what, remote, off, len) in bad {
        let ok = put(&mut r, &remote, off, &pattern(99, len));
        assert!(
            !ok,
            "{}: a put {what} ({len} bytes at offset {off} of {remote:?}) succeeded",
            r.name
        );
        assert!(
            r.f.read(owner, mem) == want,
            "{}: a failed put {what} wrote into the owner's memory",
            r.name
        );
    }
    r.settle();
    r.check_ends(Xfer::Put, putter, &queued, &finished);
    r.f.btl(owner).deregister(&desc);
    Outcome::Ran
}

/// Once its peer is killed, an endpoint reports `PeerFailed` for it once,
/// within a bounded number of passes, and sends to it fail.
pub fn peer_failure<F: Fixture>(new: &mut dyn FnMut() -> F) -> Outcome {
    let mut r = Rig::new(new);
    if let Can::No(why) = r.f.support().peer_failure {
        return Outcome::Skipped(format!("{}: {why}", r.name));
    }
    assert_eq!(r.logs.len(), 2, "{}: a failure needs two endpoints", r.name);
    let (victim, survivor) = r.ends();
    let (v, s) = (r.f.rank(victim), r.f.rank(survivor));
    // Talk both ways first, so every connection exists.
    r.submit(victim, s, &[b"hello"], 0, false);
    r.submit(survivor, v, &[b"hello back"], 0, false);
    r.drive("the greetings delivered", |l| {
        l[survivor].frags.len() == 1 && l[victim].frags.len() == 1
    });
    r.f.kill(victim);
    r.dead[victim] = true;
    // A send racing the failure returns, whatever it answers.
    let _ = r.f.btl(survivor).send(v, &[b"are you there?"], 0);
    r.drive("PeerFailed for the killed endpoint", |l| {
        l[survivor].failed.contains(&v)
    });
    r.settle();
    assert_eq!(
        r.logs[survivor].failed,
        vec![v],
        "{}: PeerFailed must be reported once, for the killed rank only",
        r.name
    );
    for _ in 0..3 {
        let res = r.f.btl(survivor).send(v, &[b"still there?"], 0);
        assert!(
            res.is_err(),
            "{}: a send to a failed peer answered {res:?}",
            r.name
        );
    }
    Outcome::Ran
}

/// `wait` returns promptly when an event is pending, and where it sleeps,
/// does not return early without cause more often than spurious wake-ups
/// explain.
pub fn wait<F: Fixture>(new: &mut dyn FnMut() -> F) -> Outcome {
    // Far longer than any delivery takes: a wait that runs to it missed the
    // pending event.
    const LONG: Duration = Duration::from_secs(30);
    const NAP: Duration = Duration::from_millis(20);
    let mut r = Rig::new(new);
    let (a, b) = r.ends();
    let to = r.f.rank(b);
    // Connect first, and let everything settle.
    r.submit(a, to, &[b"warm-up"], 0, false);
    r.drive("the warm-up fragment delivered", |l| l[b].frags.len() == 1);
    r.settle();
    for round in 0..3 {
        r.submit(a, to, &[b"ping"], 0, false);
        let t = Instant::now();
        r.f.btl(b).wait(LONG);
        let slept = t.elapsed();
        assert!(
            slept < LONG / 2,
            "{}: wait slept {slept:?} with a fragment pending (round {round})",
            r.name
        );
        r.drive("the pending fragment delivered", |l| {
            l[b].frags.len() == 2 + round
        });
    }
    r.settle();
    if let Can::No(why) = r.f.support().wait_sleeps {
        return Outcome::Partly(format!(
            "{}: wait does not sleep ({why}): only its prompt return checked",
            r.name
        ));
    }
    // Nothing pending: ten naps must sleep at least half their time in all
    // (a slow machine only makes them longer).
    let t = Instant::now();
    for _ in 0..10 {
        r.f.btl(b).wait(NAP);
    }
    let slept = t.elapsed();
    assert!(
        slept >= 5 * NAP,
        "{}: ten waits of {NAP:?} with nothing pending took {slept:?} in all",
        r.name
    );
    Outcome::Ran
}
