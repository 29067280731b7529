//! Requests with no slot in the request table: the sends and receives of
//! the hot paths (`MPI_Isend`, `MPI_Irecv` and their modes on
//! `MPI_COMM_WORLD` or `MPI_COMM_SELF`, contiguous predefined data) are
//! named by their pml id instead, as MPICH names its lightweight requests
//! by their object. Starting one stores the id in [`IDS`] at the id's
//! index (no lock, no 100-byte slot to fill, move out and move back at the
//! completion call); its handle ([`crate::abi::encode_direct`]) carries the
//! index, the low bits of the id's generation, whether it is a send, and
//! its communicator.
//!
//! A completion call takes the id out of its entry (so two calls on one
//! handle never both get it: a compare-exchange under
//! `MPI_THREAD_MULTIPLE`, a load and a store below it, where calls do not
//! overlap), rebuilds the runtime's request from it, and
//! either completes it or, still in flight, puts the id back. A stale
//! handle (completed, freed) finds its entry empty or holding another
//! generation and fails with `MPI_ERR_REQUEST`. An id whose index does not
//! fit a handle (more than 131 071 requests in flight) goes to the table
//! as before.

use std::sync::atomic::{AtomicU64, Ordering};

use gmpi::{Error, ErrorClass, Request};

use crate::abi::{
    decode_direct, encode_direct, DirectHandle, MPI_Comm, MPI_Request, DIRECT_GEN_MASK,
    DIRECT_INDICES, MPI_COMM_SELF, MPI_COMM_WORLD,
};
use crate::tables::requests::Active;
use crate::tables::world::err;

/// The pml id + 1 of each direct request in flight and not being completed
/// (0: none), by the id's index.
static IDS: [AtomicU64; DIRECT_INDICES] = [const { AtomicU64::new(0) }; DIRECT_INDICES];

/// Where [`crate::p2p`]'s taken requests say a direct request sits: above
/// every table slot (table slots stay below 2^25).
const SLOT_BASE: usize = 1 << 30;

fn generation(raw: u64) -> u32 {
    (raw >> 32) as u32 & DIRECT_GEN_MASK
}

/// Name `r`, just started by `MPI_Isend`-like calls (`send`) or
/// `MPI_Irecv`-like ones on `comm`, by a direct handle; `Err(r)` where it
/// cannot be (another communicator, a request that is not a pml operation
/// in flight, an index too large): the caller gives it a table slot.
#[inline]
pub fn register(
    r: Request<'static>,
    comm: MPI_Comm,
    send: bool,
) -> Result<MPI_Request, Request<'static>> {
    let Some(raw) = r.raw_id() else {
        return Err(r);
    };
    match register_raw(raw, comm, send) {
        Some(h) => {
            // The handle names the operation now.
            let _ = r.into_raw();
            Ok(h)
        }
        None => Err(r),
    }
}

/// [`register`] for the pml id `raw` of an operation in flight, not made
/// into a request (`gmpi`'s `isend_raw`/`irecv_raw`): `None` where it
/// cannot be named by a direct handle (the caller makes the request with
/// [`Request::from_raw`] and gives it a table slot).
#[inline]
pub fn register_raw(raw: u64, comm: MPI_Comm, send: bool) -> Option<MPI_Request> {
    let on_self = match comm {
        MPI_COMM_WORLD => false,
        MPI_COMM_SELF => true,
        _ => return None,
    };
    let index = (raw & 0xffff_ffff) as usize;
    if index >= DIRECT_INDICES {
        return None;
    }
    IDS[index].store(raw + 1, Ordering::Release);
    Some(encode_direct(DirectHandle {
        index,
        gen: generation(raw),
        send,
        on_self,
    }))
}

/// Take the pml id direct handle `h` names out of its entry, for `call`:
/// the id and the handle's communicator and starting call. `None` if `h`
/// is no direct handle; an `MPI_ERR_REQUEST` error if it names no request
/// in flight.
#[inline]
fn take_id(call: &str, h: MPI_Request) -> Option<Result<(u64, DirectHandle), Error>> {
    let d = decode_direct(h)?;
    let entry = &IDS[d.index];
    let v = entry.load(Ordering::Acquire);
    let live = v != 0
        && generation(v - 1) == d.gen
        && if crate::errors::multithreaded() {
            entry
                .compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        } else {
            // Calls do not overlap below MPI_THREAD_MULTIPLE (gmpi's own
            // threads never enter the C ABI): no other taker can come
            // between the load and this store, and a plain store spares a
            // locked instruction per completed request.
            entry.store(0, Ordering::Relaxed);
            true
        };
    Some(if live {
        Ok((v - 1, d))
    } else {
        Err(stale(call, h))
    })
}

/// [`take_id`]'s error: `h` names no request in flight.
#[cold]
#[inline(never)]
fn stale(call: &str, h: MPI_Request) -> Error {
    err(
        ErrorClass::Request,
        call,
        format!("request = {h:#x} is not a valid request (freed or completed)"),
    )
}

/// The communicator a direct handle names.
#[inline]
fn comm_of(d: &DirectHandle) -> MPI_Comm {
    if d.on_self {
        MPI_COMM_SELF
    } else {
        MPI_COMM_WORLD
    }
}

/// Take the request direct handle `h` names out of its entry, for `call`:
/// its slot for [`keep`] and the operation. `None` if `h` is no direct
/// handle; an `MPI_ERR_REQUEST` error if it names no request in flight.
#[inline]
pub fn take(call: &str, h: MPI_Request) -> Option<Result<(usize, Active), Error>> {
    Some(take_id(call, h)?.map(|(raw, d)| {
        let name = if d.send { "MPI_Isend" } else { "MPI_Irecv" };
        (
            SLOT_BASE + d.index,
            Active::new(Request::from_raw(raw, name), comm_of(&d)),
        )
    }))
}

/// [`take`] for a completion call that needs no [`Active`]: the pml id
/// and the communicator of direct handle `h`.
#[inline]
pub fn take_raw(call: &str, h: MPI_Request) -> Result<(u64, MPI_Comm), Error> {
    match take_id(call, h) {
        Some(Ok((raw, d))) => Ok((raw, comm_of(&d))),
        Some(Err(e)) => Err(e),
        None => Err(err(
            ErrorClass::Request,
            call,
            format!("request = {h:#x} is not a valid request"),
        )),
    }
}

/// Put back a direct request taken by [`take_raw`], still in flight.
#[inline]
pub fn keep_raw(raw: u64) {
    IDS[(raw & 0xffff_ffff) as usize].store(raw + 1, Ordering::Release);
}

/// Whether a taken request's slot is a direct request's.
#[inline]
pub fn is_slot(slot: usize) -> bool {
    slot >= SLOT_BASE
}

/// Put back the direct request of `slot`, taken by [`take`] and still in
/// flight, under its handle.
#[inline]
pub fn keep(slot: usize, a: Active) {
    let Active { req, .. } = a;
    match req.into_raw() {
        Ok(raw) => IDS[slot - SLOT_BASE].store(raw + 1, Ordering::Release),
        // A completion call completes what it took or puts back what is in
        // flight; a completed request here would lose its status.
        Err(r) => debug_assert!(false, "a completed direct request was put back: {r:?}"),
    }
}

/// Whether `h` is a direct handle (which names no table slot).
#[inline]
pub fn is_direct(h: MPI_Request) -> bool {
    decode_direct(h).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{encode, Kind, SENT};

    #[test]
    fn handles_round_trip_and_never_meet_the_table_or_sent() {
        for &(index, gen, send, on_self) in &[
            (0usize, 0u32, false, false),
            (DIRECT_INDICES - 1, DIRECT_GEN_MASK, true, true),
            (12345, 17, true, false),
        ] {
            let d = DirectHandle {
                index,
                gen,
                send,
                on_self,
            };
            let h = encode_direct(d);
            assert_eq!(decode_direct(h), Some(d));
            assert_ne!(h, SENT);
            assert_eq!(
                crate::abi::decode(Kind::Request, h).map(|s| s >= 1 << 25),
                Some(true)
            );
        }
        assert_eq!(decode_direct(SENT), None);
        assert_eq!(decode_direct(encode(Kind::Request, (1 << 25) - 1)), None);
        assert_eq!(decode_direct(encode(Kind::Comm, 1 << 25)), None);
    }

    #[test]
    fn a_stale_or_unknown_handle_is_an_error() {
        let h = encode_direct(DirectHandle {
            index: 77,
            gen: 3,
            send: false,
            on_self: false,
        });
        // Nothing registered at 77.
        let e = take("MPI_Wait", h).unwrap().unwrap_err();
        assert_eq!(e.class(), ErrorClass::Request);
        assert!(e.message().contains("not a valid request"), "{e}");
        // Another generation at 77.
        IDS[77].store((5u64 << 32 | 77) + 1, Ordering::Release);
        assert!(take("MPI_Wait", h).unwrap().is_err());
        IDS[77].store(0, Ordering::Release);
        assert!(take("MPI_Wait", encode(Kind::Request, 5)).is_none());
    }
}
