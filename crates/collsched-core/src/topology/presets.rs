//! Named cluster presets. Each cites where its numbers come from.
//! Latencies (alpha) are per-transfer start-up costs typical of NCCL/RCCL point-to-point
//! on the named fabric (a few µs); they are estimates, override them with `alpha_*=`.
use super::cluster::{Cluster, ScaleUp};
use crate::error::Result;
use crate::invalid;

const GBS: u64 = 1_000_000_000; // 1 GB/s in bytes/s
const GBPS: u64 = 125_000_000; // 1 Gb/s in bytes/s

/// (name, description with source). `preset()` builds them.
pub const PRESETS: &[(&str, &str)] = &[
    ("h200", "8× H200, NVSwitch 450 GB/s per GPU, 8× 400 Gb/s NICs (FAST NSDI'26 NVIDIA testbed, §5.1)"),
    ("h100", "8× H100, NVSwitch 450 GB/s per GPU, 8× 400 Gb/s NICs (DGX H100 datasheet; FAST §5.1)"),
    ("h800", "8× H800 SXM, NVSwitch 200 GB/s per GPU (NVLink 400 GB/s bidirectional), 8× 400 Gb/s ConnectX-7 NICs (DeepEP docs/legacy.md; DeepSeek-V3 report §3.1)"),
    ("b200", "8× B200, NVLink5 switch 900 GB/s per GPU, 8× 400 Gb/s ConnectX-7 NICs (DGX B200 datasheet)"),
    ("a100", "8× A100, NVSwitch 300 GB/s per GPU, 8× 200 Gb/s NICs (DGX A100 datasheet)"),
    ("mi300x", "8× MI300X, xGMI full mesh 7 links × 64 GB/s, 8× 100 Gb/s RoCE NICs (FAST/FLASH AMD testbed; override nic=400Gbps for production)"),
    ("perlmutter", "4× A100 per node, NVLink3 100 GB/s per GPU pair (full mesh), 4× 25 GB/s Slingshot NICs (SABRE ICS'26 testbed, §7)"),
    ("mi250", "8 MI250X GCDs per node on an Infinity Fabric ring of 50 GB/s links, 4 shared 25 GB/s Slingshot NICs (Frontier node)"),
    ("v100", "8× V100 DGX-1, NVLink2 hybrid cube-mesh 25 GB/s per link, 4 shared 100 Gb/s EDR NICs (DGX-1 datasheet)"),
    ("custom", "start from 8 GPUs on a 450 GB/s switch and 400 Gb/s NICs; set every field with key=value"),
];

fn base(name: &str, servers: u32, gpus: u32, scaleup: ScaleUp, nics: u32, nic_bw: u64) -> Cluster {
    Cluster {
        name: name.to_string(),
        servers,
        gpus_per_server: gpus,
        scaleup,
        nics_per_server: nics,
        nic_bw,
        alpha_local_ns: 2_000,
        alpha_scaleup_ns: 3_000,
        alpha_scaleout_ns: 6_000,
        local_copy_bw: 1_500 * GBS,
        hw: Default::default(),
    }
}

/// Preset `name` with `servers` servers, with its fitted hardware-model constants
/// (`hardware.json`) applied; `custom` and presets without fitted constants keep neutral terms.
pub fn preset(name: &str, servers: u32) -> Result<Cluster> {
    let mut c = peak(name, servers)?;
    if let Some(f) = super::hardware::fitted_for(name) {
        for (k, v) in &f.constants {
            c.set(k, v)?;
        }
    }
    Ok(c)
}

/// Preset `name` at its links' peaks, before any fitted constant.
pub fn peak(name: &str, servers: u32) -> Result<Cluster> {
    let c = match name.to_ascii_lowercase().as_str() {
        "h200" | "h100" | "custom" => base(name, servers, 8, ScaleUp::Switch { port_bw: 450 * GBS }, 8, 400 * GBPS),
        // H800: the H100's silicon with NVLink cut to 400 GB/s bidirectional, 200 GB/s per direction.
        "h800" => base(name, servers, 8, ScaleUp::Switch { port_bw: 200 * GBS }, 8, 400 * GBPS),
        "b200" => Cluster { local_copy_bw: 3_000 * GBS, ..base(name, servers, 8, ScaleUp::Switch { port_bw: 900 * GBS }, 8, 400 * GBPS) },
        "a100" => base(name, servers, 8, ScaleUp::Switch { port_bw: 300 * GBS }, 8, 200 * GBPS),
        "mi300x" => base(name, servers, 8, ScaleUp::FullMesh { link_bw: 64 * GBS }, 8, 100 * GBPS),
        "perlmutter" => base(name, servers, 4, ScaleUp::FullMesh { link_bw: 100 * GBS }, 4, 25 * GBS),
        "mi250" => base(name, servers, 8, ScaleUp::Ring { link_bw: 50 * GBS }, 4, 25 * GBS),
        "v100" => Cluster { local_copy_bw: 800 * GBS, ..base(name, servers, 8, ScaleUp::HybridCubeMesh { link_bw: 25 * GBS }, 4, 100 * GBPS) },
        _ => {
            let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
            return invalid!("unknown cluster preset '{name}' (known: {})", names.join(", "));
        }
    };
    Ok(c)
}
