//! Derived datatypes (`MPI_Type_*`): the type-map engine.
//!
//! A datatype is described by an immutable [`TypeDesc`], shared by `Arc`,
//! that holds the flattened type map (byte blocks in type-map order, with
//! adjacent blocks merged), the run-length encoded type signature, and the
//! MPI bounds (`lb`, `ub`, `true_lb`, `true_ub`). [`UserDatatype`] is the
//! public handle; its constructors mirror `MPI_Type_contiguous`,
//! `MPI_Type_vector`, `MPI_Type_create_hvector`, `MPI_Type_indexed`,
//! `MPI_Type_create_hindexed`, `MPI_Type_create_indexed_block`,
//! `MPI_Type_create_hindexed_block`, `MPI_Type_create_struct`,
//! `MPI_Type_create_resized`, `MPI_Type_create_subarray` and `MPI_Type_dup`.
//!
//! Bounds follow the MPI standard (MPI-3.1 §4.1.6–4.1.8): the lower and upper
//! bounds of a constructed type are the lowest and highest bounds of the
//! copies of its old types; bounds set by `MPI_Type_create_resized` (and by
//! subarray, which MPI defines through a resize) are *markers* that are
//! sticky: once any component carries markers, only markers decide `lb`
//! and `ub`, and data outside them is ignored for the extent. Like MPICH and
//! Open MPI (and as the standard's "epsilon" describes), the extent of a
//! struct type without markers is rounded up to the largest alignment of its
//! basic types (a C type's alignment on x86-64, at most 16), so
//! `struct {f64 at 0, i8 at 8}` has extent 16, the C `sizeof` stride:
//! binaries built for MPICH send arrays of such structs unchanged.

use std::fmt;
use std::sync::Arc;

use crate::datatype::{Datatype, Primitive};
use crate::error::{Error, ErrorClass, Result};

/// Most blocks (and signature runs) a flattened type may hold: 16 Mi
/// entries, 256 MiB. Bigger type maps are refused rather than risking OOM.
const MAX_BLOCKS: usize = 1 << 24;

/// Longest description kept in [`TypeDesc::name`].
const MAX_NAME: usize = 96;

/// Size in bytes of a basic element.
fn prim_size(p: Primitive) -> usize {
    Datatype::Primitive(p).size()
}

/// Cut a description to [`MAX_NAME`] characters.
fn short_name(mut s: String) -> String {
    if s.len() > MAX_NAME {
        let mut cut = MAX_NAME - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// The immutable description of a datatype: flattened type map, signature
/// and bounds. All offsets are in bytes relative to the element's origin
/// (element `i` of a buffer starts at `i * extent`).
pub(crate) struct TypeDesc {
    /// Bytes of data in one element (`MPI_Type_size`).
    pub(crate) size: usize,
    /// Lower bound (`MPI_Type_get_extent`).
    pub(crate) lb: isize,
    /// Upper bound; `extent = ub - lb`.
    pub(crate) ub: isize,
    /// Lowest offset of a data byte (`MPI_Type_get_true_extent`); 0 if none.
    pub(crate) true_lb: isize,
    /// One past the highest offset of a data byte; 0 if none.
    pub(crate) true_ub: isize,
    /// The flattened type map in type-map order: `(offset, length)` byte
    /// blocks, adjacent blocks merged, no empty block.
    pub(crate) blocks: Vec<(isize, usize)>,
    /// The type signature, run-length encoded (runs of one primitive
    /// merged; opaque types count as bytes).
    pub(crate) sig: Vec<(Primitive, u64)>,
    /// One block at offset 0 of length `size` and `extent == size`: a
    /// buffer of these is one contiguous run.
    pub(crate) is_contig: bool,
    /// A short description for messages.
    pub(crate) name: String,
    /// Whether `lb`/`ub` come from explicit (sticky) markers set by a
    /// resize somewhere in the type's construction.
    explicit: bool,
    /// The largest C alignment of the basic types it is made of (1 if
    /// none): what a struct's extent is rounded up to.
    align: usize,
}

impl fmt::Debug for TypeDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypeDesc")
            .field("name", &self.name)
            .field("size", &self.size)
            .field("lb", &self.lb)
            .field("ub", &self.ub)
            .field("true_lb", &self.true_lb)
            .field("true_ub", &self.true_ub)
            .field("blocks", &self.blocks.len())
            .field("sig", &self.sig.len())
            .field("is_contig", &self.is_contig)
            .finish()
    }
}

/// Accumulates the copies of old types that make up a new type.
struct Builder {
    call: &'static str,
    size: usize,
    blocks: Vec<(isize, usize)>,
    sig: Vec<(Primitive, u64)>,
    /// Bounds of the data bytes (`true_lb`, `true_ub`).
    data: Option<(i128, i128)>,
    /// Bounds of the markers of explicit components.
    marks: Option<(i128, i128)>,
    /// Bounds of the other components: their data, widened by a struct's
    /// alignment padding.
    soft: Option<(i128, i128)>,
    /// The largest alignment of the components with data.
    align: usize,
}

fn widen(b: &mut Option<(i128, i128)>, lo: i128, hi: i128) {
    *b = Some(match *b {
        Some((l, h)) => (l.min(lo), h.max(hi)),
        None => (lo, hi),
    });
}

fn push_block(blocks: &mut Vec<(isize, usize)>, off: isize, len: usize) {
    if let Some(last) = blocks.last_mut() {
        if last.0.checked_add_unsigned(last.1) == Some(off) {
            last.1 += len;
            return;
        }
    }
    blocks.push((off, len));
}

fn push_sig(sig: &mut Vec<(Primitive, u64)>, p: Primitive, n: u64) {
    if n == 0 {
        return;
    }
    if let Some(last) = sig.last_mut() {
        if last.0 == p {
            last.1 += n;
            return;
        }
    }
    sig.push((p, n));
}

impl Builder {
    fn new(call: &'static str) -> Self {
        Self {
            call,
            size: 0,
            blocks: Vec::new(),
            sig: Vec::new(),
            data: None,
            marks: None,
            soft: None,
            align: 1,
        }
    }

    fn err(&self, class: ErrorClass, what: impl fmt::Display) -> Error {
        Error::new(class, self.call, -1, what)
    }

    fn too_big(&self) -> Error {
        self.err(
            ErrorClass::Unsupported,
            format!(
                "the flattened type map would have more than {MAX_BLOCKS} noncontiguous blocks \
                 or signature runs"
            ),
        )
    }

    /// Append `count` copies of `child`, the first at byte displacement
    /// `disp`, the next ones `child.extent()` apart (one block of an MPI
    /// type constructor).
    fn add(&mut self, disp: i128, count: usize, child: &TypeDesc) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let ext = child.extent() as i128;
        let spread = (count as i128 - 1) * ext;
        let (lo_k, hi_k) = (spread.min(0), spread.max(0));
        self.size = child
            .size
            .checked_mul(count)
            .and_then(|s| s.checked_add(self.size))
            .ok_or_else(|| self.err(ErrorClass::Arg, "the type size overflows usize"))?;
        if child.explicit {
            widen(
                &mut self.marks,
                disp + child.lb as i128 + lo_k,
                disp + child.ub as i128 + hi_k,
            );
        }
        if child.size == 0 {
            return Ok(());
        }
        self.align = self.align.max(child.align);
        let (lo, hi) = (
            disp + child.true_lb as i128 + lo_k,
            disp + child.true_ub as i128 + hi_k,
        );
        if lo < isize::MIN as i128 || hi > isize::MAX as i128 {
            return Err(self.err(
                ErrorClass::Arg,
                "a displacement of the type does not fit in isize",
            ));
        }
        widen(&mut self.data, lo, hi);
        if !child.explicit {
            widen(
                &mut self.soft,
                disp + child.lb as i128 + lo_k,
                disp + child.ub as i128 + hi_k,
            );
        }

        // The type map: copies of a dense child form one run.
        match child.blocks[..] {
            [(o, l)] if l as i128 == ext => {
                push_block(&mut self.blocks, (disp + o as i128) as isize, l * count);
            }
            _ => {
                let per_copy = child.blocks.len().saturating_sub(1).max(1);
                if count.saturating_mul(per_copy) >= MAX_BLOCKS - self.blocks.len().min(MAX_BLOCKS)
                {
                    return Err(self.too_big());
                }
                for k in 0..count {
                    let base = disp + k as i128 * ext;
                    for &(o, l) in &child.blocks {
                        push_block(&mut self.blocks, (base + o as i128) as isize, l);
                    }
                }
            }
        }
        // The signature.
        match child.sig[..] {
            [(p, n)] => push_sig(&mut self.sig, p, n * count as u64),
            _ => {
                let per_copy = child.sig.len().saturating_sub(1).max(1);
                if count.saturating_mul(per_copy) >= MAX_BLOCKS - self.sig.len().min(MAX_BLOCKS) {
                    return Err(self.too_big());
                }
                for _ in 0..count {
                    for &(p, n) in &child.sig {
                        push_sig(&mut self.sig, p, n);
                    }
                }
            }
        }
        if self.blocks.len() > MAX_BLOCKS || self.sig.len() > MAX_BLOCKS {
            return Err(self.too_big());
        }
        Ok(())
    }

    fn finish(self, name: String) -> Result<TypeDesc> {
        let (true_lb, true_ub) = self.data.unwrap_or((0, 0));
        let explicit = self.marks.is_some();
        let (lb, ub) = self.marks.or(self.soft).unwrap_or((0, 0));
        let fit = |v: i128| {
            isize::try_from(v)
                .map_err(|_| self.err(ErrorClass::Arg, "a bound of the type does not fit in isize"))
        };
        let (lb, ub, true_lb, true_ub) = (fit(lb)?, fit(ub)?, fit(true_lb)?, fit(true_ub)?);
        fit(ub as i128 - lb as i128)?;
        let mut d = TypeDesc {
            size: self.size,
            lb,
            ub,
            true_lb,
            true_ub,
            blocks: self.blocks,
            sig: self.sig,
            is_contig: false,
            name: short_name(name),
            explicit,
            align: self.align,
        };
        d.is_contig = d.compute_contig();
        Ok(d)
    }
}

impl TypeDesc {
    /// The descriptor of a predefined datatype (or an opaque `Equivalence`
    /// type, whose signature is `size` bytes).
    pub(crate) fn basic(dt: Datatype) -> TypeDesc {
        let size = dt.size();
        let (prim, n, name) = match dt {
            Datatype::Primitive(p) => (p, 1, p.mpi_name().to_string()),
            Datatype::Opaque { size } => (Primitive::Byte, size as u64, format!("opaque{size}")),
        };
        let mut d = TypeDesc {
            size,
            lb: 0,
            ub: size as isize,
            true_lb: 0,
            true_ub: size as isize,
            blocks: if size > 0 {
                vec![(0, size)]
            } else {
                Vec::new()
            },
            sig: if n > 0 { vec![(prim, n)] } else { Vec::new() },
            is_contig: false,
            name,
            explicit: false,
            align: match dt {
                Datatype::Primitive(p) => align_of(p),
                Datatype::Opaque { .. } => 1,
            },
        };
        d.is_contig = d.compute_contig();
        d
    }

    /// The predefined type this descriptor is exactly one element of, if any.
    pub(crate) fn basic_type(&self) -> Option<Datatype> {
        match self.sig[..] {
            [(p, 1)]
                if self.is_contig && self.lb == 0 && self.size == Datatype::Primitive(p).size() =>
            {
                Some(Datatype::Primitive(p))
            }
            _ => None,
        }
    }

    fn compute_contig(&self) -> bool {
        self.blocks[..] == [(0, self.size)] && self.extent() == self.size as isize
    }

    /// `ub - lb`: the stride between consecutive elements.
    pub(crate) fn extent(&self) -> isize {
        self.ub - self.lb
    }

    /// Lowest and one-past-highest data byte of `count` elements, in i128.
    fn span128(&self, count: usize) -> (i128, i128) {
        if count == 0 || self.size == 0 {
            return (0, 0);
        }
        let spread = (count as i128 - 1) * self.extent() as i128;
        (
            self.true_lb as i128 + spread.min(0),
            self.true_ub as i128 + spread.max(0),
        )
    }

    /// Lowest and one-past-highest byte offset touched by `count` elements
    /// relative to the origin of element 0 (element `i` starts at
    /// `i * extent`); `(0, 0)` if `count` or `size` is 0. Saturates at the
    /// `isize` range.
    pub(crate) fn span(&self, count: usize) -> (isize, isize) {
        let (lo, hi) = self.span128(count);
        let clamp = |v: i128| v.clamp(isize::MIN as i128, isize::MAX as i128) as isize;
        (clamp(lo), clamp(hi))
    }

    /// Check that `count` elements at `origin` lie inside a buffer of `len`.
    fn check_range(&self, count: usize, len: usize, origin: usize) -> Result<(), String> {
        let (lo, hi) = self.span128(count);
        if lo == hi {
            return Ok(());
        }
        let o = origin as i128;
        if o + lo < 0 || o + hi > len as i128 {
            return Err(format!(
                "{count} element(s) of {} at offset {origin} touch bytes {}..{} of a buffer of \
                 {len} bytes",
                self.name,
                o + lo,
                o + hi
            ));
        }
        Ok(())
    }

    /// The single run a buffer of these elements forms, if any: `(offset of
    /// element 0's data)`.
    fn dense_offset(&self) -> Option<isize> {
        match self.blocks[..] {
            [(o, l)] if l as isize == self.extent() => Some(o),
            _ => None,
        }
    }

    /// Gather `count` elements whose element-0 origin is at index `origin`
    /// of `src` into `out` (which must hold exactly `count * size` bytes).
    pub(crate) fn pack(
        &self,
        count: usize,
        src: &[u8],
        origin: usize,
        out: &mut [u8],
    ) -> Result<(), String> {
        let total = count
            .checked_mul(self.size)
            .ok_or_else(|| format!("{count} elements of {} overflow usize", self.name))?;
        if out.len() != total {
            return Err(format!(
                "the pack buffer holds {} bytes, {count} element(s) of {} need {total}",
                out.len(),
                self.name
            ));
        }
        if total == 0 {
            return Ok(());
        }
        self.check_range(count, src.len(), origin)?;
        // In range: every offset computed below is in 0..src.len(); the
        // wrapping arithmetic only avoids spurious overflow of intermediates.
        if let Some(o) = self.dense_offset() {
            let s = (origin as isize).wrapping_add(o) as usize;
            out.copy_from_slice(&src[s..s + total]);
            return Ok(());
        }
        let ext = self.extent();
        let mut pos = 0;
        for i in 0..count {
            let base = (origin as isize).wrapping_add((i as isize).wrapping_mul(ext));
            for &(o, l) in &self.blocks {
                let s = base.wrapping_add(o) as usize;
                out[pos..pos + l].copy_from_slice(&src[s..s + l]);
                pos += l;
            }
        }
        Ok(())
    }

    /// Scatter packed data into `count` elements whose element-0 origin is
    /// at index `origin` of `dst`. A `packed` shorter than `count * size`
    /// (a short message) fills only that prefix of the type map, to the
    /// byte; a longer one is an error.
    pub(crate) fn unpack(
        &self,
        count: usize,
        packed: &[u8],
        dst: &mut [u8],
        origin: usize,
    ) -> Result<(), String> {
        let total = count
            .checked_mul(self.size)
            .ok_or_else(|| format!("{count} elements of {} overflow usize", self.name))?;
        let n = packed.len();
        if n > total {
            return Err(format!(
                "{n} packed bytes do not fit in {count} element(s) of {} ({total} bytes)",
                self.name
            ));
        }
        if n == 0 {
            return Ok(());
        }
        if let Some(o) = self.dense_offset() {
            let s = origin as i128 + o as i128;
            if s < 0 || s + n as i128 > dst.len() as i128 {
                return Err(format!(
                    "{n} bytes of {} at offset {origin} touch bytes {s}..{} of a buffer of {} \
                     bytes",
                    self.name,
                    s + n as i128,
                    dst.len()
                ));
            }
            let s = s as usize;
            dst[s..s + n].copy_from_slice(packed);
            return Ok(());
        }
        let (full, mut rem) = (n / self.size, n % self.size);
        self.check_range(full, dst.len(), origin)?;
        let ext = self.extent();
        let mut pos = 0;
        for i in 0..full {
            let base = (origin as isize).wrapping_add((i as isize).wrapping_mul(ext));
            for &(o, l) in &self.blocks {
                let s = base.wrapping_add(o) as usize;
                dst[s..s + l].copy_from_slice(&packed[pos..pos + l]);
                pos += l;
            }
        }
        // The partial last element: check each block touched.
        let base = origin as i128 + full as i128 * ext as i128;
        for &(o, l) in &self.blocks {
            if rem == 0 {
                break;
            }
            let take = l.min(rem);
            let s = base + o as i128;
            if s < 0 || s + take as i128 > dst.len() as i128 {
                return Err(format!(
                    "element {full} of {} at offset {origin} touches bytes {s}..{} of a buffer \
                     of {} bytes",
                    self.name,
                    s + take as i128,
                    dst.len()
                ));
            }
            let s = s as usize;
            dst[s..s + take].copy_from_slice(&packed[pos..pos + take]);
            pos += take;
            rem -= take;
        }
        Ok(())
    }

    /// The one byte run `count` elements touch, if they touch one (no gap
    /// between or inside elements): `(offset, length)`.
    pub(crate) fn dense_run(&self, count: usize) -> Option<(isize, usize)> {
        self.dense_offset().map(|o| (o, count * self.size))
    }

    /// The byte runs `(offset from element 0's origin, length)` that
    /// `count` elements touch, in type-map order, adjacent runs merged:
    /// where one-sided operations read and write target memory.
    pub(crate) fn segments(&self, count: usize) -> Vec<(isize, usize)> {
        let mut out: Vec<(isize, usize)> = Vec::new();
        if self.size == 0 || count == 0 {
            return out;
        }
        if let Some(o) = self.dense_offset() {
            // Elements follow each other with no gap: one run.
            return vec![(o, count * self.size)];
        }
        let ext = self.extent();
        for i in 0..count {
            let base = (i as isize).wrapping_mul(ext);
            for &(o, l) in &self.blocks {
                let at = base.wrapping_add(o);
                match out.last_mut() {
                    Some((s, n)) if s.wrapping_add(*n as isize) == at => *n += l,
                    _ => out.push((at, l)),
                }
            }
        }
        out
    }

    /// Number of basic elements (per the signature) in the first `bytes`
    /// bytes of a packed stream of this type (`MPI_Get_elements`); `None` if
    /// `bytes` ends inside a basic element.
    pub(crate) fn elements(&self, bytes: usize) -> Option<usize> {
        if self.size == 0 {
            return (bytes == 0).then_some(0);
        }
        let per_elem: u64 = self.sig.iter().map(|&(_, n)| n).sum();
        let (full, mut rem) = (bytes / self.size, bytes % self.size);
        let mut acc: u64 = 0;
        for &(p, n) in &self.sig {
            if rem == 0 {
                break;
            }
            let ps = prim_size(p);
            let run = (n as usize).saturating_mul(ps);
            if rem >= run {
                acc += n;
                rem -= run;
            } else {
                if rem % ps != 0 {
                    return None;
                }
                acc += (rem / ps) as u64;
                rem = 0;
            }
        }
        let total = (full as u64).checked_mul(per_elem)?.checked_add(acc)?;
        usize::try_from(total).ok()
    }

    /// `Some(p)` if the signature is all one primitive (reductions on
    /// derived types need this); `None` otherwise or if empty.
    pub(crate) fn homogeneous(&self) -> Option<Primitive> {
        match self.sig[..] {
            [(p, _)] => Some(p),
            _ => None,
        }
    }

    /// A copy with new (explicit) bounds.
    fn with_bounds(&self, lb: isize, ub: isize, name: String) -> TypeDesc {
        let mut d = TypeDesc {
            size: self.size,
            lb,
            ub,
            true_lb: self.true_lb,
            true_ub: self.true_ub,
            blocks: self.blocks.clone(),
            sig: self.sig.clone(),
            is_contig: false,
            name: short_name(name),
            explicit: true,
            align: self.align,
        };
        d.is_contig = d.compute_contig();
        d
    }
}

/// Storage order of a multidimensional array (`MPI_ORDER_C`,
/// `MPI_ORDER_FORTRAN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row-major: the last dimension varies fastest (`MPI_ORDER_C`).
    C,
    /// Column-major: the first dimension varies fastest
    /// (`MPI_ORDER_FORTRAN`).
    Fortran,
}

/// A datatype handle: a predefined type or a derived one built with the
/// `MPI_Type_*` constructors below (`MPI_Datatype`).
///
/// Constructors return *uncommitted* types; call [`commit`](Self::commit)
/// (or [`committed`](Self::committed)) before using a type for
/// communication or packing, as MPI requires. Cloning is cheap (the type
/// map is shared).
///
/// ```
/// use gmpi::{Equivalence, UserDatatype};
/// // Every other f64 of a row: 3 blocks of 2, 4 apart.
/// let t = UserDatatype::vector(3, 2, 4, &f64::DATATYPE)?.committed();
/// assert_eq!((t.size(), t.extent()), (48, 80));
/// let row: Vec<u8> = (0..80).collect();
/// let packed = t.pack(1, &row, 0)?;
/// assert_eq!(packed.len(), 48);
/// assert_eq!(&packed[16..18], &[32, 33]);
/// # Ok::<(), gmpi::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct UserDatatype {
    desc: Arc<TypeDesc>,
    committed: bool,
}

/// Anything that names a datatype: a predefined [`Datatype`] or a
/// [`UserDatatype`].
pub trait AsDatatype {
    /// The datatype as a [`UserDatatype`] handle (predefined types are
    /// committed).
    fn as_user(&self) -> UserDatatype;
}

impl AsDatatype for Datatype {
    fn as_user(&self) -> UserDatatype {
        UserDatatype {
            desc: Arc::new(TypeDesc::basic(*self)),
            committed: true,
        }
    }
}

impl AsDatatype for UserDatatype {
    fn as_user(&self) -> UserDatatype {
        self.clone()
    }
}

impl From<Datatype> for UserDatatype {
    fn from(dt: Datatype) -> Self {
        dt.as_user()
    }
}

/// The C alignment of a basic type on x86-64 (of the value part for the
/// pair types).
fn align_of(p: Primitive) -> usize {
    match p {
        Primitive::I8 | Primitive::U8 | Primitive::Bool | Primitive::Byte | Primitive::Char => 1,
        Primitive::I16 | Primitive::U16 | Primitive::F16 | Primitive::BF16 => 2,
        Primitive::I32 | Primitive::U32 | Primitive::F32 => 4,
        Primitive::FloatInt | Primitive::TwoInt | Primitive::ShortInt => 4,
        Primitive::I64 | Primitive::U64 | Primitive::F64 | Primitive::ISize | Primitive::USize => 8,
        Primitive::DoubleInt | Primitive::LongInt => 8,
        Primitive::I128 | Primitive::U128 => 16,
    }
}

/// Check that a count argument is not negative.
fn count_arg(call: &'static str, what: &str, v: i32) -> Result<usize> {
    usize::try_from(v).map_err(|_| {
        Error::new(
            ErrorClass::Count,
            call,
            -1,
            format!("{what} = {v} is negative"),
        )
    })
}

/// Check that every blocklength is not negative.
fn blocklengths_arg(call: &'static str, bls: &[i32]) -> Result<Vec<usize>> {
    bls.iter()
        .enumerate()
        .map(|(i, &b)| {
            usize::try_from(b).map_err(|_| {
                Error::new(
                    ErrorClass::Count,
                    call,
                    -1,
                    format!("array_of_blocklengths[{i}] = {b} is negative"),
                )
            })
        })
        .collect()
}

/// Check that two argument arrays have the same length.
fn same_len(call: &'static str, a: (&str, usize), b: (&str, usize)) -> Result<()> {
    if a.1 != b.1 {
        return Err(Error::new(
            ErrorClass::Arg,
            call,
            -1,
            format!("{} has {} entries but {} has {}", a.0, a.1, b.0, b.1),
        ));
    }
    Ok(())
}

impl UserDatatype {
    fn new(desc: TypeDesc) -> Self {
        Self {
            desc: Arc::new(desc),
            committed: false,
        }
    }

    /// Build a type from `(byte displacement, copies, old type)` blocks.
    fn build<'a>(
        call: &'static str,
        name: String,
        parts: impl IntoIterator<Item = (i128, usize, &'a TypeDesc)>,
    ) -> Result<TypeDesc> {
        let mut b = Builder::new(call);
        for (disp, n, t) in parts {
            b.add(disp, n, t)?;
        }
        b.finish(name)
    }

    /// `count` copies of `old` laid out one extent apart
    /// (`MPI_Type_contiguous`).
    pub fn contiguous(count: i32, old: &impl AsDatatype) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_contiguous";
        let n = count_arg(CALL, "count", count)?;
        let old = old.as_user();
        let name = format!("contiguous({count},{})", old.desc.name);
        Ok(Self::new(Self::build(CALL, name, [(0, n, &*old.desc)])?))
    }

    /// `count` blocks of `blocklength` copies of `old`, the blocks `stride`
    /// extents of `old` apart (`MPI_Type_vector`).
    pub fn vector(
        count: i32,
        blocklength: i32,
        stride: i32,
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_vector";
        let old = old.as_user();
        let stride_bytes = stride as i128 * old.desc.extent() as i128;
        let name = format!("vector({count},{blocklength},{stride},{})", old.desc.name);
        Self::hvector_in(CALL, name, count, blocklength, stride_bytes, &old)
    }

    /// `count` blocks of `blocklength` copies of `old`, the blocks
    /// `stride` bytes apart (`MPI_Type_create_hvector`).
    pub fn hvector(
        count: i32,
        blocklength: i32,
        stride: isize,
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_create_hvector";
        let old = old.as_user();
        let name = format!("hvector({count},{blocklength},{stride},{})", old.desc.name);
        Self::hvector_in(CALL, name, count, blocklength, stride as i128, &old)
    }

    fn hvector_in(
        call: &'static str,
        name: String,
        count: i32,
        blocklength: i32,
        stride_bytes: i128,
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        let n = count_arg(call, "count", count)?;
        let bl = usize::try_from(blocklength).map_err(|_| {
            Error::new(
                ErrorClass::Count,
                call,
                -1,
                format!("blocklength = {blocklength} is negative"),
            )
        })?;
        let d = &*old.desc;
        // Refuse a huge noncontiguous vector before flattening any of it.
        let dense = d.dense_offset().is_some() && stride_bytes == bl as i128 * d.extent() as i128;
        if n > MAX_BLOCKS && bl > 0 && d.size > 0 && !dense {
            return Err(Builder::new(call).too_big());
        }
        let parts = (0..n).map(|i| (i as i128 * stride_bytes, bl, d));
        Ok(Self::new(Self::build(call, name, parts)?))
    }

    /// Blocks of `blocklengths[i]` copies of `old` at `displacements[i]`
    /// extents of `old` (`MPI_Type_indexed`).
    pub fn indexed(
        blocklengths: &[i32],
        displacements: &[i32],
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_indexed";
        let old = old.as_user();
        let ext = old.desc.extent() as i128;
        let displs: Vec<i128> = displacements.iter().map(|&d| d as i128 * ext).collect();
        let name = format!("indexed({},{})", blocklengths.len(), old.desc.name);
        Self::hindexed_in(CALL, name, blocklengths, &displs, &old)
    }

    /// Blocks of `blocklengths[i]` copies of `old` at `displacements[i]`
    /// bytes (`MPI_Type_create_hindexed`).
    pub fn hindexed(
        blocklengths: &[i32],
        displacements: &[isize],
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_create_hindexed";
        let old = old.as_user();
        let displs: Vec<i128> = displacements.iter().map(|&d| d as i128).collect();
        let name = format!("hindexed({},{})", blocklengths.len(), old.desc.name);
        Self::hindexed_in(CALL, name, blocklengths, &displs, &old)
    }

    /// Blocks of `blocklength` copies of `old` at `displacements[i]`
    /// extents of `old` (`MPI_Type_create_indexed_block`).
    pub fn indexed_block(
        blocklength: i32,
        displacements: &[i32],
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_create_indexed_block";
        let old = old.as_user();
        let ext = old.desc.extent() as i128;
        let displs: Vec<i128> = displacements.iter().map(|&d| d as i128 * ext).collect();
        let name = format!(
            "indexed_block({blocklength},{},{})",
            displacements.len(),
            old.desc.name
        );
        let bls = vec![blocklength; displs.len()];
        Self::block_in(CALL, name, blocklength, &bls, &displs, &old)
    }

    /// Blocks of `blocklength` copies of `old` at `displacements[i]` bytes
    /// (`MPI_Type_create_hindexed_block`).
    pub fn hindexed_block(
        blocklength: i32,
        displacements: &[isize],
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_create_hindexed_block";
        let old = old.as_user();
        let displs: Vec<i128> = displacements.iter().map(|&d| d as i128).collect();
        let name = format!(
            "hindexed_block({blocklength},{},{})",
            displacements.len(),
            old.desc.name
        );
        let bls = vec![blocklength; displs.len()];
        Self::block_in(CALL, name, blocklength, &bls, &displs, &old)
    }

    fn block_in(
        call: &'static str,
        name: String,
        blocklength: i32,
        bls: &[i32],
        displs: &[i128],
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        if blocklength < 0 {
            return Err(Error::new(
                ErrorClass::Count,
                call,
                -1,
                format!("blocklength = {blocklength} is negative"),
            ));
        }
        Self::hindexed_in(call, name, bls, displs, old)
    }

    fn hindexed_in(
        call: &'static str,
        name: String,
        blocklengths: &[i32],
        displs: &[i128],
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        same_len(
            call,
            ("array_of_blocklengths", blocklengths.len()),
            ("array_of_displacements", displs.len()),
        )?;
        let bls = blocklengths_arg(call, blocklengths)?;
        let d = &*old.desc;
        let parts = bls.iter().zip(displs).map(|(&b, &disp)| (disp, b, d));
        Ok(Self::new(Self::build(call, name, parts)?))
    }

    /// Blocks of `blocklengths[i]` copies of `types[i]` at
    /// `displacements[i]` bytes (`MPI_Type_create_struct`). Without
    /// markers, the extent is rounded up to the largest alignment of the
    /// basic types (see the module docs).
    pub fn structured(
        blocklengths: &[i32],
        displacements: &[isize],
        types: &[UserDatatype],
    ) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_create_struct";
        same_len(
            CALL,
            ("array_of_blocklengths", blocklengths.len()),
            ("array_of_displacements", displacements.len()),
        )?;
        same_len(
            CALL,
            ("array_of_blocklengths", blocklengths.len()),
            ("array_of_types", types.len()),
        )?;
        let bls = blocklengths_arg(CALL, blocklengths)?;
        let mut name = format!("struct({}", types.len());
        for t in types.iter().take(4) {
            name.push(',');
            name.push_str(&t.desc.name);
        }
        name.push(')');
        let parts = bls
            .iter()
            .zip(displacements)
            .zip(types)
            .map(|((&b, &disp), t)| (disp as i128, b, &*t.desc));
        let mut d = Self::build(CALL, name, parts)?;
        if !d.explicit {
            let align = d.align as isize;
            let ext = d.extent();
            let pad = (align - ext.rem_euclid(align)) % align;
            if pad > 0 {
                d.ub += pad;
                d.is_contig = d.compute_contig();
            }
        }
        Ok(Self::new(d))
    }

    /// A predefined datatype the runtime has no primitive for (C `long
    /// double`, the complex types, the padded pair types of the C ABI),
    /// laid out as MPI defines it: the data is the byte `blocks` (offset,
    /// length; their sum is the size), consecutive elements are `extent`
    /// bytes apart (lower bound 0, not a resize marker) and `align` is its C
    /// alignment, which a struct containing it is padded to. Moved as
    /// uninterpreted bytes; committed.
    ///
    /// ```
    /// // MPI_DOUBLE_INT: {double; int}, 12 bytes of data, extent 16.
    /// let t = gmpi::UserDatatype::predefined_bytes("MPI_DOUBLE_INT", &[(0, 8), (8, 4)], 16, 8)?;
    /// assert_eq!((t.size(), t.extent()), (12, 16));
    /// # Ok::<(), gmpi::Error>(())
    /// ```
    pub fn predefined_bytes(
        name: &str,
        blocks: &[(isize, usize)],
        extent: isize,
        align: usize,
    ) -> Result<UserDatatype> {
        const CALL: &str = "predefined_bytes";
        let byte = TypeDesc::basic(Datatype::Primitive(Primitive::Byte));
        let mut b = Builder::new(CALL);
        for &(off, len) in blocks {
            b.add(off as i128, len, &byte)?;
        }
        b.align = align.max(1);
        let mut d = b.finish(name.to_string())?;
        if d.lb != 0 || d.ub > extent {
            return Err(Error::new(
                ErrorClass::Arg,
                CALL,
                -1,
                format!("{name}: the data does not lie in 0..{extent}"),
            ));
        }
        d.ub = extent;
        d.is_contig = d.compute_contig();
        Ok(Self::new(d).committed())
    }

    /// `old` with its lower bound set to `lb` and its extent to `extent`
    /// (`MPI_Type_create_resized`). The new bounds are explicit markers:
    /// they take precedence over the data in every type built from this
    /// one.
    pub fn resized(old: &impl AsDatatype, lb: isize, extent: isize) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_create_resized";
        let old = old.as_user();
        let ub = lb.checked_add(extent).ok_or_else(|| {
            Error::new(
                ErrorClass::Arg,
                CALL,
                -1,
                format!("lb = {lb} plus extent = {extent} overflows isize"),
            )
        })?;
        let name = format!("resized({lb},{extent},{})", old.desc.name);
        Ok(Self::new(old.desc.with_bounds(lb, ub, name)))
    }

    /// The subarray `starts[i] .. starts[i] + subsizes[i]` of an array of
    /// `old` with dimensions `sizes`, stored in `order`
    /// (`MPI_Type_create_subarray`). As MPI specifies, the result has lower
    /// bound 0 and extent `product(sizes) * extent(old)`, so consecutive
    /// elements are consecutive full arrays.
    pub fn subarray(
        sizes: &[i32],
        subsizes: &[i32],
        starts: &[i32],
        order: Order,
        old: &impl AsDatatype,
    ) -> Result<UserDatatype> {
        const CALL: &str = "MPI_Type_create_subarray";
        let arg = |what: String| Error::new(ErrorClass::Arg, CALL, -1, what);
        if sizes.is_empty() {
            return Err(arg("ndims = 0; it must be positive".into()));
        }
        same_len(
            CALL,
            ("array_of_sizes", sizes.len()),
            ("array_of_subsizes", subsizes.len()),
        )?;
        same_len(
            CALL,
            ("array_of_sizes", sizes.len()),
            ("array_of_starts", starts.len()),
        )?;
        for i in 0..sizes.len() {
            let (n, s, st) = (sizes[i], subsizes[i], starts[i]);
            if n < 1 {
                return Err(arg(format!("array_of_sizes[{i}] = {n} is not positive")));
            }
            if s < 1 || s > n {
                return Err(arg(format!(
                    "array_of_subsizes[{i}] = {s} is not in 1..={n} (array_of_sizes[{i}])"
                )));
            }
            if st < 0 || st > n - s {
                return Err(arg(format!(
                    "array_of_starts[{i}] = {st} is not in 0..={} (array_of_sizes[{i}] - \
                     array_of_subsizes[{i}])",
                    n - s
                )));
            }
        }
        let old = old.as_user();
        // Dimensions from the fastest-varying to the slowest.
        let dims: Vec<usize> = match order {
            Order::C => (0..sizes.len()).rev().collect(),
            Order::Fortran => (0..sizes.len()).collect(),
        };
        let f0 = dims[0];
        let ext = old.desc.extent() as i128;
        let mut t = Self::build(
            CALL,
            String::new(),
            [(0, subsizes[f0] as usize, &*old.desc)],
        )?;
        let too_big = || arg("the extent of the full array overflows isize".into());
        let fits = |v: i128| v.unsigned_abs() <= isize::MAX as u128;
        let mut stride = sizes[f0] as i128 * ext;
        let mut offset = starts[f0] as i128 * ext;
        if !fits(stride) {
            return Err(too_big());
        }
        for &d in &dims[1..] {
            let parts = (0..subsizes[d] as usize).map(|j| (j as i128 * stride, 1, &t));
            t = Self::build(CALL, String::new(), parts)?;
            offset += starts[d] as i128 * stride;
            stride *= sizes[d] as i128;
            if !fits(stride) {
                return Err(too_big());
            }
        }
        let placed = Self::build(CALL, String::new(), [(offset, 1, &t)])?;
        let name = format!(
            "subarray({sizes:?},{subsizes:?},{starts:?},{order:?},{})",
            old.desc.name
        );
        Ok(Self::new(placed.with_bounds(0, stride as isize, name)))
    }

    /// A duplicate of this type, committed if this one is (`MPI_Type_dup`).
    pub fn dup(&self) -> UserDatatype {
        self.clone()
    }

    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> usize {
        self.desc.size
    }

    /// Extent: the stride between consecutive elements, `ub - lb`
    /// (`MPI_Type_get_extent`).
    pub fn extent(&self) -> isize {
        self.desc.extent()
    }

    /// Lower bound (`MPI_Type_get_extent`).
    pub fn lb(&self) -> isize {
        self.desc.lb
    }

    /// Upper bound, `lb + extent`.
    pub fn ub(&self) -> isize {
        self.desc.ub
    }

    /// Offset of the lowest data byte (`MPI_Type_get_true_extent`).
    pub fn true_lb(&self) -> isize {
        self.desc.true_lb
    }

    /// Bytes spanned by the data of one element, ignoring resized bounds
    /// (`MPI_Type_get_true_extent`).
    pub fn true_extent(&self) -> isize {
        self.desc.true_ub - self.desc.true_lb
    }

    /// Whether the type is committed (predefined types always are).
    pub fn is_committed(&self) -> bool {
        self.committed
    }

    /// Commit the type for use in communication (`MPI_Type_commit`).
    pub fn commit(&mut self) {
        self.committed = true;
    }

    /// The type, committed (`MPI_Type_commit` in builder style).
    pub fn committed(mut self) -> Self {
        self.commit();
        self
    }

    fn check_committed(&self, call: &str) -> Result<()> {
        if !self.committed {
            return Err(Error::new(
                ErrorClass::Type,
                call,
                -1,
                format!("datatype {} is not committed", self.desc.name),
            ));
        }
        Ok(())
    }

    /// Pack `count` elements whose first element's origin is at index
    /// `origin` of `src` into a new buffer of `count * size()` bytes
    /// (`MPI_Pack`). Errors: `MPI_ERR_TYPE` if uncommitted, `MPI_ERR_BUFFER`
    /// if the elements do not lie inside `src`.
    pub fn pack(&self, count: usize, src: &[u8], origin: usize) -> Result<Vec<u8>> {
        const CALL: &str = "MPI_Pack";
        self.check_committed(CALL)?;
        let total = self.pack_size_in(CALL, count)?;
        let mut out = vec![0u8; total];
        self.desc
            .pack(count, src, origin, &mut out)
            .map_err(|e| Error::new(ErrorClass::Buffer, CALL, -1, e))?;
        Ok(out)
    }

    /// Unpack `packed` into `count` elements whose first element's origin is
    /// at index `origin` of `dst` (`MPI_Unpack`). A `packed` shorter than
    /// `count * size()` fills only that prefix of the type map. Errors:
    /// `MPI_ERR_TYPE` if uncommitted, `MPI_ERR_TRUNCATE` if `packed` is
    /// longer than `count * size()`, `MPI_ERR_BUFFER` if the bytes to write
    /// do not lie inside `dst`.
    pub fn unpack(&self, count: usize, packed: &[u8], dst: &mut [u8], origin: usize) -> Result<()> {
        const CALL: &str = "MPI_Unpack";
        self.check_committed(CALL)?;
        let total = self.pack_size_in(CALL, count)?;
        if packed.len() > total {
            return Err(Error::new(
                ErrorClass::Truncate,
                CALL,
                -1,
                format!(
                    "{} packed bytes do not fit in {count} element(s) of {} ({total} bytes)",
                    packed.len(),
                    self.desc.name
                ),
            ));
        }
        self.desc
            .unpack(count, packed, dst, origin)
            .map_err(|e| Error::new(ErrorClass::Buffer, CALL, -1, e))
    }

    fn pack_size_in(&self, call: &str, count: usize) -> Result<usize> {
        count.checked_mul(self.desc.size).ok_or_else(|| {
            Error::new(
                ErrorClass::Count,
                call,
                -1,
                format!(
                    "count = {count} elements of {} overflow usize",
                    self.desc.name
                ),
            )
        })
    }

    /// Bytes that [`pack`](Self::pack) produces for `count` elements
    /// (`MPI_Pack_size`); `MPI_ERR_COUNT` if that overflows `usize`.
    pub fn pack_size(&self, count: usize) -> Result<usize> {
        self.pack_size_in("MPI_Pack_size", count)
    }

    /// Number of basic elements in the first `bytes` bytes of packed data of
    /// this type (`MPI_Get_elements`); `None` (`MPI_UNDEFINED`) if `bytes`
    /// ends inside a basic element.
    pub fn get_elements(&self, bytes: usize) -> Option<usize> {
        self.desc.elements(bytes)
    }

    /// The shared descriptor.
    pub(crate) fn desc(&self) -> &Arc<TypeDesc> {
        &self.desc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Equivalence;

    const F64: Datatype = Datatype::Primitive(Primitive::F64);
    const I32: Datatype = Datatype::Primitive(Primitive::I32);
    const I8: Datatype = Datatype::Primitive(Primitive::I8);

    /// (size, lb, extent, true_lb, true_extent)
    fn bounds(t: &UserDatatype) -> (usize, isize, isize, isize, isize) {
        (t.size(), t.lb(), t.extent(), t.true_lb(), t.true_extent())
    }

    fn blocks(t: &UserDatatype) -> Vec<(isize, usize)> {
        t.desc().blocks.clone()
    }

    #[test]
    fn segments_merge_runs_and_follow_the_type_map() {
        let i = I32.as_user();
        assert_eq!(i.desc().segments(1000), vec![(0, 4000)]);
        assert!(i.desc().segments(0).is_empty());
        // Two ints every three: one run per block.
        let v = UserDatatype::vector(2, 2, 3, &I32).unwrap();
        assert_eq!(v.desc().segments(1), vec![(0, 8), (12, 8)]);
        // The next element starts at the extent (20 bytes): 12+8 = 20 merges.
        assert_eq!(v.desc().segments(2), vec![(0, 8), (12, 16), (32, 8)]);
        // A resized int with a gap after it.
        let r = UserDatatype::resized(&I32, 0, 8).unwrap();
        assert_eq!(r.desc().segments(3), vec![(0, 4), (8, 4), (16, 4)]);
    }

    #[test]
    fn basic_types() {
        let t = F64.as_user();
        assert!(t.is_committed() && t.desc().is_contig);
        assert_eq!(bounds(&t), (8, 0, 8, 0, 8));
        let d = DoubleIntT::DATATYPE.as_user();
        assert_eq!(bounds(&d), (16, 0, 16, 0, 16));
        assert_eq!(d.desc().homogeneous(), Some(Primitive::DoubleInt));
        let o = Datatype::Opaque { size: 12 }.as_user();
        assert_eq!(o.desc().sig, vec![(Primitive::Byte, 12)]);
        assert_eq!(o.get_elements(5), Some(5));
        let u: UserDatatype = I32.into();
        assert_eq!(u.size(), 4);
    }
    use crate::datatype::DoubleInt as DoubleIntT;

    #[test]
    fn contiguous_bounds() {
        let t = UserDatatype::contiguous(4, &I32).unwrap();
        assert!(!t.is_committed());
        assert_eq!(bounds(&t), (16, 0, 16, 0, 16));
        assert!(t.desc().is_contig);
        assert_eq!(blocks(&t), vec![(0, 16)]);
        let e = UserDatatype::contiguous(0, &I32).unwrap();
        assert_eq!(bounds(&e), (0, 0, 0, 0, 0));
        assert!(e.desc().blocks.is_empty());
    }

    #[test]
    fn vector_bounds() {
        let t = UserDatatype::vector(3, 2, 4, &F64).unwrap();
        assert_eq!(bounds(&t), (48, 0, 80, 0, 80));
        assert_eq!(blocks(&t), vec![(0, 16), (32, 16), (64, 16)]);
        assert!(!t.desc().is_contig);
        assert_eq!(t.desc().homogeneous(), Some(Primitive::F64));
        assert_eq!(t.desc().sig, vec![(Primitive::F64, 6)]);
        // stride == blocklength: one contiguous run.
        let c = UserDatatype::vector(5, 3, 3, &I32).unwrap();
        assert_eq!(blocks(&c), vec![(0, 60)]);
        assert!(c.desc().is_contig);
        // Negative stride: blocks at 0, -16, -32.
        let n = UserDatatype::vector(3, 1, -2, &F64).unwrap();
        assert_eq!(bounds(&n), (24, -32, 40, -32, 40));
        assert_eq!(blocks(&n), vec![(0, 8), (-16, 8), (-32, 8)]);
        // Vector of a vector: stride in extents of the inner type (80).
        let vv = UserDatatype::vector(2, 1, 2, &t).unwrap();
        assert_eq!(bounds(&vv), (96, 0, 240, 0, 240));
    }

    #[test]
    fn hvector_and_indexed_bounds() {
        let t = UserDatatype::hvector(2, 1, -8, &I32).unwrap();
        assert_eq!(bounds(&t), (8, -8, 12, -8, 12));
        assert_eq!(blocks(&t), vec![(0, 4), (-8, 4)]);
        let i = UserDatatype::indexed(&[2, 1], &[3, 0], &I32).unwrap();
        assert_eq!(bounds(&i), (12, 0, 20, 0, 20));
        assert_eq!(blocks(&i), vec![(12, 8), (0, 4)]);
        let h = UserDatatype::hindexed(&[1, 0, 2], &[-4, 100, 0], &I32).unwrap();
        assert_eq!(bounds(&h), (12, -4, 12, -4, 12));
        assert_eq!(blocks(&h), vec![(-4, 12)]);
        let g = UserDatatype::hindexed(&[1, 2], &[-4, 4], &I32).unwrap();
        assert_eq!(bounds(&g), (12, -4, 16, -4, 16));
        assert_eq!(blocks(&g), vec![(-4, 4), (4, 8)]);
        let b =
            UserDatatype::indexed_block(2, &[0, 5], &Datatype::Primitive(Primitive::F32)).unwrap();
        assert_eq!(bounds(&b), (16, 0, 28, 0, 28));
        let hb = UserDatatype::hindexed_block(1, &[8, 0], &F64).unwrap();
        assert_eq!(bounds(&hb), (16, 0, 16, 0, 16));
        assert_eq!(blocks(&hb), vec![(8, 8), (0, 8)]);
        assert!(!hb.desc().is_contig, "type-map order is not memory order");
    }

    #[test]
    fn struct_extent_padded_to_alignment() {
        let (d, i) = (F64.as_user(), I32.as_user());
        let s = UserDatatype::structured(&[1, 1], &[-8, 4], &[d.clone(), i.clone()]).unwrap();
        assert_eq!(bounds(&s), (12, -8, 16, -8, 16));
        assert_eq!(s.desc().homogeneous(), None);
        assert_eq!(s.desc().sig, vec![(Primitive::F64, 1), (Primitive::I32, 1)]);
        // Padded to the f64's alignment, as C's sizeof (and MPICH) say.
        let p = UserDatatype::structured(&[1, 1], &[0, 8], &[d, I8.as_user()]).unwrap();
        assert_eq!(bounds(&p), (9, 0, 16, 0, 9));
        assert_eq!(blocks(&p), vec![(0, 9)]);
        assert!(!p.desc().is_contig);
        let r = UserDatatype::resized(&p, 0, 9).unwrap();
        assert_eq!(bounds(&r), (9, 0, 9, 0, 9));
        // Markers are explicit: no padding on top of them.
        let m = UserDatatype::structured(&[1], &[0], &[r]).unwrap();
        assert_eq!(m.extent(), 9);
    }

    #[test]
    fn resized_bounds_propagate() {
        let r = UserDatatype::resized(&I32, -4, 16).unwrap();
        assert_eq!(bounds(&r), (4, -4, 16, 0, 4));
        assert_eq!(r.ub(), 12);
        let c = UserDatatype::contiguous(2, &r).unwrap();
        assert_eq!(bounds(&c), (8, -4, 32, 0, 20));
        assert_eq!(blocks(&c), vec![(0, 4), (16, 4)]);
        // Markers are sticky: the i8 at 20 does not move the upper bound.
        let m = UserDatatype::resized(&I32, 4, 4).unwrap();
        let s = UserDatatype::structured(&[1, 1], &[0, 20], &[m, I8.as_user()]).unwrap();
        assert_eq!(bounds(&s), (5, 4, 4, 0, 21));
        // A resize to the size of a dense type makes it contiguous again.
        let v = UserDatatype::vector(1, 1, 1, &UserDatatype::resized(&I32, 0, 8).unwrap());
        let back = UserDatatype::resized(&v.unwrap(), 0, 4).unwrap();
        assert!(back.desc().is_contig);
        // An empty block contributes no markers.
        let e = UserDatatype::structured(&[0, 1], &[-100, 0], &[r.clone(), I32.as_user()]);
        assert_eq!(bounds(&e.unwrap()), (4, 0, 4, 0, 4));
    }

    #[test]
    fn subarray_c_and_fortran() {
        let c = UserDatatype::subarray(&[4, 5], &[2, 3], &[1, 2], Order::C, &F64).unwrap();
        assert_eq!(bounds(&c), (48, 0, 160, 56, 64));
        assert_eq!(blocks(&c), vec![(56, 24), (96, 24)]);
        let f = UserDatatype::subarray(&[4, 5], &[2, 3], &[1, 2], Order::Fortran, &F64).unwrap();
        assert_eq!(bounds(&f), (48, 0, 160, 72, 80));
        assert_eq!(blocks(&f), vec![(72, 16), (104, 16), (136, 16)]);
        let whole = UserDatatype::subarray(&[3, 2], &[3, 2], &[0, 0], Order::C, &I32).unwrap();
        assert!(whole.desc().is_contig);
        let three =
            UserDatatype::subarray(&[2, 3, 4], &[1, 2, 2], &[1, 1, 2], Order::C, &I8).unwrap();
        assert_eq!(bounds(&three), (4, 0, 24, 18, 6));
        assert_eq!(blocks(&three), vec![(18, 2), (22, 2)]);
    }

    #[test]
    fn constructor_errors_name_call_and_argument() {
        let e = UserDatatype::vector(-1, 1, 1, &F64).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Count);
        assert!(e.message().contains("MPI_Type_vector") && e.message().contains("count"));
        // A negative block length is a count error, as on MPICH.
        let e = UserDatatype::vector(1, -2, 1, &F64).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Count);
        assert!(e.message().contains("blocklength"), "{e}");
        let e = UserDatatype::contiguous(-3, &F64).unwrap_err();
        assert!(e.message().contains("MPI_Type_contiguous"), "{e}");
        let e = UserDatatype::indexed(&[1, 2], &[0], &F64).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Arg);
        assert!(e.message().contains("MPI_Type_indexed"), "{e}");
        let e = UserDatatype::hindexed(&[1, -2], &[0, 8], &F64).unwrap_err();
        assert!(e.message().contains("array_of_blocklengths[1]"), "{e}");
        let e = UserDatatype::indexed_block(-1, &[0], &F64).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Count);
        let e = UserDatatype::structured(&[1], &[0, 8], &[I32.as_user()]).unwrap_err();
        assert!(e.message().contains("MPI_Type_create_struct"), "{e}");
        for (sizes, subs, starts) in [
            (&[4, 5][..], &[2, 3][..], &[3, 0][..]),
            (&[4, 5], &[5, 3], &[0, 0]),
            (&[4, 0], &[1, 0], &[0, 0]),
            (&[4, 5], &[2, 3], &[0][..]),
            (&[], &[], &[]),
            (&[4], &[2], &[-1]),
        ] {
            let e = UserDatatype::subarray(sizes, subs, starts, Order::C, &F64).unwrap_err();
            assert_eq!(e.class(), ErrorClass::Arg, "{e}");
            assert!(e.message().contains("MPI_Type_create_subarray"), "{e}");
        }
        let e = UserDatatype::resized(&F64, isize::MAX, 1).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Arg);
        let e = UserDatatype::hvector(2, 1, isize::MAX, &F64).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Arg, "{e}");
    }

    #[test]
    fn flattening_stays_bounded() {
        let v = UserDatatype::vector(1_000_000, 1, 2, &I32).unwrap();
        assert_eq!(v.desc().blocks.len(), 1_000_000);
        assert_eq!(v.desc().sig, vec![(Primitive::I32, 1_000_000)]);
        let c = UserDatatype::vector(1_000_000, 4, 4, &I32).unwrap();
        assert_eq!(blocks(&c), vec![(0, 16_000_000)]);
        let cc =
            UserDatatype::contiguous(1 << 30, &UserDatatype::contiguous(1 << 30, &I8).unwrap());
        assert_eq!(cc.unwrap().size(), 1 << 60);
        let big = UserDatatype::vector(100_000, 1, 2, &v).unwrap_err();
        assert_eq!(big.class(), ErrorClass::Unsupported, "{big}");
        let big = UserDatatype::vector(100_000_000, 1, 2, &I8).unwrap_err();
        assert_eq!(big.class(), ErrorClass::Unsupported, "{big}");
    }

    #[test]
    fn pack_unpack_errors() {
        let t = UserDatatype::vector(2, 1, 2, &I32).unwrap();
        let src = [0u8; 12];
        assert_eq!(t.pack(1, &src, 0).unwrap_err().class(), ErrorClass::Type);
        let t = t.committed();
        assert_eq!(t.pack(1, &src, 0).unwrap().len(), 8);
        assert_eq!(t.pack(1, &src, 1).unwrap_err().class(), ErrorClass::Buffer);
        assert_eq!(t.pack(2, &src, 0).unwrap_err().class(), ErrorClass::Buffer);
        assert_eq!(
            t.pack(usize::MAX, &src, 0).unwrap_err().class(),
            ErrorClass::Count
        );
        let mut dst = [0u8; 12];
        let e = t.unpack(1, &[1; 9], &mut dst, 0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Truncate);
        assert!(e.message().contains("MPI_Unpack"), "{e}");
        let e = t.unpack(1, &[1; 8], &mut dst[..11], 0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Buffer);
        // A short message only needs room for what it fills.
        t.unpack(1, &[1; 4], &mut dst[..4], 0).unwrap();
        assert_eq!(t.pack_size(3).unwrap(), 24);
        // Negative lower bound: origin must leave room in front.
        let n = UserDatatype::hvector(2, 1, -8, &I32).unwrap().committed();
        assert_eq!(n.pack(1, &src, 4).unwrap_err().class(), ErrorClass::Buffer);
        let p = n.pack(1, &(0..12).collect::<Vec<u8>>(), 8).unwrap();
        assert_eq!(p, vec![8, 9, 10, 11, 0, 1, 2, 3]);
    }

    #[test]
    fn get_elements_counts_basic_elements() {
        let s = UserDatatype::structured(&[1, 2], &[0, 8], &[F64.as_user(), I32.as_user()])
            .unwrap()
            .committed();
        assert_eq!(s.size(), 16);
        assert_eq!(s.get_elements(0), Some(0));
        assert_eq!(s.get_elements(8), Some(1));
        assert_eq!(s.get_elements(10), None);
        assert_eq!(s.get_elements(12), Some(2));
        assert_eq!(s.get_elements(16), Some(3));
        assert_eq!(s.get_elements(24), Some(4));
        assert_eq!(s.get_elements(36), None);
        assert_eq!(s.get_elements(40), Some(7));
        let e = UserDatatype::contiguous(0, &F64).unwrap();
        assert_eq!((e.get_elements(0), e.get_elements(1)), (Some(0), None));
    }

    #[test]
    fn dup_keeps_commit_state() {
        let t = UserDatatype::contiguous(2, &F64).unwrap();
        assert!(!t.dup().is_committed());
        let mut u = t.dup();
        u.commit();
        assert!(u.dup().is_committed());
        assert_eq!(u.dup().size(), 16);
    }

    // ---- property tests against a naive type-map walker ----

    use proptest::prelude::*;

    /// A type built from the constructors, walked naively by the reference.
    #[derive(Debug, Clone)]
    enum Tree {
        Leaf(Primitive),
        Contig(i32, Box<Tree>),
        Vector(i32, i32, i32, Box<Tree>),
        Hvector(i32, i32, isize, Box<Tree>),
        Indexed(Vec<(i32, i32)>, Box<Tree>),
        Hindexed(Vec<(i32, isize)>, Box<Tree>),
        IndexedBlock(i32, Vec<i32>, Box<Tree>),
        Struct(Vec<(i32, isize, Tree)>),
        Resized(isize, isize, Box<Tree>),
        Subarray(Vec<(i32, i32, i32)>, Order, Box<Tree>),
    }

    /// A type-map entry of the fully expanded MPI type map.
    #[derive(Debug, Clone, Copy)]
    enum E {
        D(isize, Primitive),
        Lb(isize),
        Ub(isize),
        /// A struct's alignment padding: an upper bound where no marker is.
        S(isize),
    }

    fn shifted(m: &[E], by: isize, markers: bool, out: &mut Vec<E>) {
        for e in m {
            match *e {
                E::D(o, p) => out.push(E::D(o + by, p)),
                E::Lb(o) if markers => out.push(E::Lb(o + by)),
                E::Ub(o) if markers => out.push(E::Ub(o + by)),
                E::S(o) if markers => out.push(E::S(o + by)),
                _ => {}
            }
        }
    }

    /// MPI's lb/ub of a type map (markers win when present).
    fn rbounds(m: &[E]) -> (isize, isize) {
        let lbm = m.iter().filter_map(|e| match e {
            E::Lb(o) => Some(*o),
            _ => None,
        });
        let ubm = m.iter().filter_map(|e| match e {
            E::Ub(o) => Some(*o),
            _ => None,
        });
        let (dlo, dhi) = rdata(m).unwrap_or((0, 0));
        let pad = m.iter().filter_map(|e| match e {
            E::S(o) => Some(*o),
            _ => None,
        });
        let dhi = pad.fold(dhi, isize::max);
        (lbm.min().unwrap_or(dlo), ubm.max().unwrap_or(dhi))
    }

    fn rdata(m: &[E]) -> Option<(isize, isize)> {
        let d: Vec<(isize, isize)> = m
            .iter()
            .filter_map(|e| match *e {
                E::D(o, p) => Some((o, o + prim_size(p) as isize)),
                _ => None,
            })
            .collect();
        Some((d.iter().map(|x| x.0).min()?, d.iter().map(|x| x.1).max()?))
    }

    fn rmap(t: &Tree) -> Vec<E> {
        let mut out = Vec::new();
        let child = |c: &Tree| {
            let m = rmap(c);
            let (lb, ub) = rbounds(&m);
            (m, ub - lb)
        };
        match t {
            Tree::Leaf(p) => out.push(E::D(0, *p)),
            Tree::Contig(n, c) => {
                let (m, ext) = child(c);
                for k in 0..*n as isize {
                    shifted(&m, k * ext, true, &mut out);
                }
            }
            Tree::Vector(n, bl, st, c) => {
                let (m, ext) = child(c);
                for i in 0..*n as isize {
                    for k in 0..*bl as isize {
                        shifted(&m, i * *st as isize * ext + k * ext, true, &mut out);
                    }
                }
            }
            Tree::Hvector(n, bl, st, c) => {
                let (m, ext) = child(c);
                for i in 0..*n as isize {
                    for k in 0..*bl as isize {
                        shifted(&m, i * st + k * ext, true, &mut out);
                    }
                }
            }
            Tree::Indexed(v, c) => {
                let (m, ext) = child(c);
                for &(bl, d) in v {
                    for k in 0..bl as isize {
                        shifted(&m, d as isize * ext + k * ext, true, &mut out);
                    }
                }
            }
            Tree::Hindexed(v, c) => {
                let (m, ext) = child(c);
                for &(bl, d) in v {
                    for k in 0..bl as isize {
                        shifted(&m, d + k * ext, true, &mut out);
                    }
                }
            }
            Tree::IndexedBlock(bl, ds, c) => {
                let (m, ext) = child(c);
                for &d in ds {
                    for k in 0..*bl as isize {
                        shifted(&m, d as isize * ext + k * ext, true, &mut out);
                    }
                }
            }
            Tree::Struct(v) => {
                for (bl, d, c) in v {
                    let (m, ext) = child(c);
                    for k in 0..*bl as isize {
                        shifted(&m, d + k * ext, true, &mut out);
                    }
                }
                let marked = out.iter().any(|e| matches!(e, E::Lb(_) | E::Ub(_)));
                let align = out
                    .iter()
                    .filter_map(|e| match e {
                        E::D(_, p) => Some(align_of(*p) as isize),
                        _ => None,
                    })
                    .max();
                if let (false, Some(a)) = (marked, align) {
                    let (lb, ub) = rbounds(&out);
                    let pad = (a - (ub - lb).rem_euclid(a)) % a;
                    out.push(E::S(ub + pad));
                }
            }
            Tree::Resized(lb, ext, c) => {
                shifted(&rmap(c), 0, false, &mut out);
                out.push(E::Lb(*lb));
                out.push(E::Ub(lb + ext));
            }
            Tree::Subarray(dims, order, c) => {
                let (m, ext) = child(c);
                let nd = dims.len();
                // Row-major strides (in elements) per dimension.
                let mut stride = vec![1isize; nd];
                let order_dims: Vec<usize> = match order {
                    Order::C => (0..nd).rev().collect(),
                    Order::Fortran => (0..nd).collect(),
                };
                let mut acc = 1;
                for &d in &order_dims {
                    stride[d] = acc;
                    acc *= dims[d].0 as isize;
                }
                // Odometer over the subarray, fastest dimension first.
                let mut idx = vec![0i32; nd];
                'outer: loop {
                    let lin: isize = (0..nd)
                        .map(|d| (dims[d].2 + idx[d]) as isize * stride[d])
                        .sum();
                    shifted(&m, lin * ext, false, &mut out);
                    for &d in &order_dims {
                        idx[d] += 1;
                        if idx[d] < dims[d].1 {
                            continue 'outer;
                        }
                        idx[d] = 0;
                    }
                    break;
                }
                out.push(E::Lb(0));
                out.push(E::Ub(acc * ext));
            }
        }
        out
    }

    fn build(t: &Tree) -> UserDatatype {
        let r = match t {
            Tree::Leaf(p) => Ok(Datatype::Primitive(*p).as_user()),
            Tree::Contig(n, c) => UserDatatype::contiguous(*n, &build(c)),
            Tree::Vector(n, bl, st, c) => UserDatatype::vector(*n, *bl, *st, &build(c)),
            Tree::Hvector(n, bl, st, c) => UserDatatype::hvector(*n, *bl, *st, &build(c)),
            Tree::Indexed(v, c) => {
                let (b, d): (Vec<i32>, Vec<i32>) = v.iter().copied().unzip();
                UserDatatype::indexed(&b, &d, &build(c))
            }
            Tree::Hindexed(v, c) => {
                let (b, d): (Vec<i32>, Vec<isize>) = v.iter().copied().unzip();
                UserDatatype::hindexed(&b, &d, &build(c))
            }
            Tree::IndexedBlock(bl, ds, c) => UserDatatype::indexed_block(*bl, ds, &build(c)),
            Tree::Struct(v) => {
                let b: Vec<i32> = v.iter().map(|x| x.0).collect();
                let d: Vec<isize> = v.iter().map(|x| x.1).collect();
                let ts: Vec<UserDatatype> = v.iter().map(|x| build(&x.2)).collect();
                UserDatatype::structured(&b, &d, &ts)
            }
            Tree::Resized(lb, ext, c) => UserDatatype::resized(&build(c), *lb, *ext),
            Tree::Subarray(dims, order, c) => {
                let sizes: Vec<i32> = dims.iter().map(|x| x.0).collect();
                let subs: Vec<i32> = dims.iter().map(|x| x.1).collect();
                let starts: Vec<i32> = dims.iter().map(|x| x.2).collect();
                UserDatatype::subarray(&sizes, &subs, &starts, *order, &build(c))
            }
        };
        r.unwrap()
    }

    fn tree() -> impl Strategy<Value = Tree> {
        use Primitive as P;
        let leaf = prop_oneof![
            Just(P::I8),
            Just(P::I16),
            Just(P::I32),
            Just(P::F64),
            Just(P::Byte),
            Just(P::DoubleInt),
        ]
        .prop_map(Tree::Leaf);
        leaf.prop_recursive(3, 48, 3, |inner| {
            let b = || inner.clone().prop_map(Box::new);
            let dim = (1..4i32)
                .prop_flat_map(|n| (Just(n), 1..=n))
                .prop_flat_map(|(n, s)| (Just(n), Just(s), 0..=n - s));
            // Mostly non-empty counts, sometimes 0.
            let n = || prop_oneof![1 => Just(0i32), 6 => 1..4i32];
            prop_oneof![
                (n(), b()).prop_map(|(n, c)| Tree::Contig(n, c)),
                (n(), n(), -3..4i32, b()).prop_map(|(n, l, s, c)| Tree::Vector(n, l, s, c)),
                (n(), n(), -24..24isize, b()).prop_map(|(n, l, s, c)| Tree::Hvector(n, l, s, c)),
                (prop::collection::vec((n(), -3..4i32), 1..3), b())
                    .prop_map(|(v, c)| Tree::Indexed(v, c)),
                (prop::collection::vec((n(), -24..24isize), 1..3), b())
                    .prop_map(|(v, c)| Tree::Hindexed(v, c)),
                (n(), prop::collection::vec(-3..4i32, 1..3), b())
                    .prop_map(|(l, v, c)| Tree::IndexedBlock(l, v, c)),
                prop::collection::vec((n(), -24..24isize, inner.clone()), 1..3)
                    .prop_map(Tree::Struct),
                (-8..8isize, -4..24isize, b()).prop_map(|(l, e, c)| Tree::Resized(l, e, c)),
                (
                    prop::collection::vec(dim, 1..3),
                    prop_oneof![Just(Order::C), Just(Order::Fortran)],
                    b()
                )
                    .prop_map(|(d, o, c)| Tree::Subarray(d, o, c)),
            ]
        })
    }

    fn check(t: &Tree, count: usize, seed: u64, cut: usize) {
        let m = rmap(t);
        let (lb, ub) = rbounds(&m);
        let (tlb, tub) = rdata(&m).unwrap_or((0, 0));
        let dt = build(t).committed();
        let prims: Vec<(isize, Primitive)> = m
            .iter()
            .filter_map(|e| match *e {
                E::D(o, p) => Some((o, p)),
                _ => None,
            })
            .collect();
        let size: usize = prims.iter().map(|&(_, p)| prim_size(p)).sum();
        assert_eq!(
            (dt.size(), dt.lb(), dt.ub(), dt.true_lb(), dt.true_extent()),
            (size, lb, ub, tlb, tub - tlb)
        );
        let d = dt.desc();
        assert!(d.blocks.iter().all(|&(_, l)| l > 0));
        assert!(d
            .blocks
            .windows(2)
            .all(|w| w[0].0 + w[0].1 as isize != w[1].0));
        let homo = match prims.first() {
            Some(&(_, p)) if prims.iter().all(|x| x.1 == p) => Some(p),
            _ => None,
        };
        assert_eq!(d.homogeneous(), homo);

        // The basic elements of `count` elements, in type-map order.
        let ext = ub - lb;
        let entries: Vec<(isize, Primitive)> = (0..count as isize)
            .flat_map(|i| prims.iter().map(move |&(o, p)| (i * ext + o, p)))
            .collect();
        let lo = entries.iter().map(|e| e.0).min().unwrap_or(0);
        let hi = entries
            .iter()
            .map(|e| e.0 + prim_size(e.1) as isize)
            .max()
            .unwrap_or(0);
        assert_eq!(d.span(count), (lo, hi));
        let margin = 3isize;
        let origin = (margin - lo.min(0)) as usize;
        let len = (origin as isize + hi.max(0) + margin) as usize;
        let mut x = seed | 1;
        let src: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut want = Vec::new();
        for &(o, p) in &entries {
            let s = (origin as isize + o) as usize;
            want.extend_from_slice(&src[s..s + prim_size(p)]);
        }
        let packed = dt.pack(count, &src, origin).unwrap();
        assert_eq!(packed, want);
        if !entries.is_empty() {
            let short = &src[..(origin as isize + hi - 1) as usize];
            let e = dt.pack(count, short, origin).unwrap_err();
            assert_eq!(e.class(), ErrorClass::Buffer);
        }

        // Round trip (exact even where elements overlap).
        let mut back = src.clone();
        dt.unpack(count, &packed, &mut back, origin).unwrap();
        assert_eq!(back, src);

        // Prefix unpack, byte-exact.
        let p = cut % (packed.len() + 1);
        let mut got = vec![0xA5u8; len];
        let mut exp = got.clone();
        dt.unpack(count, &packed[..p], &mut got, origin).unwrap();
        let (mut pos, mut elems, mut partial) = (0, 0, false);
        for &(o, prim) in &entries {
            let s = (origin as isize + o) as usize;
            let l = prim_size(prim);
            let take = l.min(p - pos);
            exp[s..s + take].copy_from_slice(&packed[pos..pos + take]);
            pos += take;
            if take == l {
                elems += 1;
            } else if take > 0 {
                partial = true;
            }
            if pos == p {
                break;
            }
        }
        assert_eq!(got, exp);
        assert_eq!(dt.get_elements(p), (!partial).then_some(elems));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn pack_unpack_match_reference(
            t in tree(),
            count in prop_oneof![1 => Just(0usize), 6 => 1usize..4],
            seed in any::<u64>(),
            cut in any::<usize>(),
        ) {
            check(&t, count, seed, cut);
        }
    }
}
