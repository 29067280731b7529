use std::sync::Arc;

use super::*;
use crate::double::TestCuda;

fn gpu() -> (Arc<TestCuda>, Gpu) {
    let d = Arc::new(TestCuda::new(2));
    let g = Gpu::with_api(d.clone(), GpuConfig::default());
    (d, g)
}

#[test]
fn host_only_answers_host_without_a_backend() {
    let g = Gpu::host_only("test");
    let v = [1u8; 16];
    assert_eq!(g.classify(v.as_ptr() as u64, v.len()), Ok(MemKind::Host));
    assert!(!g.cuda_available());
    assert!(MemKind::Host.is_host_accessible());
    assert!(!MemKind::Device { ordinal: 0 }.is_host_accessible());
    assert!(matches!(
        g.with_read(0x1000, 4, |_| ()),
        Err(GpuError::Unavailable(_))
    ));
    assert_eq!(g.select_device(3), Ok(None));
}

#[test]
fn off_loads_nothing() {
    let cfg = GpuConfig {
        mode: CudaMode::Off,
        ..GpuConfig::default()
    };
    let g = Gpu::init(&cfg).unwrap();
    assert!(!g.cuda_available());
    assert!(g.status().contains("GMPI_CUDA=off"));
    assert_eq!("ON".parse::<CudaMode>(), Ok(CudaMode::On));
    assert!("maybe".parse::<CudaMode>().is_err());
}

#[test]
fn classification_asks_the_driver_once_per_buffer() {
    let (d, g) = gpu();
    // Static data: where no device allocation can ever appear.
    static V: [u8; 64] = [0; 64];
    let h = V.as_ptr() as u64;
    assert_eq!(g.classify(h, 64), Ok(MemKind::Host));
    assert_eq!(d.counts().queries, 1);
    // The fast path: a host buffer seen before costs no driver call.
    for _ in 0..100 {
        assert_eq!(g.classify(h, 64), Ok(MemKind::Host));
        assert_eq!(g.classify(h + 8, 8), Ok(MemKind::Host));
    }
    let c = d.counts();
    assert_eq!((c.queries, c.buffer_id_checks), (1, 0), "{c:?}");
    // A mapped buffer (a large malloc) is asked about every time: once
    // unmapped, a device allocation may take its addresses.
    let big = vec![0u8; 64 << 20];
    for _ in 0..3 {
        assert_eq!(g.classify(big.as_ptr() as u64, 64), Ok(MemKind::Host));
    }
    assert_eq!(d.counts().queries, 4);
    let p = d.malloc(1 << 20, 1);
    assert_eq!(
        g.classify(p + 4096, 100),
        Ok(MemKind::Device { ordinal: 1 })
    );
    assert_eq!(g.classify(p, 1 << 20), Ok(MemKind::Device { ordinal: 1 }));
    assert_eq!(
        g.classify(p + (1 << 20) - 1, 1),
        Ok(MemKind::Device { ordinal: 1 })
    );
    let c = d.counts();
    assert_eq!(c.queries, 5, "one query for the allocation, then hits");
    assert_eq!(
        c.buffer_id_checks, 2,
        "a device hit re-checks its buffer id, one call, no query"
    );
    let m = d.malloc_managed(100);
    assert_eq!(g.classify(m, 100), Ok(MemKind::Managed));
}

#[test]
fn a_failed_query_is_an_error_not_host_memory() {
    let (d, g) = gpu();
    let p = d.malloc(4096, 0);
    d.fail_queries(Some("CUDA_ERROR_ILLEGAL_ADDRESS: sticky"));
    let e = g.classify(p, 16).unwrap_err();
    assert!(e.to_string().contains("cuPointerGetAttributes"), "{e}");
    assert!(e.to_string().contains("ILLEGAL_ADDRESS"), "{e}");
    let v = [0u8; 8];
    assert!(
        g.classify(v.as_ptr() as u64, 8).is_err(),
        "not taken for host"
    );
    d.fail_queries(None);
    assert_eq!(g.classify(p, 16), Ok(MemKind::Device { ordinal: 0 }));
}

/// A freed device range can come back as host memory (an H200 with driver
/// 580 gave a freed 16 MiB `cuMemAlloc` range to the next 16 MiB `malloc`):
/// a device entry must not answer for it.
#[test]
fn freed_device_address_reused_as_host_memory_is_host() {
    let (d, g) = gpu();
    let p = d.malloc(16 << 20, 0);
    assert_eq!(g.classify(p, 16 << 20), Ok(MemKind::Device { ordinal: 0 }));
    d.free(p);
    // The double's freed range is host memory to the driver now.
    assert_eq!(g.classify(p + 64, 16 << 20), Ok(MemKind::Host));
    assert_eq!(g.counters()[2], 1, "the stale device entry was dropped");
    assert_eq!(g.classify(p + 64, 16 << 20), Ok(MemKind::Host));
}

#[test]
fn freed_and_reallocated_address_is_reclassified() {
    let (d, g) = gpu();
    let p = d.malloc(4096, 0);
    assert_eq!(g.classify(p, 4096), Ok(MemKind::Device { ordinal: 0 }));
    d.free(p);
    let q = d.malloc_managed(4096);
    assert_eq!(p, q, "the double reuses the address");
    // What depends on the allocation re-checks its buffer id.
    assert_eq!(g.info(q).unwrap().map(|i| i.kind), Some(MemKind::Managed));
    assert_eq!(g.counters()[2], 1, "one stale entry dropped");
    assert_eq!(g.classify(q, 4096), Ok(MemKind::Managed));
    d.free(q);
    let r = d.malloc(4096, 1);
    assert_eq!(
        g.info(r).unwrap().map(|i| i.kind),
        Some(MemKind::Device { ordinal: 1 })
    );
    assert_eq!(g.classify(r, 4096), Ok(MemKind::Device { ordinal: 1 }));
}

#[test]
fn staged_reads_and_writes_go_through_pooled_bounce_buffers() {
    let (d, g) = gpu();
    let p = d.malloc(1000, 0);
    g.with_write(p, 1000, |b| {
        b.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8)
    })
    .unwrap();
    let (sum, path) = g
        .with_read(p + 10, 20, |b| b.iter().map(|&x| x as u32).sum::<u32>())
        .unwrap();
    assert_eq!(sum, (10..30).sum::<u32>());
    assert_eq!(path, CopyPath::CudaCopy);
    let c = d.counts();
    assert_eq!((c.htod, c.dtoh, c.pinned), (1, 1, 1));
    assert!(
        g.with_read(p + 990, 20, |_| ()).is_err(),
        "past the allocation"
    );
}

#[test]
fn ipc_export_map_and_stale_mappings() {
    let (d, sender) = gpu();
    // The receiver is another process of the node (its own view).
    let receiver = Gpu::with_api(Arc::new(d.process(1)), GpuConfig::default());
    let p = d.malloc(1 << 16, 0);
    d.poke(p + 100, b"hello");
    let desc = sender.ipc_export(p + 100, 5).unwrap();
    // As with real CUDA, the exporting process cannot open its own handle.
    let own = sender.ipc_map(0, &desc).unwrap_err();
    assert!(
        own.to_string().contains("CUDA_ERROR_INVALID_CONTEXT"),
        "{own}"
    );
    assert_eq!(d.counts().ipc_opens, 0);
    assert_eq!((desc.base, desc.offset, desc.len), (p, 100, 5));
    let mut wire = [0u8; IpcDesc::WIRE_LEN];
    desc.encode(&mut wire);
    assert_eq!(IpcDesc::decode(&wire), Some(desc));
    assert_eq!(IpcDesc::decode(&wire[1..]), None);

    let at = receiver.ipc_map(3, &desc).unwrap();
    assert_ne!(at, p + 100, "mapped at another address");
    let mut out = [0u8; 5];
    receiver.copy_to_host(&mut out, at).unwrap();
    assert_eq!(&out, b"hello");
    // Same allocation again: cached.
    receiver
        .ipc_map(3, &sender.ipc_export(p, 1).unwrap())
        .unwrap();
    assert_eq!(d.counts().ipc_opens, 1);
    assert_eq!(d.counts().ipc_handles, 1, "export cached too");

    // Free and re-allocate at the same address: a new handle, the old
    // mapping closed, the new data read.
    d.free(p);
    let q = d.malloc(1 << 16, 0);
    assert_eq!(p, q);
    d.poke(q, b"world");
    let desc2 = sender.ipc_export(q, 5).unwrap();
    assert_ne!(desc2.buffer_id, desc.buffer_id);
    let at2 = receiver.ipc_map(3, &desc2).unwrap();
    receiver.copy_to_host(&mut out, at2).unwrap();
    assert_eq!(&out, b"world");
    let c = d.counts();
    assert_eq!((c.ipc_opens, c.ipc_closes, c.ipc_handles), (2, 1, 2));
    assert_eq!(receiver.counters()[4], 1);
    drop(receiver);
    assert_eq!(d.open_mappings(), 0, "mappings closed on drop");

    let m = d.malloc_managed(64);
    assert!(
        sender.ipc_export(m, 64).is_err(),
        "no IPC of managed memory"
    );
    let h = [0u8; 8];
    assert!(sender.ipc_export(h.as_ptr() as u64, 8).is_err());
}

#[test]
fn device_reductions_and_temporaries() {
    let (d, g) = gpu();
    let a = d.malloc(16, 0);
    let b = d.malloc(16, 0);
    d.poke(a, &[1i32, -2, 3, 4].map(i32::to_ne_bytes).concat());
    d.poke(b, &[10i32, 20, -30, 40].map(i32::to_ne_bytes).concat());
    g.reduce(ReduceOp::Sum, ElemType::I32, a, b, 4).unwrap();
    assert_eq!(
        d.peek(a, 16),
        [11i32, 18, -27, 44].map(i32::to_ne_bytes).concat()
    );
    g.reduce(ReduceOp::Max, ElemType::I32, a, b, 4).unwrap();
    assert_eq!(
        d.peek(a, 16),
        [11i32, 20, -27, 44].map(i32::to_ne_bytes).concat()
    );
    assert!(g.reduce(ReduceOp::Bxor, ElemType::F32, a, b, 4).is_err());
    {
        let t = g.alloc_device(100, a).unwrap();
        assert_eq!(g.classify(t.ptr, 100), Ok(MemKind::Device { ordinal: 0 }));
    }
    // Kept for the next collective (temp.rs), freed by release.
    assert_eq!(d.counts().frees, 0);
    g.release();
    assert_eq!(d.counts().frees, 1);
    assert_eq!(g.select_device(5), Ok(Some(1)));
}

/// `vals` in native byte order.
fn ne<T: Copy, const N: usize>(vals: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    vals.iter().flat_map(|&v| f(v)).collect()
}

/// Where the kernels cannot be built or loaded (no NVRTC, PTX the driver
/// refuses), reductions still give the right answer, on host copies: two
/// copies out and one back each, no kernel, the kernel tried once, one
/// warning for the layer.
/// The bits of `x` as a half.
fn half(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// The bits of `x` as a bfloat16.
fn bf(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

#[test]
fn reductions_fall_back_to_the_host_without_kernels() {
    let d = Arc::new(TestCuda::new(1).without_kernels());
    let g = Gpu::with_api(d.clone(), GpuConfig::default());
    type Case = (ReduceOp, ElemType, Vec<u8>, Vec<u8>, Vec<u8>);
    let cases: Vec<Case> = vec![
        (
            ReduceOp::Sum,
            ElemType::I32,
            ne(&[1i32, -2, 3, i32::MAX], i32::to_ne_bytes),
            ne(&[10i32, 20, -30, 1], i32::to_ne_bytes),
            ne(&[11i32, 18, -27, i32::MIN], i32::to_ne_bytes),
        ),
        (
            ReduceOp::Prod,
            ElemType::F64,
            ne(&[1.5f64, -2.0, 0.0], f64::to_ne_bytes),
            ne(&[2.0f64, 3.0, 7.0], f64::to_ne_bytes),
            ne(&[3.0f64, -6.0, 0.0], f64::to_ne_bytes),
        ),
        (
            ReduceOp::Min,
            ElemType::U16,
            ne(&[5u16, 65535, 0], u16::to_ne_bytes),
            ne(&[7u16, 1, 0], u16::to_ne_bytes),
            ne(&[5u16, 1, 0], u16::to_ne_bytes),
        ),
        (
            ReduceOp::Max,
            ElemType::F32,
            ne(&[-1.0f32, 2.5], f32::to_ne_bytes),
            ne(&[-0.5f32, 2.0], f32::to_ne_bytes),
            ne(&[-0.5f32, 2.5], f32::to_ne_bytes),
        ),
        (
            ReduceOp::Bxor,
            ElemType::U64,
            ne(&[0xff00u64, u64::MAX], u64::to_ne_bytes),
            ne(&[0x0ff0u64, 1], u64::to_ne_bytes),
            ne(&[0xf0f0u64, u64::MAX - 1], u64::to_ne_bytes),
        ),
        (
            ReduceOp::Lxor,
            ElemType::Bool,
            vec![0, 1, 1, 0],
            vec![0, 0, 1, 1],
            vec![0, 1, 0, 1],
        ),
        // Half precision: combined in f32, rounded to half once (2048 + 1
        // is halfway between representable halves: ties to even, 2048).
        (
            ReduceOp::Sum,
            ElemType::F16,
            ne(&[half(2048.0), half(0.5), half(65504.0)], u16::to_ne_bytes),
            ne(&[half(1.0), half(0.25), half(65504.0)], u16::to_ne_bytes),
            ne(&[half(2048.0), half(0.75), 0x7c00], u16::to_ne_bytes),
        ),
        (
            ReduceOp::Max,
            ElemType::F16,
            ne(&[half(-1.0), half(3.0)], u16::to_ne_bytes),
            ne(&[half(-0.5), half(2.0)], u16::to_ne_bytes),
            ne(&[half(-0.5), half(3.0)], u16::to_ne_bytes),
        ),
        // bfloat16: 256 + 1 rounds to even (256), 1 + 0.5 is exact.
        (
            ReduceOp::Sum,
            ElemType::BF16,
            ne(&[bf(256.0), bf(1.0)], u16::to_ne_bytes),
            ne(&[bf(1.0), bf(0.5)], u16::to_ne_bytes),
            ne(&[bf(256.0), bf(1.5)], u16::to_ne_bytes),
        ),
    ];
    for (op, ty, a, b, want) in &cases {
        let x = d.malloc(a.len(), 0);
        let y = d.malloc(b.len(), 0);
        d.poke(x, a);
        d.poke(y, b);
        let before = d.counts();
        g.reduce(*op, *ty, x, y, a.len() / ty.size()).unwrap();
        assert_eq!(&d.peek(x, a.len()), want, "{op:?} on {ty:?}");
        assert_eq!(&d.peek(y, b.len()), b, "{op:?} on {ty:?}: input changed");
        let c = d.counts();
        assert_eq!(
            (
                c.dtoh - before.dtoh,
                c.htod - before.htod,
                c.dtod - before.dtod
            ),
            (2, 1, 0),
            "{op:?} on {ty:?}: both operands out, the result back"
        );
    }
    let c = d.counts();
    assert_eq!(c.reduces, 0, "no kernel ran");
    assert_eq!(
        c.kernel_refusals, 1,
        "the kernel was tried once, not per call"
    );
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    assert_eq!(n(&g.stats.host_reduces), cases.len() as u64);
    assert_eq!(n(&g.stats.kernel_warnings), 1, "one warning per layer");

    // The fallback masks no other error: a copy past an allocation's end
    // fails, and MPI's undefined pairs stay undefined.
    let x = d.malloc(8, 0);
    assert!(matches!(
        g.reduce(ReduceOp::Sum, ElemType::I32, x, x, 4),
        Err(GpuError::BadRange { .. })
    ));
    assert!(matches!(
        g.reduce(ReduceOp::Band, ElemType::F32, x, x, 2),
        Err(GpuError::Unsupported(_))
    ));
    assert_eq!(n(&g.stats.host_reduces), cases.len() as u64);
    assert_eq!(n(&g.stats.kernel_warnings), 1);
}

/// With kernels, a reduction never goes to the host, and a kernel's own
/// error (here a range past an allocation's end) is returned, not hidden
/// by the fallback.
#[test]
fn reductions_with_kernels_never_fall_back() {
    let (d, g) = gpu();
    let a = d.malloc(8, 0);
    let b = d.malloc(16, 0);
    assert!(matches!(
        g.reduce(ReduceOp::Sum, ElemType::I32, a, b, 4),
        Err(GpuError::BadRange { .. })
    ));
    g.reduce(ReduceOp::Sum, ElemType::I32, b, b, 4).unwrap();
    let c = d.counts();
    assert_eq!((c.reduces, c.kernel_refusals, c.dtoh, c.htod), (1, 0, 0, 0));
    assert_eq!(g.stats.host_reduces.load(Ordering::Relaxed), 0);
    assert_eq!(g.stats.kernel_warnings.load(Ordering::Relaxed), 0);
}

#[test]
fn every_op_and_type_has_a_kernel_expression() {
    for op in ReduceOp::ALL {
        for ty in ElemType::ALL {
            if op.supports(ty) {
                assert!(op.c_expr(ty).contains('a'));
            }
        }
    }
}
