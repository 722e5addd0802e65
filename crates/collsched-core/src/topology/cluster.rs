//! The two-tier cluster model: `servers × gpus_per_server` GPUs, a scale-up
//! fabric inside each server, NICs between servers. Rank order is server-major.
use crate::error::Result;
use crate::invalid;
use crate::topology::hardware::HardwareTerms;
use crate::units::{parse_bandwidth, parse_bytes, parse_duration_ns};
use serde::{Deserialize, Serialize};

/// Scale-up fabric inside a server. Bandwidths are bytes/s per direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScaleUp {
    /// NVSwitch-style: every GPU has one port of `port_bw` into a non-blocking switch.
    Switch { port_bw: u64 },
    /// xGMI-style full mesh: a dedicated link of `link_bw` between every GPU pair.
    FullMesh { link_bw: u64 },
    /// Bidirectional ring: GPU i links to i±1 (mod G), `link_bw` each way.
    Ring { link_bw: u64 },
    /// DGX-1 hybrid cube-mesh: GPUs {0..3} and {4..7} are each fully meshed and GPU i links to i^4.
    HybridCubeMesh { link_bw: u64 },
}

/// Which fabric a transfer uses. Derived from the endpoints: same rank → local,
/// same server → scale-up, else scale-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Tier {
    Local = 0,
    ScaleUp = 1,
    ScaleOut = 2,
}

impl Tier {
    pub fn from_u8(v: u8) -> Option<Tier> {
        match v {
            0 => Some(Tier::Local),
            1 => Some(Tier::ScaleUp),
            2 => Some(Tier::ScaleOut),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Tier::Local => "local",
            Tier::ScaleUp => "scale_up",
            Tier::ScaleOut => "scale_out",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// Preset name this cluster came from ("custom" otherwise); informational only.
    pub name: String,
    pub servers: u32,
    pub gpus_per_server: u32,
    pub scaleup: ScaleUp,
    /// NICs per server; local GPU `g` uses NIC `g % nics_per_server`.
    pub nics_per_server: u32,
    /// Bytes/s per NIC per direction.
    pub nic_bw: u64,
    /// Per-transfer start-up latency of each tier, nanoseconds.
    pub alpha_local_ns: u64,
    pub alpha_scaleup_ns: u64,
    pub alpha_scaleout_ns: u64,
    /// Device-memory copy bandwidth for local copies (bytes/s).
    pub local_copy_bw: u64,
    /// The hardware model's terms (efficiency, chunking, per-stage and per-peer costs,
    /// incast); neutral unless the preset has fitted constants or a spec key sets them.
    #[serde(default)]
    pub hw: HardwareTerms,
}

/// The keys accepted in a spec's `key=value` overrides, with what they mean.
pub const SPEC_KEYS: &[(&str, &str)] = &[
    ("gpus", "GPUs per server"),
    ("fabric", "scale-up fabric: switch, mesh, ring, cubemesh"),
    ("scaleup", "scale-up bandwidth (per GPU port for switch, per link otherwise), e.g. 450GB/s"),
    ("nics", "NICs per server"),
    ("nic", "bandwidth per NIC, e.g. 400Gbps"),
    ("alpha_local", "per-transfer latency of local copies, e.g. 1us"),
    ("alpha_scaleup", "per-transfer latency on scale-up, e.g. 2us"),
    ("alpha_scaleout", "per-transfer latency on scale-out, e.g. 5us"),
    ("copy", "local device-memory copy bandwidth, e.g. 2000GB/s"),
    ("eff_scaleup", "hardware model: fraction of the scale-up peak the backend reaches, in (0, 1], e.g. 0.8"),
    ("eff_scaleout", "hardware model: fraction of the NIC peak the backend reaches, in (0, 1], e.g. 0.91"),
    ("chunk_scaleout", "hardware model: pipeline chunk of a scale-out message; its first min(bytes, chunk) delay its start (store-and-forward fill), e.g. 2MiB"),
    ("chunk_scaleup", "hardware model: the same for scale-up messages, e.g. 512KiB"),
    ("step_cost", "hardware model: synchronisation per stage, paid by a transfer that waits on an earlier step, e.g. 20us"),
    ("peer_cost", "hardware model: start-up per additional peer the sender has in the same step, e.g. 1us"),
    ("incast_flows", "hardware model: a NIC downlink with more concurrent flows than this loses goodput (0: off)"),
    ("incast_goodput", "hardware model: fraction of the NIC rate delivered under incast, in (0, 1]"),
    ("rendezvous", "hardware model: 1 = a transfer also waits until its receiver finished its previous step (grouped send/recv in stream order); 0 = off"),
    ("incast_min", "hardware model: only flows of at least this size count towards incast_flows (buffered bursts do not), e.g. 1MiB"),
    ("coll_eff_scaleup", "hardware model: fraction of the scale-up peak the collective kernels (ring, tree, forest plans) reach, in (0, 1]; eff_scaleup stays point-to-point's"),
    ("coll_eff_scaleout", "hardware model: fraction of the NIC peak the collective kernels reach, in (0, 1]"),
    ("coll_step_cost", "hardware model: synchronisation per step of the collective kernels (replaces step_cost for ring, tree, forest plans), e.g. 3us"),
    ("ll_alpha_scaleup", "hardware model: per-hop latency of the low-latency protocol (NCCL LL) on scale-up, which a collective-kernel transfer uses when cheaper (0: none), e.g. 1us"),
    ("ll_alpha_scaleout", "hardware model: the same on scale-out, e.g. 3us"),
    ("ll_payload", "hardware model: fraction of the low-latency protocol's wire bytes that carry data, in (0, 1] (LL: 0.5)"),
    ("ll_bw", "hardware model: data rate one low-latency-protocol transfer reaches at most (0: no cap), e.g. 2GB/s"),
];

impl Cluster {
    pub fn num_gpus(&self) -> u32 {
        self.servers * self.gpus_per_server
    }
    pub fn server_of(&self, rank: u32) -> u32 {
        rank / self.gpus_per_server
    }
    pub fn local_index(&self, rank: u32) -> u32 {
        rank % self.gpus_per_server
    }
    pub fn rank(&self, server: u32, local: u32) -> u32 {
        server * self.gpus_per_server + local
    }
    /// NIC index within its server used by `rank`.
    pub fn nic_of(&self, rank: u32) -> u32 {
        self.local_index(rank) % self.nics_per_server
    }
    /// Global NIC id (server-major) used by `rank`.
    pub fn global_nic_of(&self, rank: u32) -> u32 {
        self.server_of(rank) * self.nics_per_server + self.nic_of(rank)
    }
    pub fn tier(&self, src: u32, dst: u32) -> Tier {
        if src == dst {
            Tier::Local
        } else if self.server_of(src) == self.server_of(dst) {
            Tier::ScaleUp
        } else {
            Tier::ScaleOut
        }
    }
    pub fn alpha_ns(&self, tier: Tier) -> u64 {
        match tier {
            Tier::Local => self.alpha_local_ns,
            Tier::ScaleUp => self.alpha_scaleup_ns,
            Tier::ScaleOut => self.alpha_scaleout_ns,
        }
    }
    /// Aggregate scale-out bandwidth of one server (bytes/s per direction).
    pub fn server_nic_bw(&self) -> u64 {
        self.nic_bw * self.nics_per_server as u64
    }
    /// Whether local GPUs `a` and `b` (indices within a server) share a direct scale-up link.
    pub fn scaleup_adjacent(&self, a: u32, b: u32) -> bool {
        if a == b {
            return false;
        }
        let g = self.gpus_per_server;
        match self.scaleup {
            ScaleUp::Switch { .. } | ScaleUp::FullMesh { .. } => true,
            ScaleUp::Ring { .. } => (a + 1) % g == b || (b + 1) % g == a,
            ScaleUp::HybridCubeMesh { .. } => (a / 4 == b / 4) || (a ^ 4) == b,
        }
    }
    /// Total scale-up bandwidth out of (or into) one GPU, bytes/s.
    pub fn gpu_scaleup_bw(&self) -> u64 {
        let g = self.gpus_per_server as u64;
        match self.scaleup {
            ScaleUp::Switch { port_bw } => port_bw,
            ScaleUp::FullMesh { link_bw } => link_bw * g.saturating_sub(1),
            ScaleUp::Ring { link_bw } => link_bw * g.saturating_sub(1).min(2),
            ScaleUp::HybridCubeMesh { link_bw } => {
                link_bw * (0..self.gpus_per_server).filter(|&b| self.scaleup_adjacent(0, b)).count() as u64
            }
        }
    }
    pub fn fabric_name(&self) -> &'static str {
        match self.scaleup {
            ScaleUp::Switch { .. } => "switch",
            ScaleUp::FullMesh { .. } => "mesh",
            ScaleUp::Ring { .. } => "ring",
            ScaleUp::HybridCubeMesh { .. } => "cubemesh",
        }
    }
    /// Bandwidth of one scale-up link (a switch port, a mesh, ring or cube-mesh link), bytes/s.
    pub fn scaleup_bw(&self) -> u64 {
        match self.scaleup {
            ScaleUp::Switch { port_bw } => port_bw,
            ScaleUp::FullMesh { link_bw } | ScaleUp::Ring { link_bw } | ScaleUp::HybridCubeMesh { link_bw } => link_bw,
        }
    }

    /// Check every invariant; every constructor path ends here.
    pub fn validate(&self) -> Result<()> {
        if self.servers == 0 {
            return invalid!("cluster needs at least one server");
        }
        if self.gpus_per_server == 0 {
            return invalid!("cluster needs at least one GPU per server");
        }
        if (self.servers as u64) * (self.gpus_per_server as u64) > 1 << 20 {
            return invalid!("cluster of {} × {} GPUs is too large (at most 2^20 GPUs)", self.servers, self.gpus_per_server);
        }
        if self.nics_per_server == 0 {
            return invalid!("cluster needs at least one NIC per server");
        }
        if self.nics_per_server > self.gpus_per_server {
            return invalid!(
                "{} NICs per server but only {} GPUs: every NIC must be attached to a GPU",
                self.nics_per_server,
                self.gpus_per_server
            );
        }
        if self.nic_bw == 0 {
            return invalid!("NIC bandwidth must be positive");
        }
        if self.scaleup_bw() == 0 {
            return invalid!("scale-up bandwidth must be positive");
        }
        if self.local_copy_bw == 0 {
            return invalid!("local copy bandwidth must be positive");
        }
        if matches!(self.scaleup, ScaleUp::HybridCubeMesh { .. }) && self.gpus_per_server != 8 {
            return invalid!("the hybrid cube-mesh fabric needs exactly 8 GPUs per server, got {}", self.gpus_per_server);
        }
        Ok(())
    }

    /// Parse `NAME:SERVERS[,key=value...]`, e.g. `h200:4` or `mi300x:3,nic=100Gbps`.
    pub fn parse(spec: &str) -> Result<Cluster> {
        let spec = spec.trim();
        let mut parts = spec.split(',');
        let head = parts.next().unwrap_or("");
        let (name, servers) = match head.split_once(':') {
            Some((n, s)) => (n.trim(), s.trim()),
            None => return invalid!("cluster spec '{spec}' must look like NAME:SERVERS[,key=value...], e.g. h200:4"),
        };
        let servers: u32 = match servers.parse() {
            Ok(v) if v > 0 => v,
            _ if !servers.is_empty() && servers.bytes().all(|b| b.is_ascii_digit()) && servers.trim_start_matches('0') != "" => {
                return invalid!("cluster spec '{spec}': server count {servers} is too large (at most {})", u32::MAX)
            }
            _ => return invalid!("cluster spec '{spec}': server count '{servers}' must be a positive integer"),
        };
        let mut c = crate::topology::presets::preset(name, servers)?;
        let mut seen: Vec<&str> = Vec::new();
        for kv in parts {
            let (k, v) = match kv.split_once('=') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => return invalid!("cluster spec '{spec}': override '{kv}' must be key=value"),
            };
            // A repeated key is a typo more often than an intended override; silently keeping the last hides it.
            if seen.contains(&k) {
                return invalid!("cluster spec '{spec}': key '{k}' is given twice (each key at most once)");
            }
            seen.push(k);
            c.set(k, v)?;
        }
        c.validate()?;
        Ok(c)
    }

    /// Override one field by its spec key. Every error names the field and what it expects.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let expects = match key {
            "nic" | "copy" | "scaleup" => " (expected a bandwidth such as 400Gbps or 50GB/s)",
            "alpha_local" | "alpha_scaleup" | "alpha_scaleout" | "step_cost" | "peer_cost" => " (expected a duration such as 6us or 500ns)",
            "chunk_scaleout" | "chunk_scaleup" | "incast_min" => " (expected a size such as 2MiB)",
            _ => "",
        };
        self.set_field(key, value).map_err(|e| match e {
            crate::error::Error::InvalidInput(m) if !m.starts_with("unknown cluster field") && !m.contains("cluster field") => {
                crate::error::Error::InvalidInput(format!("cluster field '{key}': {m}{expects}"))
            }
            other => other,
        })
    }

    fn set_field(&mut self, key: &str, value: &str) -> Result<()> {
        let count = |v: &str| -> Result<u32> {
            match v.parse::<u32>() {
                Ok(x) if x > 0 => Ok(x),
                _ if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && v.trim_start_matches('0') != "" => {
                    invalid!("cluster field '{key}' is too large: {v} (at most {})", u32::MAX)
                }
                _ => invalid!("cluster field '{key}' must be a positive integer, got '{v}'"),
            }
        };
        match key {
            "gpus" => self.gpus_per_server = count(value)?,
            "nics" => self.nics_per_server = count(value)?,
            "servers" => self.servers = count(value)?,
            "nic" => self.nic_bw = parse_bandwidth(value)?,
            "copy" => self.local_copy_bw = parse_bandwidth(value)?,
            "alpha_local" => self.alpha_local_ns = parse_duration_ns(value)?,
            "alpha_scaleup" => self.alpha_scaleup_ns = parse_duration_ns(value)?,
            "alpha_scaleout" => self.alpha_scaleout_ns = parse_duration_ns(value)?,
            "scaleup" => {
                let bw = parse_bandwidth(value)?;
                self.scaleup = match self.scaleup {
                    ScaleUp::Switch { .. } => ScaleUp::Switch { port_bw: bw },
                    ScaleUp::FullMesh { .. } => ScaleUp::FullMesh { link_bw: bw },
                    ScaleUp::Ring { .. } => ScaleUp::Ring { link_bw: bw },
                    ScaleUp::HybridCubeMesh { .. } => ScaleUp::HybridCubeMesh { link_bw: bw },
                };
            }
            "fabric" => {
                let bw = self.scaleup_bw();
                self.scaleup = match value {
                    "switch" | "nvswitch" => ScaleUp::Switch { port_bw: bw },
                    "mesh" | "full_mesh" | "fullmesh" => ScaleUp::FullMesh { link_bw: bw },
                    "ring" => ScaleUp::Ring { link_bw: bw },
                    "cubemesh" | "hybrid_cube_mesh" => ScaleUp::HybridCubeMesh { link_bw: bw },
                    _ => return invalid!("unknown fabric '{value}' (use switch, mesh, ring, cubemesh)"),
                };
            }
            _ if self.hw.set(key, value)? => {}
            _ => {
                let keys: Vec<&str> = SPEC_KEYS.iter().map(|(k, _)| *k).collect();
                return invalid!("unknown cluster field '{key}' (known: {})", keys.join(", "));
            }
        }
        if key == "gpus" && self.nics_per_server > self.gpus_per_server {
            // Shrinking a preset's GPU count keeps one NIC per GPU unless `nics` says otherwise.
            self.nics_per_server = self.gpus_per_server;
        }
        Ok(())
    }

    /// A spec string that parses back to this cluster (hardware terms only where not neutral).
    pub fn spec(&self) -> String {
        let mut s = format!(
            "custom:{},gpus={},fabric={},scaleup={}B/s,nics={},nic={}B/s,alpha_local={}ns,alpha_scaleup={}ns,alpha_scaleout={}ns,copy={}B/s",
            self.servers,
            self.gpus_per_server,
            self.fabric_name(),
            self.scaleup_bw(),
            self.nics_per_server,
            self.nic_bw,
            self.alpha_local_ns,
            self.alpha_scaleup_ns,
            self.alpha_scaleout_ns,
            self.local_copy_bw
        );
        for (k, v) in self.hw.spec_pairs() {
            s.push_str(&format!(",{k}={v}"));
        }
        s
    }
}

/// Parse a byte size, re-exported here for callers that only import topology.
pub fn parse_size(s: &str) -> Result<u64> {
    parse_bytes(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn errors_name_the_field_and_the_limit() {
        let e = Cluster::parse("h200:10000000000000000000000").unwrap_err().to_string();
        assert!(e.contains("server count") && e.contains("too large") && e.contains("4294967295"), "{e}");
        assert!(Cluster::parse("h200:x").unwrap_err().to_string().contains("must be a positive integer"));
        let e = Cluster::parse("h200:1,nic=abc").unwrap_err().to_string();
        assert!(e.starts_with("cluster field 'nic': ") && e.contains("bandwidth such as"), "{e}");
        let e = Cluster::parse("h200:1,alpha_local=soon").unwrap_err().to_string();
        assert!(e.starts_with("cluster field 'alpha_local': ") && e.contains("duration"), "{e}");
        let e = Cluster::parse("h200:1,gpus=99999999999").unwrap_err().to_string();
        assert_eq!(e.matches("cluster field").count(), 1, "{e}");
        assert!(e.contains("too large"), "{e}");
    }
    #[test]
    fn parse_presets_and_overrides() {
        let c = Cluster::parse("h200:4").unwrap();
        assert_eq!(c.num_gpus(), 32);
        assert_eq!(c.nic_bw, 50_000_000_000);
        let m = Cluster::parse("mi300x:3,nic=100Gbps").unwrap();
        assert_eq!(m.nic_bw, 12_500_000_000);
        assert_eq!(m.gpu_scaleup_bw(), 7 * 64_000_000_000);
        let s = Cluster::parse("h100:2,nics=2").unwrap();
        assert_eq!(s.nic_of(5), 1);
        assert_eq!(s.global_nic_of(13), 3);
        assert!(Cluster::parse("nope:2").unwrap_err().to_string().contains("unknown cluster preset"));
        assert!(Cluster::parse("h200:0").is_err());
        assert!(Cluster::parse("h200").is_err());
        assert!(Cluster::parse("h200:2,nic=0Gbps").is_err());
        assert!(Cluster::parse("h200:2,warp=9").unwrap_err().to_string().contains("unknown cluster field"));
        assert!(Cluster::parse("h200:2,nics=9").is_err());
        assert!(Cluster::parse("h200:2,nics=3").is_ok()); // uneven sharing: NIC g % 3
        assert!(Cluster::parse("h200:2,gpus=2,nics=4").unwrap_err().to_string().contains("NICs per server"));
    }
    #[test]
    fn duplicate_keys_are_refused() {
        let e = Cluster::parse("h200:2,nic=100Gbps,nic=400Gbps").unwrap_err().to_string();
        assert!(e.contains("key 'nic' is given twice"), "{e}");
        let e = Cluster::parse("h200:2,gpus=4, gpus =4").unwrap_err().to_string();
        assert!(e.contains("key 'gpus' is given twice"), "{e}");
        assert!(Cluster::parse("h200:2,nic=100Gbps,nics=2").is_ok());
    }
    #[test]
    fn spec_round_trips() {
        for p in crate::topology::presets::PRESETS {
            let c = Cluster::parse(&format!("{}:3", p.0)).unwrap();
            let back = Cluster::parse(&c.spec()).unwrap();
            assert_eq!(Cluster { name: c.name.clone(), ..back }, c);
        }
    }
    #[test]
    fn cube_mesh_adjacency() {
        let c = Cluster::parse("v100:1").unwrap();
        assert!(c.scaleup_adjacent(0, 3) && c.scaleup_adjacent(0, 4) && !c.scaleup_adjacent(0, 5));
        assert_eq!(c.gpu_scaleup_bw(), 4 * 25_000_000_000);
    }
}
