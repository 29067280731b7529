//! `cudarc`'s device slices as buffers: [`Buffer`] for `CudaSlice<T>` and
//! `CudaView<'_, T>`, [`BufferMut`] for `CudaSlice<T>` and
//! `CudaViewMut<'_, T>` (feature `cuda`, on by default). No `unsafe` here:
//! the device address is taken through `cudarc`'s safe
//! [`DevicePtr::device_ptr`] / [`DevicePtrMut::device_ptr_mut`], and the
//! resulting [`View`] is a raw address like any other (the gpu layer
//! classifies it as device memory and the device paths move it).
//!
//! Ordering. A slice belongs to a stream (`CudaSlice::stream`), and the work
//! queued on it (kernels, copies) may still be running when the program calls
//! gmpi. gmpi reads and writes device memory with its own copies, on the
//! legacy default stream of the current context, which does not wait for
//! non-blocking streams. So, making the view:
//!
//! 1. takes the pointer with `device_ptr(stream)` (`device_ptr_mut` for a
//!    receive) on the slice's own stream: with `cudarc`'s event tracking
//!    (several streams in the context) that makes the stream wait for the
//!    slice's last write (and, for a receive, its last reads) made on any
//!    other stream;
//! 2. synchronizes that stream, so all of that work is finished before gmpi
//!    touches the memory. A stream synchronize, not an event that gmpi's own
//!    stream would wait on: gmpi's copies run from several places (eager
//!    staging, the rendezvous pipeline, IPC peers in other processes, host
//!    staging of collectives), and several of them are not on a stream of
//!    this process at all, so only the host waiting covers them all;
//! 3. drops the `SyncOnDrop` guard. The [`Buffer`] traits return a
//!    [`View`], a plain address without a lifetime, so the guard cannot
//!    travel with it. Dropping it early is sound: the guard only records the
//!    stream's position (already reached: step 2) as the slice's last read or
//!    write event, and the call or request that uses the view keeps the slice
//!    borrowed (`&` to send, `&mut` to receive) until gmpi is done with the
//!    memory. gmpi's device copies are complete when it lets go (each one
//!    waits for the default stream), so work the program queues on the slice
//!    after the borrow ends, on any stream, sees the final bytes.
//!
//! A failing synchronize (an earlier kernel faulted: CUDA errors of that kind
//! are sticky) is recorded in the slice's context, the `cudarc` way
//! (`CudaContext::record_err`, returned by its next call), and logged; the
//! transfer's own driver calls then fail with the same error, which gmpi
//! returns as the call's [`crate::Error`].

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
};

use crate::buffer::{sealed, Buffer, BufferMut, Ty, View};
use crate::datatype::Equivalence;

/// Wait for the work queued on `stream` (the slice's own stream).
fn finish(stream: &CudaStream) {
    if let Err(e) = stream.synchronize() {
        tracing::error!(
            target: "gmpi",
            "synchronizing the stream of a CUDA buffer before a transfer failed: {e}"
        );
        stream.context().record_err(Err::<(), _>(e));
    }
}

/// The view of `len` elements of `T` at device address `ptr`.
fn device_view<T: Equivalence>(ptr: u64, len: usize, writable: bool) -> View {
    View {
        base: ptr,
        len: len * std::mem::size_of::<T>(),
        origin: 0,
        count: len,
        ty: Ty::Basic(T::DATATYPE),
        writable,
    }
}

/// Take the pointer for reading, with prior work on the slice finished.
fn read_view<T: Equivalence, S: DevicePtr<T>>(s: &S) -> View {
    let stream = s.stream();
    let (ptr, guard) = s.device_ptr(stream);
    finish(stream);
    // See the module docs (step 3): recorded after the synchronize.
    drop(guard);
    device_view::<T>(ptr, s.len(), false)
}

/// Take the pointer for writing, with prior work on the slice finished.
fn write_view<T: Equivalence, S: DevicePtrMut<T>>(s: &mut S) -> View {
    // `device_ptr_mut` borrows the slice mutably: hold the stream apart.
    let stream = s.stream().clone();
    let len = s.len();
    let (ptr, guard) = s.device_ptr_mut(&stream);
    finish(&stream);
    drop(guard);
    device_view::<T>(ptr, len, true)
}

/// A `CudaSlice` is a buffer in device memory, everywhere a slice is:
/// point-to-point, non-blocking (the request borrows the slice) and
/// collectives. Work already queued on the slice's stream finishes before
/// gmpi reads it (see the module docs: the slice's stream is synchronized
/// when the call starts).
///
/// ```no_run
/// use gmpi::cudarc::driver::CudaContext;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let u = gmpi::init()?;
/// let w = u.world();
/// let stream = CudaContext::new(0)?.default_stream();
/// if w.rank() == 0 {
///     let v = stream.clone_htod(&[1.0f64, 2.0, 3.0])?;
///     w.send(&v, 1, 0)?;                          // device → rank 1
/// } else if w.rank() == 1 {
///     let mut v = stream.alloc_zeros::<f64>(3)?;
///     w.recv(&mut v, 0, 0)?;                      // straight into device memory
///     let mut more = stream.alloc_zeros::<f64>(3)?;
///     let mut head = more.slice_mut(..2);         // a CudaViewMut
///     let r = w.irecv(&mut head, 0, 1)?;          // borrows `head` until done
///     r.wait()?;
/// }
/// let mut total = stream.alloc_zeros::<i32>(1)?;
/// w.allreduce(&stream.clone_htod(&[w.rank()])?, &mut total, gmpi::Op::Sum)?;
/// # Ok(()) }
/// ```
impl<T: Equivalence + DeviceRepr> sealed::Sealed for CudaSlice<T> {}
impl<T: Equivalence + DeviceRepr> Buffer for CudaSlice<T> {
    fn view(&self) -> View {
        read_view(self)
    }
}
/// Receives into a `CudaSlice` land in its device memory (see the
/// [`Buffer`] impl for the ordering with the slice's stream).
impl<T: Equivalence + DeviceRepr> BufferMut for CudaSlice<T> {
    fn view_mut(&mut self) -> View {
        write_view(self)
    }
}

/// A `CudaView` (`slice.slice(a..b)`, `slice.as_view()`) is a read-only
/// device buffer: send a sub-range of a `CudaSlice` without copying it.
///
/// ```no_run
/// # use gmpi::cudarc::driver::CudaContext;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let u = gmpi::init()?; let w = u.world();
/// let stream = CudaContext::new(0)?.default_stream();
/// let v = stream.clone_htod(&[0u8; 4096])?;
/// w.send(&v.slice(1024..2048), 1, 0)?;
/// # Ok(()) }
/// ```
impl<T: Equivalence + DeviceRepr> sealed::Sealed for CudaView<'_, T> {}
impl<T: Equivalence + DeviceRepr> Buffer for CudaView<'_, T> {
    fn view(&self) -> View {
        read_view(self)
    }
}

/// A `CudaViewMut` (`slice.slice_mut(a..b)`, `slice.as_view_mut()`) is a
/// writable device buffer: receive into a sub-range of a `CudaSlice`.
///
/// ```no_run
/// # use gmpi::cudarc::driver::CudaContext;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let u = gmpi::init()?; let w = u.world();
/// let stream = CudaContext::new(0)?.default_stream();
/// let mut v = stream.alloc_zeros::<u8>(4096)?;
/// w.recv(&mut v.slice_mut(1024..2048), 0, 0)?;
/// # Ok(()) }
/// ```
impl<T: Equivalence + DeviceRepr> sealed::Sealed for CudaViewMut<'_, T> {}
impl<T: Equivalence + DeviceRepr> Buffer for CudaViewMut<'_, T> {
    fn view(&self) -> View {
        read_view(self)
    }
}
impl<T: Equivalence + DeviceRepr> BufferMut for CudaViewMut<'_, T> {
    fn view_mut(&mut self) -> View {
        write_view(self)
    }
}
