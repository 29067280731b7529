//! User buffers as raw memory: the runtime module with `unsafe` (besides the
//! `unsafe impl`s of `datatype.rs`, and the one call of the unsafe
//! `Btl::get` in `progress/execute.rs`, which relies on the lifetime rule
//! below).
//!
//! The pml holds user buffers by address. Every address it hands back comes
//! from a slice the runtime registered while a borrow of that slice is alive:
//! a blocking call holds the borrow for its whole duration, and a non-blocking
//! [`crate::Request`] holds it (lifetime `'a`) until it completes — dropping an
//! unfinished request waits for it. So the raw accesses below always land in
//! live memory the caller lent to gmpi. (As with any borrowed-request API,
//! `mem::forget` on an unfinished request is the one way to break this; the
//! `Request` documentation forbids it.)
//!
//! Window memory is the other kind of lent memory: [`window_read`] and
//! [`window_write`] reach this rank's own memory of a one-sided window
//! between nodes (`win/am.rs`), at addresses inside the window: memory the
//! caller of `Window::create_raw` or `Window::attach` promised stays valid
//! until the window is freed or the region detached, or gmpi's own
//! allocation, which the window's target state keeps alive.

use std::marker::PhantomData;

use gmpi_gpu::{Gpu, GpuError, MemKind};

use crate::progress::HostMemory;

use crate::datatype::{Datatype, Equivalence, Primitive};

/// Host memory reached through raw addresses: what the progress driver reads
/// to send and writes to receive (device memory goes through the gpu layer).
#[derive(Debug, Default)]
pub(crate) struct HostMem;

impl gmpi_pml::HostWrite for HostMem {
    #[inline]
    fn write(&mut self, addr: u64, data: &[u8]) {
        self.with_write(addr, data.len(), |d| gmpi_btl::copy_bytes(d, data));
    }
}

impl HostMem {
    /// Copy the `len` bytes at `src` to `dst`, which may overlap (a root's
    /// own block of a collective, from a send buffer the user may have
    /// placed inside the receive buffer).
    #[inline]
    pub(crate) fn copy(src: u64, dst: u64, len: usize) {
        if len == 0 || src == dst {
            return;
        }
        // SAFETY: (module docs) both ranges lie within buffers the user lent
        // to the blocking call that copies, the destination mutably; `copy`
        // is `memmove`, so an overlap is allowed, and no reference to either
        // range is alive while it runs.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
    }
}

/// Read this rank's window memory at `addr` (see the module docs).
pub(crate) fn window_read(addr: u64, out: &mut [u8]) {
    HostMem.with_read(addr, out.len(), |s| out.copy_from_slice(s));
}

/// Write this rank's window memory at `addr` (see the module docs).
pub(crate) fn window_write(addr: u64, data: &[u8]) {
    HostMem.with_write(addr, data.len(), |d| gmpi_btl::copy_bytes(d, data));
}

impl HostMemory for HostMem {
    #[inline]
    fn with_read<R>(&self, addr: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        if len == 0 {
            return f(&[]);
        }
        // SAFETY: (module docs) `addr..addr+len` lies within a buffer the user
        // lent to a live request or blocking call; the pml never hands out a
        // range beyond the registered length.
        let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        f(s)
    }

    #[inline]
    fn with_write<R>(&mut self, addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        if len == 0 {
            return f(&mut []);
        }
        // SAFETY: as above, and the buffer was lent mutably (a receive), so no
        // other reference to it exists while the request is in flight.
        let s = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
        f(s)
    }
}

/// The datatype of a buffer's elements: a predefined type or a derived one.
#[derive(Debug, Clone)]
pub(crate) enum Ty {
    Basic(crate::datatype::Datatype),
    Derived(crate::typemap::UserDatatype),
}

impl Ty {
    /// Bytes of data in one element.
    pub fn size(&self) -> usize {
        match self {
            Ty::Basic(d) => d.size(),
            Ty::Derived(u) => u.size(),
        }
    }

    /// Whether `count` elements are one run of `count * size` bytes starting
    /// at the origin.
    #[inline]
    pub fn is_contig(&self) -> bool {
        match self {
            Ty::Basic(_) => true,
            Ty::Derived(u) => u.desc().is_contig,
        }
    }

    /// The one primitive every basic element is made of, if there is one
    /// (what a predefined reduction operates on).
    #[inline]
    pub fn prim(&self) -> Option<crate::datatype::Primitive> {
        match self {
            Ty::Basic(crate::datatype::Datatype::Primitive(p)) => Some(*p),
            Ty::Basic(_) => None,
            Ty::Derived(u) => u.desc().homogeneous(),
        }
    }
}

/// A user buffer described the MPI way: a memory region, the position of
/// element 0 in it, a count and a datatype. Built only from borrowed slices
/// (through the sealed [`Buffer`] traits), so the region is live memory for
/// as long as the borrow the call or request holds.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct View {
    pub(crate) base: u64,
    pub(crate) len: usize,
    pub(crate) origin: usize,
    pub(crate) count: usize,
    pub(crate) ty: Ty,
    pub(crate) writable: bool,
}

impl View {
    pub(crate) fn of_slice<T: Equivalence>(s: &[T]) -> Self {
        Self {
            base: s.as_ptr() as u64,
            len: std::mem::size_of_val(s),
            origin: 0,
            count: s.len(),
            ty: Ty::Basic(T::DATATYPE),
            writable: false,
        }
    }

    pub(crate) fn of_slice_mut<T: Equivalence>(s: &mut [T]) -> Self {
        Self {
            base: s.as_mut_ptr() as u64,
            len: std::mem::size_of_val(s),
            origin: 0,
            count: s.len(),
            ty: Ty::Basic(T::DATATYPE),
            writable: true,
        }
    }

    /// Bytes of data (`count × size`).
    #[inline]
    pub(crate) fn bytes(&self) -> usize {
        self.count * self.ty.size()
    }

    /// The view of `count` elements starting `skip` elements (extents) into
    /// this one, or `None` if that leaves the region.
    pub(crate) fn sub(&self, skip: usize, count: usize) -> Option<Self> {
        let ext = match &self.ty {
            Ty::Basic(d) => d.size() as isize,
            Ty::Derived(u) => u.extent(),
        };
        let origin = self.origin as isize + ext.checked_mul(skip as isize)?;
        let v = Self {
            origin: usize::try_from(origin).ok()?,
            count,
            ..self.clone()
        };
        v.fits().then_some(v)
    }

    /// The view starting `off` bytes past this one's origin (alltoallw's byte
    /// displacements), with `count` elements of `ty`.
    pub(crate) fn at_byte(&self, off: isize, count: usize, ty: Ty) -> Option<Self> {
        let origin = usize::try_from(self.origin as isize + off).ok()?;
        let v = Self {
            origin,
            count,
            ty,
            ..self.clone()
        };
        v.fits().then_some(v)
    }

    /// Whether every byte the view's elements touch lies in the region.
    pub(crate) fn fits(&self) -> bool {
        if self.count == 0 || self.ty.size() == 0 {
            return true;
        }
        let (lo, hi) = match &self.ty {
            Ty::Basic(d) => (0isize, (d.size() * self.count) as isize),
            Ty::Derived(u) => u.desc().span(self.count),
        };
        let o = self.origin as isize;
        o + lo >= 0 && (o + hi) as usize <= self.len
    }

    /// Where the buffer lives (classified by the gpu layer; one branch
    /// without CUDA). An error: the driver could not say.
    #[inline]
    pub(crate) fn kind(&self) -> Result<MemKind, gmpi_gpu::GpuError> {
        crate::engine::gpu().classify(self.base + self.origin as u64, self.bytes())
    }

    /// Whether the buffer is plain host memory (what the CPU may touch in
    /// place: [`View::write_contig`]). `false` too when the gpu layer
    /// cannot say: the fallback, [`View::unpack`], classifies again and
    /// returns that error.
    #[inline]
    pub(crate) fn is_host(&self) -> bool {
        crate::engine::gpu().is_host(self.base + self.origin as u64, self.bytes())
    }

    /// Address of the data if it is one contiguous run.
    #[inline]
    pub(crate) fn contig_addr(&self) -> Option<u64> {
        self.ty
            .is_contig()
            .then_some(self.base + self.origin as u64)
    }

    /// Run `f` on the data, writable, in place if it is one contiguous run
    /// of host memory (`None` otherwise: [`View::unpack`] reaches any
    /// memory).
    #[inline]
    pub(crate) fn write_contig<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        assert!(self.writable, "write into a read-only buffer");
        let a = self.contig_addr()?;
        self.is_host()
            .then(|| HostMem.with_write(a, self.bytes(), f))
    }

    /// Run `f` on the data in place if it is one contiguous run of host
    /// memory (`None` otherwise: [`View::pack`] reaches any memory).
    #[inline]
    pub(crate) fn read_contig<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let a = self.contig_addr()?;
        self.is_host()
            .then(|| HostMem.with_read(a, self.bytes(), f))
    }

    /// Whether the view's whole region is host memory, for `call` on
    /// `rank`: an error where the gpu layer cannot say (the region must not
    /// be taken for device memory and copied either).
    fn region_is_host(&self, g: &Gpu, call: &str, rank: i32) -> crate::Result<bool> {
        g.classify(self.base, self.len)
            .map(MemKind::is_host)
            .map_err(|e| crate::Error::classify_failed(e, call, rank, self.base))
    }

    /// The data, packed (a copy). A failed device copy is an error of
    /// `call` on `rank` (as for [`View::pack_into`]).
    pub(crate) fn pack(&self, call: &str, rank: i32) -> crate::Result<Vec<u8>> {
        self.pack_with(crate::engine::gpu(), call, rank)
    }

    /// [`View::pack`] through the gpu layer `g`.
    pub(crate) fn pack_with(&self, g: &Gpu, call: &str, rank: i32) -> crate::Result<Vec<u8>> {
        let mut out = vec![0u8; self.bytes()];
        self.pack_into_with(g, call, rank, &mut out)?;
        Ok(out)
    }

    /// Pack the data into `out` (`out.len() == self.bytes()`), from any
    /// memory: host memory in place; contiguous device (or managed) data in
    /// one copy of just its bytes; a derived datatype on device memory from
    /// a staged copy of the view's region. An error of `call` on `rank`
    /// (`MPI_ERR_OTHER`) if the gpu layer cannot classify the memory or a
    /// copy out of the device fails.
    pub(crate) fn pack_into(&self, call: &str, rank: i32, out: &mut [u8]) -> crate::Result<()> {
        self.pack_into_with(crate::engine::gpu(), call, rank, out)
    }

    /// [`View::pack_into`] through the gpu layer `g`.
    pub(crate) fn pack_into_with(
        &self,
        g: &Gpu,
        call: &str,
        rank: i32,
        out: &mut [u8],
    ) -> crate::Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let host = self.region_is_host(g, call, rank)?;
        if let (false, Some(a)) = (host, self.contig_addr()) {
            g.copy_to_host(out, a).map_err(|e| {
                let what = format_args!("copying {} B out of device memory at {a:#x}", out.len());
                crate::Error::device_copy(e, call, rank, what)
            })?;
            return Ok(());
        }
        self.with_region(g, host, call, rank, |region| match &self.ty {
            Ty::Basic(_) => out.copy_from_slice(&region[self.origin..self.origin + out.len()]),
            Ty::Derived(u) => u
                .desc()
                .pack(self.count, region, self.origin, out)
                .expect("view bounds were checked when it was made"),
        })
    }

    /// Run `f` over the view's whole memory region: in place for host
    /// memory (`host`); for device memory, over a host copy of it (derived
    /// datatypes on device memory are packed on the CPU from a staged copy).
    fn with_region<R>(
        &self,
        g: &Gpu,
        host: bool,
        call: &str,
        rank: i32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> crate::Result<R> {
        if host {
            return Ok(HostMem.with_read(self.base, self.len, f));
        }
        match g.with_read(self.base, self.len, f) {
            Ok((r, _)) => Ok(r),
            Err(e) => Err(self.staging_failed(e, call, rank, "out of")),
        }
    }

    /// Like [`View::with_region`], writable: device memory is read, changed
    /// and written back whole (so bytes between the datatype's blocks keep
    /// their values). If reading it fails, nothing is written back.
    fn with_region_mut<R>(
        &self,
        g: &Gpu,
        host: bool,
        call: &str,
        rank: i32,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> crate::Result<R> {
        if host {
            return Ok(HostMem.with_write(self.base, self.len, f));
        }
        let mut region = vec![0u8; self.len];
        g.copy_to_host(&mut region, self.base)
            .map_err(|e| self.staging_failed(e, call, rank, "out of"))?;
        let r = f(&mut region);
        g.copy_to_device(self.base, &region)
            .map_err(|e| self.staging_failed(e, call, rank, "back into"))?;
        Ok(r)
    }

    /// The error of a failed copy of the view's whole region (`dir`: "out
    /// of" or "back into" device memory).
    fn staging_failed(&self, e: GpuError, call: &str, rank: i32, dir: &str) -> crate::Error {
        let what = format_args!(
            "staging the {} B region of a derived datatype {dir} device memory at {:#x}",
            self.len, self.base
        );
        crate::Error::device_copy(e, call, rank, what)
    }

    /// Scatter `data` (a packed prefix of at most `bytes()` bytes) into the
    /// view's memory, any memory: as [`View::pack_into`] reads it
    /// (contiguous device data in one copy of just those bytes). An error
    /// of `call` on `rank` (`MPI_ERR_OTHER`) if the gpu layer cannot
    /// classify the memory or a device copy fails.
    pub(crate) fn unpack(&self, call: &str, rank: i32, data: &[u8]) -> crate::Result<()> {
        self.unpack_with(crate::engine::gpu(), call, rank, data)
    }

    /// [`View::unpack`] through the gpu layer `g`.
    pub(crate) fn unpack_with(
        &self,
        g: &Gpu,
        call: &str,
        rank: i32,
        data: &[u8],
    ) -> crate::Result<()> {
        assert!(self.writable, "unpack into a read-only buffer");
        if data.is_empty() {
            return Ok(());
        }
        let host = self.region_is_host(g, call, rank)?;
        if let (false, Some(a)) = (host, self.contig_addr()) {
            g.copy_to_device(a, data).map_err(|e| {
                let what = format_args!("copying {} B into device memory at {a:#x}", data.len());
                crate::Error::device_copy(e, call, rank, what)
            })?;
            return Ok(());
        }
        self.with_region_mut(g, host, call, rank, |region| match &self.ty {
            Ty::Basic(_) => region[self.origin..self.origin + data.len()].copy_from_slice(data),
            Ty::Derived(u) => u
                .desc()
                .unpack(self.count, data, region, self.origin)
                .expect("view bounds were checked when it was made"),
        })
    }
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A buffer gmpi can send from: a slice, array or `Vec` of [`Equivalence`]
/// values, a single value of a primitive type, a [`TypedBuf`] (memory
/// described by a derived datatype), or, with the `cuda` feature, device
/// memory as `cudarc`'s `CudaSlice<T>` / `CudaView<'_, T>` /
/// `CudaViewMut<'_, T>` (see `gmpi::cudarc`).
///
/// ```no_run
/// # fn main() -> gmpi::Result<()> {
/// # let u = gmpi::init()?; let w = u.world();
/// let op = gmpi::Op::Sum;
/// let mut total = 0.0f64;
/// w.allreduce(&2.5f64, &mut total, &op)?;             // scalars; op by reference
/// let mut v = [0i32; 4];
/// w.allreduce(&[1, 2, 3, 4], &mut v, op)?;            // arrays; op by value
/// let mut all = vec![0i32; w.size() as usize];
/// w.allgather(&w.rank(), &mut all)?;                  // a Vec
/// # Ok(()) }
/// ```
pub trait Buffer: sealed::Sealed {
    /// The buffer as gmpi sees it.
    #[doc(hidden)]
    fn view(&self) -> View;
}

/// A buffer gmpi can receive into.
pub trait BufferMut: Buffer {
    /// The buffer as gmpi sees it, writable.
    #[doc(hidden)]
    fn view_mut(&mut self) -> View;
}

impl<T: Equivalence> sealed::Sealed for [T] {}
impl<T: Equivalence> Buffer for [T] {
    fn view(&self) -> View {
        View::of_slice(self)
    }
}
impl<T: Equivalence> BufferMut for [T] {
    fn view_mut(&mut self) -> View {
        View::of_slice_mut(self)
    }
}
impl<T: Equivalence, const N: usize> sealed::Sealed for [T; N] {}
impl<T: Equivalence, const N: usize> Buffer for [T; N] {
    fn view(&self) -> View {
        View::of_slice(&self[..])
    }
}
impl<T: Equivalence, const N: usize> BufferMut for [T; N] {
    fn view_mut(&mut self) -> View {
        View::of_slice_mut(&mut self[..])
    }
}

/// A single value of a primitive type is a buffer of one element.
macro_rules! scalar_buffer {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Buffer for $t {
            fn view(&self) -> View {
                View::of_slice(std::slice::from_ref(self))
            }
        }
        impl BufferMut for $t {
            fn view_mut(&mut self) -> View {
                View::of_slice_mut(std::slice::from_mut(self))
            }
        }
    )*};
}
scalar_buffer!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64, bool);

impl<T: Equivalence> sealed::Sealed for Vec<T> {}
impl<T: Equivalence> Buffer for Vec<T> {
    fn view(&self) -> View {
        View::of_slice(self)
    }
}
impl<T: Equivalence> BufferMut for Vec<T> {
    fn view_mut(&mut self) -> View {
        View::of_slice_mut(self)
    }
}

/// Fail `call` with `MPI_ERR_TYPE` unless `dtype` is committed.
fn check_committed(call: &str, dtype: &crate::typemap::UserDatatype) -> crate::Result<()> {
    if dtype.is_committed() {
        return Ok(());
    }
    Err(crate::Error::new(
        crate::ErrorClass::Type,
        call,
        -1,
        "the datatype is not committed (MPI_Type_commit, or UserDatatype::commit)",
    ))
}

fn typed_view(
    call: &str,
    base: u64,
    len: usize,
    origin: usize,
    count: usize,
    dtype: &crate::typemap::UserDatatype,
    writable: bool,
) -> crate::Result<View> {
    use crate::{Error, ErrorClass};
    check_committed(call, dtype)?;
    let v = View {
        base,
        len,
        origin,
        count,
        ty: Ty::Derived(dtype.clone()),
        writable,
    };
    if origin > len || !v.fits() {
        return Err(Error::new(
            ErrorClass::Buffer,
            call,
            -1,
            format!(
                "{count} elements of the datatype at byte {origin} reach outside the {len}-byte buffer"
            ),
        ));
    }
    Ok(v)
}

/// Memory described by a derived datatype, for sending: `count` elements of
/// `dtype` whose element 0 starts `origin` bytes into `buf` (MPI's
/// `(buf, count, datatype)` triple). Every byte the elements touch must lie
/// inside `buf`; that is checked when it is made.
#[derive(Debug, Clone)]
pub struct TypedBuf<'a> {
    view: View,
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> TypedBuf<'a> {
    /// `count` elements of `dtype` starting at `buf[0]`.
    pub fn new<T: Equivalence>(
        buf: &'a [T],
        count: usize,
        dtype: &crate::typemap::UserDatatype,
    ) -> crate::Result<Self> {
        Self::with_origin(buf, 0, count, dtype)
    }

    /// `count` elements of `dtype` whose element 0 starts `origin` bytes into
    /// `buf` (for types with a negative lower bound).
    pub fn with_origin<T: Equivalence>(
        buf: &'a [T],
        origin: usize,
        count: usize,
        dtype: &crate::typemap::UserDatatype,
    ) -> crate::Result<Self> {
        let view = typed_view(
            "gmpi::TypedBuf::new",
            buf.as_ptr() as u64,
            std::mem::size_of_val(buf),
            origin,
            count,
            dtype,
            false,
        )?;
        Ok(Self {
            view,
            _borrow: PhantomData,
        })
    }
}

/// Memory described by a derived datatype, for receiving (see [`TypedBuf`]).
#[derive(Debug)]
pub struct TypedBufMut<'a> {
    view: View,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> TypedBufMut<'a> {
    /// `count` elements of `dtype` starting at `buf[0]`.
    pub fn new<T: Equivalence>(
        buf: &'a mut [T],
        count: usize,
        dtype: &crate::typemap::UserDatatype,
    ) -> crate::Result<Self> {
        Self::with_origin(buf, 0, count, dtype)
    }

    /// `count` elements of `dtype` whose element 0 starts `origin` bytes into
    /// `buf`.
    pub fn with_origin<T: Equivalence>(
        buf: &'a mut [T],
        origin: usize,
        count: usize,
        dtype: &crate::typemap::UserDatatype,
    ) -> crate::Result<Self> {
        let view = typed_view(
            "gmpi::TypedBufMut::new",
            buf.as_mut_ptr() as u64,
            std::mem::size_of_val(buf),
            origin,
            count,
            dtype,
            true,
        )?;
        Ok(Self {
            view,
            _borrow: PhantomData,
        })
    }
}

impl sealed::Sealed for TypedBuf<'_> {}
impl Buffer for TypedBuf<'_> {
    fn view(&self) -> View {
        self.view.clone()
    }
}
impl sealed::Sealed for TypedBufMut<'_> {}
impl Buffer for TypedBufMut<'_> {
    fn view(&self) -> View {
        let mut v = self.view.clone();
        v.writable = false;
        v
    }
}
impl BufferMut for TypedBufMut<'_> {
    fn view_mut(&mut self) -> View {
        self.view.clone()
    }
}

/// Whether `T` is gmpi's `bool` (the one [`Equivalence`] type for which not
/// every byte is a valid value).
fn is_bool<T: Equivalence>() -> bool {
    T::DATATYPE == Datatype::Primitive(Primitive::Bool)
}

/// Whether `b` can be viewed in place as `[T]`: aligned for `T`, a whole
/// number of elements, and (for `bool`) only the bytes 0 and 1.
fn viewable<T: Equivalence>(b: &[u8]) -> bool {
    let size = std::mem::size_of::<T>();
    size != 0
        && b.len().is_multiple_of(size)
        && b.as_ptr().cast::<T>().is_aligned()
        && (!is_bool::<T>() || b.iter().all(|&x| x <= 1))
}

/// `b` viewed in place as a slice of `T`, or `None` when `b` is not aligned
/// for `T`, its length is not a multiple of `size_of::<T>()`, `T` is a
/// zero-sized type, or (for `bool`) a byte is neither 0 nor 1. Use
/// [`from_bytes`] as the fallback.
pub(crate) fn cast_slice<T: Equivalence>(b: &[u8]) -> Option<&[T]> {
    if !viewable::<T>(b) {
        return None;
    }
    let n = b.len() / std::mem::size_of::<T>();
    // SAFETY: `viewable` checked that the pointer is aligned for `T` and that
    // `b` holds exactly `n` whole values of `T`; `Equivalence` guarantees that
    // every bit pattern is a valid `T` (for `bool`, the only exception, every
    // byte was checked to be 0 or 1). The result borrows `b`, so the memory
    // stays alive and unmodified for its lifetime.
    Some(unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<T>(), n) })
}

/// `b` viewed in place as a mutable slice of `T`; `None` in the same cases
/// as [`cast_slice`].
pub(crate) fn cast_slice_mut<T: Equivalence>(b: &mut [u8]) -> Option<&mut [T]> {
    if !viewable::<T>(b) {
        return None;
    }
    let n = b.len() / std::mem::size_of::<T>();
    // SAFETY: as in `cast_slice`; additionally `b` is borrowed mutably for the
    // result's lifetime, so no other reference aliases it, and every `T` the
    // caller writes (no padding, by `Equivalence`) leaves initialized bytes
    // behind, which is all a `[u8]` requires.
    Some(unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<T>(), n) })
}

/// Copy the values stored in `b` (native byte order, any alignment) into a
/// new vector: `b.len() / size_of::<T>()` values; trailing bytes that do not
/// make a whole value are ignored. For `bool`, a nonzero byte reads as
/// `true`. A zero-sized `T` gives an empty vector.
pub(crate) fn from_bytes<T: Equivalence>(b: &[u8]) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    if size == 0 {
        return Vec::new();
    }
    let n = b.len() / size;
    let normalized: Vec<u8>;
    let src = if is_bool::<T>() {
        normalized = b[..n].iter().map(|&x| u8::from(x != 0)).collect();
        &normalized[..]
    } else {
        &b[..n * size]
    };
    let mut v = Vec::<T>::with_capacity(n);
    // SAFETY: `v` has capacity for `n` values, i.e. `n * size` bytes, and
    // `src` holds exactly that many bytes; the two allocations are distinct,
    // and a byte copy has no alignment requirement. After the copy the first
    // `n` values are initialized with valid bit patterns (`Equivalence`: any
    // bits are valid; for `bool`, `src` holds only 0 and 1), so `set_len(n)`
    // is sound.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), v.as_mut_ptr().cast::<u8>(), n * size);
        v.set_len(n);
    }
    v
}

/// Store `v` as native-order bytes at the start of `out` (any alignment).
///
/// # Panics
/// If `out` is shorter than `size_of_val(v)` bytes.
pub(crate) fn write_bytes<T: Equivalence>(v: &[T], out: &mut [u8]) {
    let len = std::mem::size_of_val(v);
    assert!(
        out.len() >= len,
        "write_bytes: {len} bytes do not fit in {}",
        out.len()
    );
    // SAFETY: `v` is `len` initialized bytes (`Equivalence` types have no
    // padding), `out` has room for at least `len` bytes, a `&[T]` and a
    // `&mut [u8]` cannot overlap, and a byte copy has no alignment
    // requirement.
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr().cast::<u8>(), out.as_mut_ptr(), len);
    }
}

/// Buffers reached through raw addresses: what the C ABI (`gmpi-capi`) hands
/// to the runtime. A view made here is only as valid as its caller's promise,
/// so making one is `unsafe`; once made, it is a [`Buffer`] like any other.
impl View {
    /// `count` elements of `dtype` whose element 0 is at address `addr`
    /// (MPI's `(buf, count, datatype)`; `addr` may be 0 for `MPI_BOTTOM`
    /// with absolute displacements). The region is the span the elements
    /// touch. Fails with `MPI_ERR_TYPE` if `dtype` is not committed.
    ///
    /// # Safety
    /// Every byte the `count` elements of `dtype` touch must be valid memory
    /// (writable if `writable`) from this call until every operation that
    /// uses the view — and every request made from it — has completed, and
    /// nothing else may write it meanwhile (or read it, if written here).
    pub unsafe fn from_raw(
        call: &str,
        addr: usize,
        count: usize,
        dtype: &crate::typemap::UserDatatype,
        writable: bool,
    ) -> crate::Result<View> {
        check_committed(call, dtype)?;
        if let Some(d) = dtype.desc().basic_type() {
            // A predefined type: `count` contiguous elements at `addr`.
            // SAFETY: this function's own contract.
            return Ok(unsafe { View::from_raw_basic(addr, count, d, writable) });
        }
        let (lo, hi) = if count == 0 || dtype.size() == 0 {
            (0, 0)
        } else {
            dtype.desc().span(count)
        };
        // The region spans the data and the origin (element 0's address).
        let (lo, hi) = (lo.min(0), hi.max(0));
        let base = (addr as i128 + lo as i128) as u64;
        typed_view(
            call,
            base,
            (hi - lo) as usize,
            (-lo) as usize,
            count,
            dtype,
            writable,
        )
    }

    /// The predefined type `dtype` is one element of, if it is committed
    /// and one: then [`View::from_raw_basic`] with it makes the view
    /// [`View::from_raw`] makes, without looking at `dtype` again (the C
    /// ABI finds it once per predefined handle).
    #[doc(hidden)]
    pub fn raw_basic(dtype: &crate::typemap::UserDatatype) -> Option<Datatype> {
        dtype
            .is_committed()
            .then(|| dtype.desc().basic_type())
            .flatten()
    }

    /// `count` elements of the predefined type `d` at `addr`, where `d` came
    /// from [`View::raw_basic`]: the view [`View::from_raw`] makes.
    ///
    /// # Safety
    /// As [`View::from_raw`].
    #[doc(hidden)]
    #[inline]
    pub unsafe fn from_raw_basic(addr: usize, count: usize, d: Datatype, writable: bool) -> View {
        View {
            base: addr as u64,
            len: count * d.size(),
            origin: 0,
            count,
            ty: Ty::Basic(d),
            writable,
        }
    }
}

/// The C ABI's hot path: sends and receives of contiguous bytes at a raw
/// address, with no view (the checks and the path of
/// [`Communicator::send`](crate::Communicator::send),
/// [`recv`](crate::Communicator::recv), [`isend`](crate::Communicator::isend)
/// and [`irecv`](crate::Communicator::irecv) on contiguous data).
impl crate::comm::Communicator {
    /// `MPI_Send` (or `MPI_Ssend`, with `sync`) of the `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` must be readable for the whole call.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn send_bytes(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        dest: i32,
        tag: i32,
        sync: bool,
    ) -> crate::Result<()> {
        if !self.send_checked(call, dest, tag)? {
            return Ok(());
        }
        let mode = send_mode(sync);
        crate::engine::with(call, |e| {
            match self.start_send_bytes(&mut *e, call, addr as u64, len, dest, tag, mode)? {
                None => Ok(()),
                Some(id) => e
                    .wait_handle(call, crate::comm::Handle::Pml(id))
                    .map(|_| ()),
            }
        })
    }

    /// `MPI_Recv` into the `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` must be writable, and not otherwise accessed, for
    /// the whole call.
    #[doc(hidden)]
    pub unsafe fn recv_bytes(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        src: i32,
        tag: i32,
    ) -> crate::Result<crate::Status> {
        if !self.recv_checked(call, src, tag)? {
            return Ok(crate::Status::empty());
        }
        crate::engine::with(call, |e| {
            self.recv_wait_bytes(e, call, addr as u64, len, src, tag)
        })
    }

    /// `MPI_Isend` (or `MPI_Issend`, with `sync`) of the `len` bytes at
    /// `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` must stay readable, and unmodified, until the
    /// request completes (the request borrows nothing: the caller keeps
    /// that promise, as MPI's does).
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn isend_bytes(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        dest: i32,
        tag: i32,
        sync: bool,
    ) -> crate::Result<crate::Request<'static>> {
        // SAFETY: our caller's promise is `isend_raw`'s.
        let id = unsafe { self.isend_raw(call, addr, len, dest, tag, sync)? };
        Ok(raw_request(call, id))
    }

    /// `MPI_Irecv` into the `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` must stay writable, and not otherwise accessed,
    /// until the request completes (the request borrows nothing: the caller
    /// keeps that promise, as MPI's does).
    #[doc(hidden)]
    pub unsafe fn irecv_bytes(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        src: i32,
        tag: i32,
    ) -> crate::Result<crate::Request<'static>> {
        // SAFETY: our caller's promise is `irecv_raw`'s.
        let id = unsafe { self.irecv_raw(call, addr, len, src, tag)? };
        Ok(raw_request(call, id))
    }

    /// [`Communicator::isend_bytes`] for the C ABI's direct requests, with
    /// no [`crate::Request`] made: `Ok(None)` if the send completed at once
    /// (taken by the transport, or to `PROC_NULL`), else the pml id that
    /// [`crate::Request::from_raw`] makes its request of.
    ///
    /// # Safety
    /// As [`Communicator::isend_bytes`].
    #[doc(hidden)]
    #[inline]
    pub unsafe fn isend_raw(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        dest: i32,
        tag: i32,
        sync: bool,
    ) -> crate::Result<Option<u64>> {
        if !self.send_checked(call, dest, tag)? {
            return Ok(None);
        }
        let mode = send_mode(sync);
        let h = crate::engine::with(call, |e| {
            self.start_send_bytes(&mut *e, call, addr as u64, len, dest, tag, mode)
        })?;
        Ok(h.map(|id| id.0))
    }

    /// [`Communicator::irecv_bytes`] for the C ABI's direct requests, with
    /// no [`crate::Request`] made: the pml id of the receive, or `Ok(None)`
    /// for a receive from `PROC_NULL` (complete at once; the caller takes
    /// [`Communicator::irecv_bytes`] for it, which gives its status).
    ///
    /// # Safety
    /// As [`Communicator::irecv_bytes`].
    #[doc(hidden)]
    #[inline]
    pub unsafe fn irecv_raw(
        &self,
        call: &'static str,
        addr: usize,
        len: usize,
        src: i32,
        tag: i32,
    ) -> crate::Result<Option<u64>> {
        if !self.recv_checked(call, src, tag)? {
            return Ok(None);
        }
        let h = crate::engine::with(call, |e| {
            self.start_recv_bytes(&mut *e, call, addr as u64, len, src, tag)
        })?;
        Ok(Some(h.0))
    }
}

/// The request of a point-to-point operation started by `call`: the pml's
/// `id`, or complete (`None`: taken at once, or `PROC_NULL`, whose status
/// is the empty one).
#[inline]
fn raw_request(call: &'static str, id: Option<u64>) -> crate::Request<'static> {
    match id {
        Some(id) => crate::Request::from_raw(id, call),
        None => crate::Request::completed(call, crate::Status::empty()),
    }
}

/// The pml's mode of a standard (`sync` false) or synchronous send.
#[inline]
fn send_mode(sync: bool) -> gmpi_pml::SendMode {
    if sync {
        gmpi_pml::SendMode::Synchronous
    } else {
        gmpi_pml::SendMode::Standard
    }
}

impl View {
    /// Bytes of data the view holds (`count × size`).
    #[doc(hidden)]
    pub fn packed_size(&self) -> usize {
        self.bytes()
    }

    /// Pack the data into `out` (`out.len() == packed_size()`), for `call`
    /// on `rank`: `MPI_ERR_OTHER` if the memory cannot be classified or a
    /// copy out of device memory fails.
    #[doc(hidden)]
    pub fn pack_to(&self, call: &str, rank: i32, out: &mut [u8]) -> crate::Result<()> {
        self.pack_into(call, rank, out)
    }

    /// Scatter packed `data` (at most `packed_size()` bytes) into the view,
    /// for `call` on `rank`: `MPI_ERR_OTHER` if the memory cannot be
    /// classified or a device copy fails.
    #[doc(hidden)]
    pub fn unpack_from(&self, call: &str, rank: i32, data: &[u8]) -> crate::Result<()> {
        self.unpack(call, rank, data)
    }
}

impl sealed::Sealed for View {}
impl Buffer for View {
    #[inline]
    fn view(&self) -> View {
        let mut v = self.clone();
        v.writable = false;
        v
    }
}
impl BufferMut for View {
    #[inline]
    fn view_mut(&mut self) -> View {
        assert!(
            self.writable,
            "a read-only raw view used as a receive buffer"
        );
        self.clone()
    }
}

impl crate::request::Request<'_> {
    /// The same request, no longer tied to a borrow: for requests on views
    /// made by [`View::from_raw`], whose memory the caller keeps valid.
    ///
    /// # Safety
    /// Every buffer the request reads or writes must stay valid until it
    /// completes (as [`View::from_raw`] requires).
    #[doc(hidden)]
    pub unsafe fn detach(self) -> crate::request::Request<'static> {
        self.into_static()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cast_checks_alignment_length_and_bool_bytes() {
        let words = [1u64, 2, 3];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let mut buf = vec![0u64; 4];
        let raw = recv_bytes(&mut buf);
        raw[..24].copy_from_slice(&bytes);
        assert_eq!(cast_slice::<u64>(&raw[..24]), Some(&words[..]));
        assert_eq!(cast_slice::<u64>(&raw[..23]), None);
        assert_eq!(cast_slice::<u64>(&raw[1..25]), None);
        assert_eq!(cast_slice::<[u8; 0]>(&raw[..0]), None);
        raw[1..25].copy_from_slice(&bytes);
        assert_eq!(from_bytes::<u64>(&raw[1..26]), words);
        let m = cast_slice_mut::<u64>(&mut raw[8..32]).expect("aligned");
        m[0] = 9;
        assert_eq!(raw[8..16], 9u64.to_ne_bytes());
        let mut out = [0u8; 17];
        write_bytes(&words[..2], &mut out[1..]);
        assert_eq!(from_bytes::<u64>(&out[1..]), &words[..2]);

        assert_eq!(
            cast_slice::<bool>(&[0, 1, 1]),
            Some(&[false, true, true][..])
        );
        assert_eq!(cast_slice::<bool>(&[0, 2]), None);
        assert_eq!(from_bytes::<bool>(&[0, 2, 1]), [false, true, true]);
        assert!(from_bytes::<[u8; 0]>(&[1, 2]).is_empty());
    }

    mod device {
        use std::sync::Arc;

        use gmpi_gpu::double::TestCuda;
        use gmpi_gpu::{Gpu, GpuConfig, GpuError};

        use super::super::{Ty, View};
        use crate::datatype::{Datatype, Primitive};
        use crate::typemap::UserDatatype;
        use crate::ErrorClass;

        const I32: Datatype = Datatype::Primitive(Primitive::I32);

        /// A gpu layer over the test double, and 64 B of its device memory
        /// holding 0, 1, … 63.
        fn setup() -> (Arc<TestCuda>, Gpu, u64) {
            let cuda = Arc::new(TestCuda::new(1));
            let g = Gpu::with_api(cuda.clone(), GpuConfig::default());
            let p = cuda.malloc(64, 0);
            cuda.poke(p, &(0..64).collect::<Vec<u8>>());
            (cuda, g, p)
        }

        /// 16 `i32`s at `p`, contiguous.
        fn contig(p: u64) -> View {
            View {
                base: p,
                len: 64,
                origin: 0,
                count: 16,
                ty: Ty::Basic(I32),
                writable: true,
            }
        }

        /// Every other `i32` of the 64 B at `p` (a vector type: packed on
        /// the host from a staged copy of the whole region).
        fn strided(p: u64) -> View {
            let t = UserDatatype::vector(8, 1, 2, &I32).unwrap().committed();
            View {
                base: p,
                len: 60,
                origin: 0,
                count: 1,
                ty: Ty::Derived(t),
                writable: true,
            }
        }

        /// An error of a failed device copy: `MPI_ERR_OTHER`, naming the
        /// call, the rank, the driver call and what was copied, with the
        /// gpu layer's error as its source.
        fn check_copy_error(e: &crate::Error, driver_call: &str, what: &str) {
            assert_eq!(e.class(), ErrorClass::Other, "{e}");
            let m = e.message();
            for part in [
                "MPI_Pack",
                "on rank 3",
                driver_call,
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                what,
            ] {
                assert!(m.contains(part), "{m:?} does not name {part:?}");
            }
            let src = std::error::Error::source(e).expect("the gpu layer's error");
            assert!(
                matches!(src.downcast_ref::<GpuError>(), Some(GpuError::Driver { call, .. }) if *call == driver_call),
                "{src:?}"
            );
        }

        #[test]
        fn pack_and_unpack_of_device_memory_return_failed_copies() {
            let (cuda, g, p) = setup();
            let (v, w) = (contig(p), strided(p));
            // Working copies first: the views reach the double's memory.
            assert_eq!(v.pack_with(&g, "MPI_Pack", 3).unwrap(), cuda.peek(p, 64));
            let every_other: Vec<u8> = (0..64).filter(|i| i % 8 < 4).collect();
            assert_eq!(w.pack_with(&g, "MPI_Pack", 3).unwrap(), every_other);

            cuda.fail_copies(Some("CUDA_ERROR_ILLEGAL_ADDRESS: sticky"));
            let before = cuda.peek(p, 64);
            let at = format!("{p:#x}");
            let e = v.pack_with(&g, "MPI_Pack", 3).unwrap_err();
            check_copy_error(
                &e,
                "cuMemcpyDtoH_v2",
                &format!("copying 64 B out of device memory at {at}"),
            );
            let e = v.unpack_with(&g, "MPI_Pack", 3, &[7; 64]).unwrap_err();
            check_copy_error(
                &e,
                "cuMemcpyHtoD_v2",
                &format!("copying 64 B into device memory at {at}"),
            );
            let staged = format!(
                "staging the 60 B region of a derived datatype out of device memory at {at}"
            );
            let e = w.pack_with(&g, "MPI_Pack", 3).unwrap_err();
            check_copy_error(&e, "cuMemcpyDtoH_v2", &staged);
            // The region is read before it is changed and written back: a
            // failed read writes nothing.
            let e = w.unpack_with(&g, "MPI_Pack", 3, &[7; 32]).unwrap_err();
            check_copy_error(&e, "cuMemcpyDtoH_v2", &staged);
            let mut out = [0u8; 32];
            let e = w.pack_into_with(&g, "MPI_Pack", 3, &mut out).unwrap_err();
            check_copy_error(&e, "cuMemcpyDtoH_v2", &staged);
            assert_eq!(
                cuda.peek(p, 64),
                before,
                "a failed unpack wrote device memory"
            );

            // Copies work again: so do pack and unpack.
            cuda.fail_copies(None);
            w.unpack_with(&g, "MPI_Unpack", 3, &[7; 32]).unwrap();
            let got = cuda.peek(p, 64);
            assert!(got
                .iter()
                .enumerate()
                .all(|(i, &b)| b == if i % 8 < 4 && i < 60 { 7 } else { i as u8 }));
        }

        #[test]
        fn pack_and_unpack_return_a_failed_classification_as_that_error() {
            let (cuda, g, p) = setup();
            cuda.fail_queries(Some("CUDA_ERROR_ILLEGAL_ADDRESS: sticky"));
            let (v, w) = (contig(p), strided(p));
            let mut out = [0u8; 64];
            let errs = [
                v.pack_with(&g, "MPI_Pack", 3).unwrap_err(),
                v.pack_into_with(&g, "MPI_Pack", 3, &mut out).unwrap_err(),
                v.unpack_with(&g, "MPI_Pack", 3, &[1; 64]).unwrap_err(),
                w.pack_with(&g, "MPI_Pack", 3).unwrap_err(),
                w.unpack_with(&g, "MPI_Pack", 3, &[1; 32]).unwrap_err(),
            ];
            let queried = GpuError::Driver {
                call: "cuPointerGetAttributes",
                msg: "CUDA_ERROR_ILLEGAL_ADDRESS: sticky".into(),
            };
            let want = crate::Error::classify_failed(queried, "MPI_Pack", 3, p);
            for e in &errs {
                assert_eq!(*e, want);
                assert!(std::error::Error::source(e).is_some(), "{e}");
            }
            // Nothing was copied (no memory was taken for device memory).
            let c = cuda.counts();
            assert_eq!((c.dtoh, c.htod), (0, 0), "{c:?}");
        }
    }

    /// `v` as bytes: 8-aligned memory for the alignment cases.
    fn recv_bytes(v: &mut [u64]) -> &mut [u8] {
        let len = std::mem::size_of_val(v);
        // SAFETY: test helper: `v` is `len` initialized bytes, borrowed
        // mutably for the result's lifetime; u8 has no alignment requirement.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), len) }
    }
}
