//! GPUDirect RDMA: whether the NIC may read and write GPU memory, and how
//! it registers it ([`DeviceReg`]). One pure function, [`decide`], makes the
//! choice from what the GPU, the NIC and the kernel answered at start-up, in
//! this order:
//!
//! 1. **dma-buf** (the upstream path): the GPU exports dma-bufs
//!    (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`, the driver has
//!    `cuMemGetHandleForAddressRange`) and the NIC registers them
//!    (`ibv_reg_dmabuf_mr` with fd −1 answers `EBADF`, not `EOPNOTSUPP`).
//!    Device memory is then registered with `ibv_reg_dmabuf_mr` on the
//!    export of its GPU pages, at offset `address − start of the export`.
//! 2. **`nvidia_peermem`**: the kernel module that lets `ibv_reg_mr` pin
//!    GPU memory by its address, found in sysfs ([`peermem`]).
//! 3. Neither: device data between nodes is staged through pinned host
//!    memory (the pml's `rndv/staged`), as before.
//!
//! `GMPI_IB_GPUDIRECT=auto|dmabuf|peermem|off` ([`Want`]) narrows the
//! choice; `gmpirun --doctor` prints the decision with every reason.

use std::path::Path;

use gmpi_btl::DeviceReg;

/// What the user allows (`GMPI_IB_GPUDIRECT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Want {
    /// dma-buf, else `nvidia_peermem`, else staging (the default).
    #[default]
    Auto,
    /// dma-buf only.
    DmaBuf,
    /// `nvidia_peermem` only.
    PeerMem,
    /// Never: device data between nodes is always staged.
    Off,
}

impl Want {
    /// `GMPI_IB_GPUDIRECT` (unset: [`Want::Auto`]).
    pub fn from_env() -> Result<Self, String> {
        match std::env::var("GMPI_IB_GPUDIRECT") {
            Ok(v) => Self::parse(&v),
            Err(_) => Ok(Want::Auto),
        }
    }

    /// Parse a value of `GMPI_IB_GPUDIRECT`.
    pub fn parse(v: &str) -> Result<Self, String> {
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" | "1" | "on" | "yes" => Ok(Want::Auto),
            "dmabuf" | "dma-buf" => Ok(Want::DmaBuf),
            "peermem" | "nvidia_peermem" => Ok(Want::PeerMem),
            "off" | "0" | "no" | "none" => Ok(Want::Off),
            _ => Err(format!(
                "GMPI_IB_GPUDIRECT={v:?}: expected auto, dmabuf, peermem or off"
            )),
        }
    }
}

/// What the start-up probes answered: each `Ok`, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probes {
    /// A GPU this rank uses (CUDA loaded, a device visible).
    pub gpu: Result<(), String>,
    /// The GPU exports dma-bufs.
    pub gpu_dmabuf: Result<(), String>,
    /// The NIC registers dma-bufs ([`crate::fabric::Fabric::probe_dmabuf`]).
    pub nic_dmabuf: Result<(), String>,
    /// `nvidia_peermem` is loaded ([`peermem`]).
    pub peermem: Result<(), String>,
}

impl Probes {
    /// The probes from the gpu layer's answers `gpu` (a device is there,
    /// its memory exports as dma-bufs), the NIC's `nic_dmabuf`
    /// ([`crate::fabric::Fabric::probe_dmabuf`]) and `nvidia_peermem`
    /// under the sysfs root `sys`.
    pub fn gather(
        gpu: (Result<(), String>, Result<(), String>),
        nic_dmabuf: Result<(), String>,
        sys: &Path,
    ) -> Self {
        Probes {
            gpu: gpu.0,
            gpu_dmabuf: gpu.1,
            nic_dmabuf,
            peermem: peermem(sys),
        }
    }
}

/// The choice, and why each path that was not taken was not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// How device memory is registered; `None`: it is staged.
    pub via: Option<DeviceReg>,
    /// Why the paths before the chosen one (or all, with `via` `None`)
    /// were not taken, one sentence each.
    pub why_not: Vec<String>,
}

impl Decision {
    /// One line for logs and the doctor.
    pub fn describe(&self) -> String {
        match (self.via, self.why_not.is_empty()) {
            (Some(v), true) => format!("by {}", v.name()),
            (Some(v), false) => format!("by {} ({})", v.name(), self.why_not.join("; ")),
            (None, _) => format!(
                "no, device data between nodes is staged through host memory ({})",
                self.why_not.join("; ")
            ),
        }
    }
}

/// Choose how the NIC registers GPU memory (see the module documentation
/// for the order).
pub fn decide(want: Want, p: &Probes) -> Decision {
    let mut why_not = Vec::new();
    if want == Want::Off {
        why_not.push("GMPI_IB_GPUDIRECT=off".to_string());
        return Decision { via: None, why_not };
    }
    if let Err(e) = &p.gpu {
        why_not.push(format!("no GPU: {e}"));
        return Decision { via: None, why_not };
    }
    if matches!(want, Want::Auto | Want::DmaBuf) {
        match (&p.gpu_dmabuf, &p.nic_dmabuf) {
            (Ok(()), Ok(())) => {
                return Decision {
                    via: Some(DeviceReg::DmaBuf),
                    why_not,
                }
            }
            (Err(g), _) => why_not.push(format!("dma-buf: the GPU does not export: {g}")),
            (Ok(()), Err(n)) => why_not.push(format!("dma-buf: the NIC does not register: {n}")),
        }
    } else {
        why_not.push("dma-buf: not allowed (GMPI_IB_GPUDIRECT)".to_string());
    }
    if matches!(want, Want::Auto | Want::PeerMem) {
        match &p.peermem {
            Ok(()) => {
                return Decision {
                    via: Some(DeviceReg::Address),
                    why_not,
                }
            }
            Err(e) => why_not.push(format!("nvidia_peermem: {e}")),
        }
    } else {
        why_not.push("nvidia_peermem: not allowed (GMPI_IB_GPUDIRECT)".to_string());
    }
    Decision { via: None, why_not }
}

/// Whether `nvidia_peermem` (or the older `nv_peer_mem`) is loaded, under
/// the sysfs root `sys` (`/sys`): `/sys/module/nvidia_peermem`, or a
/// `nv_mem*` entry in `/sys/kernel/mm/memory_peers/`.
pub fn peermem(sys: &Path) -> Result<(), String> {
    if sys.join("module/nvidia_peermem").exists() {
        return Ok(());
    }
    let peers = sys.join("kernel/mm/memory_peers");
    if let Ok(dir) = std::fs::read_dir(&peers) {
        for e in dir.flatten() {
            if e.file_name().to_string_lossy().starts_with("nv_mem") {
                return Ok(());
            }
        }
    }
    Err(format!(
        "not loaded (no {}/module/nvidia_peermem nor {}/nv_mem*)",
        sys.display(),
        peers.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_ok() -> Probes {
        Probes {
            gpu: Ok(()),
            gpu_dmabuf: Ok(()),
            nic_dmabuf: Ok(()),
            peermem: Ok(()),
        }
    }

    #[test]
    fn dma_buf_first_then_peermem_then_staging() {
        let mut p = all_ok();
        let d = decide(Want::Auto, &p);
        assert_eq!(d.via, Some(DeviceReg::DmaBuf));
        assert!(d.why_not.is_empty());
        assert_eq!(d.describe(), "by dma-buf");

        p.nic_dmabuf = Err("ibv_reg_dmabuf_mr: Operation not supported".into());
        let d = decide(Want::Auto, &p);
        assert_eq!(d.via, Some(DeviceReg::Address));
        assert_eq!(d.why_not.len(), 1);
        assert!(d.why_not[0].contains("the NIC does not register"), "{d:?}");
        assert!(
            d.describe().starts_with("by nvidia_peermem ("),
            "{}",
            d.describe()
        );

        p.nic_dmabuf = Ok(());
        p.gpu_dmabuf = Err("CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0".into());
        let d = decide(Want::Auto, &p);
        assert_eq!(d.via, Some(DeviceReg::Address));
        assert!(d.why_not[0].contains("the GPU does not export"), "{d:?}");

        p.peermem = Err("not loaded".into());
        let d = decide(Want::Auto, &p);
        assert_eq!(d.via, None);
        assert_eq!(d.why_not.len(), 2, "{d:?}");
        assert!(
            d.describe().starts_with("no, device data"),
            "{}",
            d.describe()
        );
        assert!(d.describe().contains("nvidia_peermem: not loaded"));
    }

    #[test]
    fn no_gpu_or_off_means_staging_whatever_the_nic_can() {
        let mut p = all_ok();
        p.gpu = Err("CUDA not loaded".into());
        let d = decide(Want::Auto, &p);
        assert_eq!(d.via, None);
        assert_eq!(d.why_not, vec!["no GPU: CUDA not loaded".to_string()]);
        let d = decide(Want::Off, &all_ok());
        assert_eq!(d.via, None);
        assert_eq!(d.why_not, vec!["GMPI_IB_GPUDIRECT=off".to_string()]);
    }

    #[test]
    fn the_setting_narrows_the_choice() {
        let p = all_ok();
        assert_eq!(decide(Want::DmaBuf, &p).via, Some(DeviceReg::DmaBuf));
        let d = decide(Want::PeerMem, &p);
        assert_eq!(d.via, Some(DeviceReg::Address));
        assert!(d.why_not[0].contains("not allowed"));
        let mut q = all_ok();
        q.nic_dmabuf = Err("EOPNOTSUPP".into());
        let d = decide(Want::DmaBuf, &q);
        assert_eq!(d.via, None, "peermem is not allowed");
        assert_eq!(d.why_not.len(), 2);
    }

    #[test]
    fn want_parses_every_spelling_and_refuses_others() {
        assert_eq!(Want::parse("auto"), Ok(Want::Auto));
        assert_eq!(Want::parse(" DMABUF "), Ok(Want::DmaBuf));
        assert_eq!(Want::parse("dma-buf"), Ok(Want::DmaBuf));
        assert_eq!(Want::parse("nvidia_peermem"), Ok(Want::PeerMem));
        assert_eq!(Want::parse("off"), Ok(Want::Off));
        assert_eq!(Want::parse("0"), Ok(Want::Off));
        let e = Want::parse("rdma").unwrap_err();
        assert!(
            e.contains("GMPI_IB_GPUDIRECT") && e.contains("expected"),
            "{e}"
        );
    }

    #[test]
    fn peermem_is_found_in_sysfs_by_module_or_memory_peer() {
        let root = std::env::temp_dir().join(format!("gmpi-peermem-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("module/ib_core")).unwrap();
        let e = peermem(&root).unwrap_err();
        assert!(e.starts_with("not loaded"), "{e}");
        std::fs::create_dir_all(root.join("kernel/mm/memory_peers/nv_mem")).unwrap();
        assert_eq!(peermem(&root), Ok(()));
        std::fs::remove_dir_all(root.join("kernel")).unwrap();
        std::fs::create_dir_all(root.join("module/nvidia_peermem")).unwrap();
        assert_eq!(peermem(&root), Ok(()));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
