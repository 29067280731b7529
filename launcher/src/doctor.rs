//! `gmpirun --doctor`: what gmpi finds on this machine for GPU traffic, and
//! why a fast path is missing — the checks every GPUDirect guide asks users
//! to make by hand.

use std::fmt::Write as _;

use gmpi_btl::{Capabilities, DeviceReg};
use gmpi_btl_ib::gpudirect;
use gmpi_gpu::{CudaMode, Gpu, GpuConfig, MemKind};
use gmpi_pml::protocol::{size_name, PlanTable, SendMode};
use gmpi_pml::{DeviceConfig, PmlConfig};

/// The default capabilities of the same-node and other-node transports, as
/// the protocol choice sees them (`GMPI_*` overrides are not applied here).
fn transports() -> [(&'static str, Capabilities); 3] {
    let shm = Capabilities {
        name: "shm",
        eager_limit: 8 << 10,
        max_send_size: 32 << 10,
        get: true,
        put: false,
        exclusivity: 100,
        get_threshold: 8 << 10,
        cuda_ipc: true,
        gpudirect: None,
    };
    let tcp = Capabilities {
        name: "tcp",
        eager_limit: 64 << 10,
        max_send_size: 128 << 10,
        get: false,
        put: false,
        exclusivity: 10,
        get_threshold: usize::MAX,
        cuda_ipc: false,
        gpudirect: None,
    };
    let ib = gmpi_btl_ib::caps(&gmpi_btl_ib::IbConfig::default());
    [
        ("same node (shm)", shm),
        ("other node (tcp)", tcp),
        ("other node (ib)", ib),
    ]
}

/// The device protocols' thresholds as `GMPI_GPU_EAGER_LIMIT` and
/// `GMPI_GPU_IPC_THRESHOLD` set them (bytes).
fn device_config(gdrcopy: bool) -> DeviceConfig {
    let mut d = DeviceConfig {
        gdrcopy,
        ..DeviceConfig::default()
    };
    let size = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
    };
    if let Some(v) = size("GMPI_GPU_EAGER_LIMIT") {
        d.eager_limit = v;
    }
    if let Some(v) = size("GMPI_GPU_IPC_THRESHOLD") {
        d.ipc_threshold = v;
    }
    d
}

/// What the gpu layer answers for GPUDirect RDMA (a device, dma-buf
/// export), or why not when CUDA is not usable.
#[cfg(feature = "ib")]
fn gpu_probe(gpu: &Result<Gpu, gmpi_gpu::GpuError>) -> (Result<(), String>, Result<(), String>) {
    match gpu {
        Ok(g) => g.gpudirect_probe(),
        Err(e) => {
            let no = Err(format!("CUDA is not usable: {e}"));
            (no.clone(), no)
        }
    }
}

/// The verbs ports btl-ib finds, which it would use, and why not; and how
/// it would register GPU memory (GPUDirect RDMA), which it returns.
#[cfg(feature = "ib")]
fn verbs_report(o: &mut String, gpu: &Result<Gpu, gmpi_gpu::GpuError>) -> Option<DeviceReg> {
    use gmpi_btl_ib::verbs;
    match verbs::probe() {
        Err(e) => {
            let _ = writeln!(o, "RDMA ports: none ({e}); ranks on other nodes talk over TCP, device data between nodes is staged through host memory");
            None
        }
        Ok(c) => {
            for p in &c {
                let numa = std::fs::read_to_string(format!(
                    "/sys/class/infiniband/{}/device/numa_node",
                    p.port.device
                ))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into());
                let _ = writeln!(
                    o,
                    "RDMA port: {} (NUMA node {numa})",
                    verbs::describe(std::slice::from_ref(p))
                );
            }
            let want = verbs::Want {
                devices: std::env::var("GMPI_IB_DEVICES")
                    .ok()
                    .and_then(|d| verbs::parse_devices(&d).ok()),
                ..verbs::Want::default()
            };
            // The GPU of local rank 0, as a rank would be near it.
            let bus = gpu.as_ref().ok().and_then(|g| g.bus_id_for(0));
            let near = verbs::near(bus.as_deref());
            if let Some(g) = &near.gpu {
                let _ = writeln!(o, "GPU 0 in the PCI tree: {}", g.display());
            }
            let chosen = match verbs::choose(&c, want.devices.as_deref(), &near) {
                Ok(p) => {
                    let _ = writeln!(o, "btl-ib would use: {}:{}", p.port.device, p.port.port);
                    Some(p)
                }
                Err(e) => {
                    let _ = writeln!(o, "btl-ib: {e}; ranks on other nodes talk over TCP");
                    None
                }
            };
            let chosen = chosen?;
            // The NIC's answer needs a protection domain on it: open the
            // port as a rank would.
            let nic_dmabuf = verbs::open(
                &verbs::Want {
                    devices: Some(vec![(chosen.port.device.clone(), Some(chosen.port.port))]),
                    ..verbs::Want::default()
                },
                &near,
            )
            .and_then(|mut f| {
                use gmpi_btl_ib::fabric::Fabric;
                f.probe_dmabuf()
            });
            match &nic_dmabuf {
                Ok(()) => writeln!(o, "dma-buf registration on {}: yes", chosen.port.device),
                Err(e) => writeln!(
                    o,
                    "dma-buf registration on {}: no ({e})",
                    chosen.port.device
                ),
            }
            .ok();
            let probes =
                gpudirect::Probes::gather(gpu_probe(gpu), nic_dmabuf, std::path::Path::new("/sys"));
            let d = match gpudirect::Want::from_env() {
                Ok(w) => gpudirect::decide(w, &probes),
                Err(e) => {
                    let _ = writeln!(o, "GPUDirect RDMA: {e}");
                    return None;
                }
            };
            let _ = writeln!(o, "GPUDirect RDMA: {}", d.describe());
            d.via
        }
    }
}

/// Without feature `ib`: what is there, and that it is not used.
#[cfg(not(feature = "ib"))]
fn verbs_report(o: &mut String, gpu: &Result<Gpu, gmpi_gpu::GpuError>) -> Option<DeviceReg> {
    let _ = gpu;
    let ib = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    if ib.is_empty() {
        let _ = writeln!(o, "RDMA NICs: none (no /sys/class/infiniband); GPUDirect RDMA is not possible, device data between nodes is staged through host memory");
    }
    for n in &ib {
        let _ = writeln!(o, "RDMA NIC: {n}; gmpi's InfiniBand transport is not built into this binary (./install.sh builds it where rdma-core's development files are present), so ranks on other nodes talk over TCP");
    }
    None
}

/// The report, and whether CUDA was usable.
pub fn report() -> (String, bool) {
    let mut o = String::new();
    let gpu = Gpu::init(&GpuConfig {
        mode: CudaMode::On,
        ..GpuConfig::default()
    });
    let mut gdrcopy = false;
    let _ = writeln!(o, "gmpi doctor");
    let usable = match &gpu {
        Ok(g) => {
            let f = g.api().expect("mode on").facts();
            let _ = writeln!(
                o,
                "CUDA driver: {}",
                f.driver_version.as_deref().unwrap_or("unknown")
            );
            let _ = writeln!(o, "GPUs: {}", f.devices.len());
            for d in &f.devices {
                let _ = writeln!(o, "  {d}");
            }
            for (a, b) in &f.peer_access {
                let _ = writeln!(o, "  peer access: GPU {a} -> GPU {b}");
            }
            gdrcopy = f.gdrcopy.is_ok();
            match &f.gdrcopy {
                Ok(v) => writeln!(o, "GDRCopy: yes ({v})"),
                Err(why) => writeln!(o, "GDRCopy: no ({why}); small device messages use cuMemcpy through a pinned buffer"),
            }
            .ok();
            match &f.dmabuf {
                Ok(()) => writeln!(o, "dma-buf export of GPU memory: yes"),
                Err(why) => writeln!(o, "dma-buf export of GPU memory: no ({why})"),
            }
            .ok();
            true
        }
        Err(e) => {
            let _ = writeln!(o, "CUDA: not usable ({e}); every buffer is host memory");
            false
        }
    };
    match gpudirect::peermem(std::path::Path::new("/sys")) {
        Ok(()) => writeln!(o, "nvidia_peermem: loaded"),
        Err(e) => writeln!(o, "nvidia_peermem: {e}"),
    }
    .ok();
    let via = verbs_report(&mut o, &gpu);
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft == nix::sys::resource::RLIM_INFINITY => {
            let _ = writeln!(o, "ulimit -l: unlimited");
        }
        Ok((soft, _)) => {
            let _ = writeln!(
                o,
                "ulimit -l: {} KiB{}",
                soft / 1024,
                if soft < (64 << 20) {
                    " (low: pinned staging buffers and RDMA registration may fail; raise it)"
                } else {
                    ""
                }
            );
        }
        Err(e) => {
            let _ = writeln!(o, "ulimit -l: unknown ({e})");
        }
    }
    let pcfg = PmlConfig {
        device: device_config(gdrcopy),
        ..PmlConfig::default()
    };
    let _ = writeln!(
        o,
        "protocols (source -> destination, size: protocol; then the whole plan table, as GMPI_LOG=pml=debug prints it):"
    );
    let dev = MemKind::Device { ordinal: 0 };
    for (where_, mut caps) in transports() {
        if caps.name == "ib" {
            caps.gpudirect = via;
        }
        let _ = writeln!(o, "  {where_}:");
        for (sn, sk) in [("H", MemKind::Host), ("D", dev)] {
            for (dn, dk) in [("H", MemKind::Host), ("D", dev)] {
                let mut line = format!("    {sn}->{dn}");
                let usable_here = usable || sk.is_host();
                let table = PlanTable::build(sk, Some(dk), SendMode::Standard, &caps, &pcfg);
                for len in [8usize, 64 << 10, 16 << 20] {
                    let p = if usable_here {
                        table.plan(len).name
                    } else {
                        "n/a (no CUDA)"
                    };
                    let _ = write!(line, "  {}: {p}", size_name(len));
                }
                let _ = writeln!(o, "{line}");
                if usable_here {
                    let _ = writeln!(o, "      {table}");
                }
            }
        }
        if !caps.cuda_ipc && caps.get && caps.gpudirect.is_none() {
            let _ = writeln!(o, "    (no CUDA IPC between nodes, and btl-ib does not register GPU memory here (see GPUDirect RDMA above): large device messages are staged)");
        } else if !caps.cuda_ipc && caps.gpudirect.is_none() {
            let _ = writeln!(o, "    (no CUDA IPC between nodes; no GPUDirect without an RDMA transport: large device messages are staged)");
        }
    }
    (o, usable)
}

/// Print the report; exit status 0 (the report itself says what is missing).
pub fn run() -> i32 {
    print!("{}", report().0);
    0
}

#[cfg(test)]
mod tests {
    #[test]
    fn report_without_cuda_says_why() {
        let (r, usable) = super::report();
        assert!(r.contains("protocols"));
        assert!(r.contains("ulimit -l"));
        if !usable {
            assert!(r.contains("CUDA: not usable"));
            assert!(r.contains("H->H  8 B: eager"));
        }
    }
}
