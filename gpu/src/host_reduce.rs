//! Reductions evaluated on the host, element by element, with the
//! semantics of the device kernels (`cuda/kernels.rs`, [`ReduceOp::c_expr`]):
//! wrapping integer arithmetic, `Min`/`Max` keeping the accumulator on ties
//! and NaN comparisons, logical operators answering 0 or 1, and `bool`
//! operands read as zero or non-zero.
//!
//! Production code: [`crate::Gpu::reduce`] runs it on host copies of the
//! operands when the kernels cannot be built or loaded
//! ([`crate::GpuError::KernelUnavailable`]). The test double
//! ([`crate::double::TestCuda`]) runs it as its "kernel", and the device tests
//! compare the real kernels against it (re-exported as
//! `double::host_reduce`).

use crate::api::{ElemType, ReduceOp};

/// `acc[i] = op(acc[i], inc[i])` for the elements of `ty` in `acc` (native
/// byte order, any alignment); `inc` is at least as long as `acc`.
pub fn host_reduce(op: ReduceOp, ty: ElemType, acc: &mut [u8], inc: &[u8]) {
    macro_rules! int {
        ($t:ty) => {{
            const W: usize = std::mem::size_of::<$t>();
            for (a, b) in acc.chunks_exact_mut(W).zip(inc.chunks_exact(W)) {
                let x = <$t>::from_ne_bytes(a.try_into().expect("width"));
                let y = <$t>::from_ne_bytes(b.try_into().expect("width"));
                let r: $t = match op {
                    ReduceOp::Sum => x.wrapping_add(y),
                    ReduceOp::Prod => x.wrapping_mul(y),
                    ReduceOp::Min => x.min(y),
                    ReduceOp::Max => x.max(y),
                    ReduceOp::Land => ((x != 0) && (y != 0)) as $t,
                    ReduceOp::Lor => ((x != 0) || (y != 0)) as $t,
                    ReduceOp::Lxor => ((x != 0) != (y != 0)) as $t,
                    ReduceOp::Band => x & y,
                    ReduceOp::Bor => x | y,
                    ReduceOp::Bxor => x ^ y,
                };
                a.copy_from_slice(&r.to_ne_bytes());
            }
        }};
    }
    macro_rules! float {
        ($t:ty) => {{
            const W: usize = std::mem::size_of::<$t>();
            for (a, b) in acc.chunks_exact_mut(W).zip(inc.chunks_exact(W)) {
                let x = <$t>::from_ne_bytes(a.try_into().expect("width"));
                let y = <$t>::from_ne_bytes(b.try_into().expect("width"));
                let t = |c: bool| if c { 1.0 } else { 0.0 };
                let r: $t = match op {
                    ReduceOp::Sum => x + y,
                    ReduceOp::Prod => x * y,
                    ReduceOp::Min => {
                        if y < x {
                            y
                        } else {
                            x
                        }
                    }
                    ReduceOp::Max => {
                        if y > x {
                            y
                        } else {
                            x
                        }
                    }
                    ReduceOp::Land => t(x != 0.0 && y != 0.0),
                    ReduceOp::Lor => t(x != 0.0 || y != 0.0),
                    ReduceOp::Lxor => t((x != 0.0) != (y != 0.0)),
                    ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor => x,
                };
                a.copy_from_slice(&r.to_ne_bytes());
            }
        }};
    }
    match ty {
        ElemType::I8 => int!(i8),
        ElemType::U8 => int!(u8),
        ElemType::Bool => {
            for (a, &b) in acc.iter_mut().zip(inc) {
                let (x, y) = (*a != 0, b != 0);
                *a = match op {
                    ReduceOp::Sum | ReduceOp::Lor | ReduceOp::Bor | ReduceOp::Max => x || y,
                    ReduceOp::Prod | ReduceOp::Land | ReduceOp::Band | ReduceOp::Min => x && y,
                    ReduceOp::Lxor | ReduceOp::Bxor => x != y,
                } as u8;
            }
        }
        ElemType::I16 => int!(i16),
        ElemType::U16 => int!(u16),
        ElemType::I32 => int!(i32),
        ElemType::U32 => int!(u32),
        ElemType::I64 => int!(i64),
        ElemType::U64 => int!(u64),
        ElemType::F32 => float!(f32),
        ElemType::F64 => float!(f64),
        ElemType::F16 => narrow(
            op,
            acc,
            inc,
            |c| half::f16::from_ne_bytes(c).to_f32(),
            |f| half::f16::from_f32(f).to_ne_bytes(),
        ),
        ElemType::BF16 => narrow(
            op,
            acc,
            inc,
            |c| half::bf16::from_ne_bytes(c).to_f32(),
            |f| half::bf16::from_f32(f).to_ne_bytes(),
        ),
    }
}

/// A 16-bit float type: widened to f32 (exact) by `wide`, combined there,
/// rounded once by `round` (the kernels' conversions).
fn narrow(
    op: ReduceOp,
    acc: &mut [u8],
    inc: &[u8],
    wide: impl Fn([u8; 2]) -> f32,
    round: impl Fn(f32) -> [u8; 2],
) {
    let widen = |b: &[u8]| -> Vec<u8> {
        b.chunks_exact(2)
            .flat_map(|c| wide([c[0], c[1]]).to_ne_bytes())
            .collect()
    };
    let n = acc.len() / 2;
    let (mut a, b) = (widen(acc), widen(&inc[..2 * n]));
    host_reduce(op, ElemType::F32, &mut a, &b);
    for (dst, src) in acc.chunks_exact_mut(2).zip(a.chunks_exact(4)) {
        dst.copy_from_slice(&round(f32::from_ne_bytes(src.try_into().expect("4 bytes"))));
    }
}
