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
    assert_eq!(g.classify(v.as_ptr() as u64, v.len()), MemKind::Host);
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
    };
    let g = Gpu::init(&cfg).unwrap();
    assert!(!g.cuda_available());
    assert!(g.status().contains("GMPI_CUDA=off"));
    assert_eq!("ON".parse::<CudaMode>(), Ok(CudaMode::On));
    assert!("maybe".parse::<CudaMode>().is_err());
}

#[test]
fn host_memory_costs_one_query_and_device_ranges_are_cached() {
    let (d, g) = gpu();
    let v = [0u8; 64];
    assert_eq!(g.classify(v.as_ptr() as u64, 64), MemKind::Host);
    assert_eq!(d.counts().queries, 1);
    let p = d.malloc(1 << 20, 1);
    assert_eq!(g.classify(p + 4096, 100), MemKind::Device { ordinal: 1 });
    assert_eq!(g.classify(p, 1 << 20), MemKind::Device { ordinal: 1 });
    assert_eq!(
        g.classify(p + (1 << 20) - 1, 1),
        MemKind::Device { ordinal: 1 }
    );
    let c = d.counts();
    assert_eq!(c.queries, 2, "one query for the allocation, then hits");
    assert_eq!(c.buffer_id_checks, 2, "every hit re-checks the buffer id");
    let m = d.malloc_managed(100);
    assert_eq!(g.classify(m, 100), MemKind::Managed);
}

#[test]
fn freed_and_reallocated_address_is_reclassified() {
    let (d, g) = gpu();
    let p = d.malloc(4096, 0);
    assert_eq!(g.classify(p, 4096), MemKind::Device { ordinal: 0 });
    d.free(p);
    let q = d.malloc_managed(4096);
    assert_eq!(p, q, "the double reuses the address");
    assert_eq!(g.classify(q, 4096), MemKind::Managed);
    assert_eq!(g.counters()[2], 1, "one stale entry dropped");
    d.free(q);
    let r = d.malloc(4096, 1);
    assert_eq!(g.classify(r, 4096), MemKind::Device { ordinal: 1 });
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
    let receiver = Gpu::with_api(d.clone(), GpuConfig::default());
    let p = d.malloc(1 << 16, 0);
    d.poke(p + 100, b"hello");
    let desc = sender.ipc_export(p + 100, 5).unwrap();
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
        assert_eq!(g.classify(t.ptr, 100), MemKind::Device { ordinal: 0 });
    }
    // Kept for the next collective (temp.rs), freed by release.
    assert_eq!(d.counts().frees, 0);
    g.release();
    assert_eq!(d.counts().frees, 1);
    assert_eq!(g.select_device(5), Ok(Some(1)));
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
