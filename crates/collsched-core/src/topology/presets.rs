//! Named cluster presets. Each cites where its numbers come from.
//! Latencies (alpha) are per-transfer start-up costs typical of NCCL/RCCL point-to-point
//! on the named fabric (a few µs); they are estimates, override them with `alpha_*=`.
use super::cluster::{Cluster, ScaleUp};
use crate::error::Result;
use crate::invalid;

const GBS: u64 = 1_000_000_000; // 1 GB/s in bytes/s
const GBPS: u64 = 125_000_000; // 1 Gb/s in bytes/s
/// GPUs of one NVL72 rack (18 compute trays × 4 GPUs), all in one NVLink domain.
const NVL72_GPUS: u32 = 72;

/// (name, description with source). `preset()` builds them.
pub const PRESETS: &[(&str, &str)] = &[
    ("h200", "8× H200, NVSwitch 450 GB/s per GPU, 8× 400 Gb/s NICs (FAST NSDI'26 NVIDIA testbed, §5.1)"),
    ("h100", "8× H100, NVSwitch 450 GB/s per GPU, 8× 400 Gb/s NICs (DGX H100 datasheet; FAST §5.1)"),
    ("h800", "8× H800 SXM, NVSwitch 200 GB/s per GPU (NVLink 400 GB/s bidirectional), 8× 400 Gb/s ConnectX-7 NICs (DeepEP docs/legacy.md; DeepSeek-V3 report §3.1)"),
    ("b200", "8× B200, NVLink5 switch 900 GB/s per GPU, 8× 400 Gb/s ConnectX-7 NICs (DGX B200 datasheet)"),
    ("b300", "8× B300, NVLink5 switch 900 GB/s per GPU (1.8 TB/s bidirectional), 8× 800 Gb/s NICs (DGX B300 datasheet: ConnectX-8; OCI BM.GPU.B300.8: 8 × 2 × 400 Gb/s RoCE)"),
    ("gb200", "one GB200 NVL72 rack = one server: 72 GPUs (18 trays × 4) on one NVLink5 domain, 900 GB/s per GPU, 72× 400 Gb/s NICs (NVIDIA GB200 NVL72: 130 TB/s NVLink; OCI BM.GPU.GB200.4: 4 × 400 Gb/s InfiniBand per tray; -v3 shape: nic=800Gbps)"),
    ("gb300", "one GB300 NVL72 rack = one server: 72 GPUs (18 trays × 4) on one NVLink5 domain, 900 GB/s per GPU, 72× 800 Gb/s NICs (NVIDIA GB300 NVL72: 130 TB/s NVLink; OCI BM.GPU.GB300.4: 8 × 400 Gb/s RoCE per tray)"),
    ("a100", "8× A100, NVSwitch 300 GB/s per GPU, 8× 200 Gb/s NICs (DGX A100 datasheet)"),
    ("mi300x", "8× MI300X, xGMI full mesh 7 links × 64 GB/s, 8× 100 Gb/s RoCE NICs (FAST/FLASH AMD testbed; override nic=400Gbps for production)"),
    ("mi355x", "8× MI355X, xGMI full mesh 7 links × 76.8 GB/s (153.6 GB/s bidirectional), 8× 400 Gb/s NICs (AMD Instinct MI355X datasheet; OCI BM.GPU.MI355X: Pollara 400 or ConnectX-7)"),
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
        "b300" => Cluster { local_copy_bw: 3_000 * GBS, ..base(name, servers, 8, ScaleUp::Switch { port_bw: 900 * GBS }, 8, 800 * GBPS) },
        // A rack's NVLink domain is one two-tier "server": every GPU of the rack reaches every
        // other through the NVLink switch trays at its port rate, whichever tray it sits in.
        "gb200" => Cluster { local_copy_bw: 3_000 * GBS, ..base(name, servers, NVL72_GPUS, ScaleUp::Switch { port_bw: 900 * GBS }, NVL72_GPUS, 400 * GBPS) },
        "gb300" => Cluster { local_copy_bw: 3_000 * GBS, ..base(name, servers, NVL72_GPUS, ScaleUp::Switch { port_bw: 900 * GBS }, NVL72_GPUS, 800 * GBPS) },
        "mi300x" => base(name, servers, 8, ScaleUp::FullMesh { link_bw: 64 * GBS }, 8, 100 * GBPS),
        // 153.6 GB/s per xGMI link is both directions together.
        "mi355x" => Cluster { local_copy_bw: 3_000 * GBS, ..base(name, servers, 8, ScaleUp::FullMesh { link_bw: 76_800_000_000 }, 8, 400 * GBPS) },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Cluster;

    /// The validation platforms' presets: their shape, and a description citing its sources.
    #[test]
    fn validation_platform_presets_state_their_hardware() {
        // (name, GPUs per server, fabric, scale-up per GPU, NICs, per NIC, words the description must cite)
        let cases: &[(&str, u32, &str, u64, u32, u64, &[&str])] = &[
            ("b300", 8, "switch", 900 * GBS, 8, 800 * GBPS, &["DGX B300 datasheet", "OCI BM.GPU.B300.8"]),
            ("gb200", 72, "switch", 900 * GBS, 72, 400 * GBPS, &["GB200 NVL72", "OCI BM.GPU.GB200.4"]),
            ("gb300", 72, "switch", 900 * GBS, 72, 800 * GBPS, &["GB300 NVL72", "OCI BM.GPU.GB300.4"]),
            ("mi355x", 8, "mesh", 7 * 76_800_000_000, 8, 400 * GBPS, &["MI355X datasheet", "OCI BM.GPU.MI355X"]),
        ];
        for &(name, gpus, fabric, up, nics, nic, cites) in cases {
            let c = Cluster::parse(&format!("{name}:2")).unwrap();
            assert_eq!((c.num_gpus(), c.gpus_per_server, c.fabric_name()), (2 * gpus, gpus, fabric), "{name}");
            assert_eq!((c.gpu_scaleup_bw(), c.nics_per_server, c.nic_bw), (up, nics, nic), "{name}");
            let description = PRESETS.iter().find(|p| p.0 == name).expect("listed").1;
            for cite in cites {
                assert!(description.contains(cite), "{name}: description does not cite '{cite}'");
            }
        }
        // Part of a rack (the OCI logs' 1, 2 and 16 trays): GPUs shrink, one NIC per GPU stays.
        let tray = Cluster::parse("gb300:1,gpus=4").unwrap();
        assert_eq!((tray.num_gpus(), tray.nics_per_server, tray.gpu_scaleup_bw()), (4, 4, 900 * GBS));
        assert!(Cluster::parse("gb200:2,gpus=64").unwrap().tier(0, 63) == crate::topology::Tier::ScaleUp);
    }
}
