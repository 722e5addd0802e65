//! The links of the cluster model and how a transfer is routed over them.
//!
//! Link ids are dense: per-GPU copy engines, then the scale-up links of every
//! server, then NIC uplinks, then NIC downlinks. Capacities are bytes/s.
use crate::topology::{Cluster, ScaleUp, Tier};

/// Link classes reported separately in the utilisation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LinkClass {
    Local = 0,
    ScaleUp = 1,
    NicUp = 2,
    NicDown = 3,
    /// The optional shared core link (`SimOptions::core_bw`); not in `ALL`, so reports are unchanged.
    Core = 4,
    /// A low-latency-protocol transfer's own rate cap (`HardwareTerms::ll_bw`): a private
    /// link only its flows cross; not in `ALL` (not a physical link).
    Protocol = 5,
}

impl LinkClass {
    pub const ALL: [LinkClass; 4] = [LinkClass::NicUp, LinkClass::NicDown, LinkClass::ScaleUp, LinkClass::Local];
    pub fn name(self) -> &'static str {
        match self {
            LinkClass::Local => "local",
            LinkClass::ScaleUp => "scaleup",
            LinkClass::NicUp => "nic_up",
            LinkClass::NicDown => "nic_down",
            LinkClass::Core => "core",
            LinkClass::Protocol => "protocol",
        }
    }
}

/// One route of a transfer: the links it crosses and the share of its bytes
/// (1.0, or 0.5 for each half of an antipodal ring transfer).
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub links: Vec<u32>,
    pub share: f64,
}

pub struct Links {
    cluster: Cluster,
    pub capacity: Vec<f64>,
    pub class: Vec<LinkClass>,
    scaleup_base: u32,
    scaleup_per_server: u32,
    nic_up_base: u32,
    nic_down_base: u32,
    /// The shared core link's id, when `with_core` added one (the last link).
    core: Option<u32>,
    /// Cube-mesh / full-mesh: directed link index of local pair (a, b) within a server, or u32::MAX.
    pair_index: Vec<u32>,
}

/// `peak` bytes/s at efficiency `ppm` (parts per million); the peak itself at 1.0.
pub fn effective(peak: u64, ppm: u32) -> f64 {
    if ppm == crate::topology::hardware::PPM {
        peak as f64
    } else {
        peak as f64 * ppm as f64 / crate::topology::hardware::PPM as f64
    }
}

impl Links {
    pub fn new(cluster: &Cluster) -> Links {
        let g = cluster.gpus_per_server;
        let p = cluster.num_gpus();
        let mut pair_index = Vec::new();
        let (per_server, link_bw) = match cluster.scaleup {
            ScaleUp::Switch { port_bw } => (2 * g, port_bw), // egress port, ingress port
            ScaleUp::Ring { link_bw } => (if g <= 2 { g } else { 2 * g }, link_bw), // i→i+1, i→i-1
            ScaleUp::FullMesh { link_bw } | ScaleUp::HybridCubeMesh { link_bw } => {
                pair_index = vec![u32::MAX; (g * g) as usize];
                let mut next = 0;
                for a in 0..g {
                    for b in 0..g {
                        if cluster.scaleup_adjacent(a, b) {
                            pair_index[(a * g + b) as usize] = next;
                            next += 1;
                        }
                    }
                }
                (next, link_bw)
            }
        };
        let per_server = if g == 1 { 0 } else { per_server };
        let nics = cluster.servers * cluster.nics_per_server;
        let scaleup_base = p;
        let nic_up_base = scaleup_base + per_server * cluster.servers;
        let nic_down_base = nic_up_base + nics;
        let total = (nic_down_base + nics) as usize;
        let mut capacity = vec![0.0; total];
        let mut class = vec![LinkClass::Local; total];
        // The hardware model's efficiencies (1.0, exactly the peaks, when neutral).
        let (up, out) = (effective(link_bw, cluster.hw.eff_scaleup_ppm), effective(cluster.nic_bw, cluster.hw.eff_scaleout_ppm));
        for l in 0..total as u32 {
            let (c, bw) = if l < scaleup_base {
                (LinkClass::Local, cluster.local_copy_bw as f64)
            } else if l < nic_up_base {
                (LinkClass::ScaleUp, up)
            } else if l < nic_down_base {
                (LinkClass::NicUp, out)
            } else {
                (LinkClass::NicDown, out)
            };
            capacity[l as usize] = bw;
            class[l as usize] = c;
        }
        Links { cluster: cluster.clone(), capacity, class, scaleup_base, scaleup_per_server: per_server, nic_up_base, nic_down_base, core: None, pair_index }
    }

    /// Add one shared core link of `bw` bytes/s crossed by every scale-out route (None: none).
    pub fn with_core(mut self, bw: Option<f64>) -> Links {
        if let Some(bw) = bw {
            self.core = Some(self.capacity.len() as u32);
            self.capacity.push(bw);
            self.class.push(LinkClass::Core);
        }
        self
    }

    /// Add `n` private links of `bw` bytes/s (one per low-latency-protocol transfer, whose
    /// rate they cap); returns the first one's id.
    pub fn add_private(&mut self, n: usize, bw: f64) -> u32 {
        let base = self.capacity.len() as u32;
        self.capacity.extend(std::iter::repeat(bw).take(n));
        self.class.extend(std::iter::repeat(LinkClass::Protocol).take(n));
        base
    }

    pub fn len(&self) -> usize {
        self.capacity.len()
    }
    pub fn is_empty(&self) -> bool {
        self.capacity.is_empty()
    }

    fn su(&self, server: u32, idx: u32) -> u32 {
        self.scaleup_base + server * self.scaleup_per_server + idx
    }

    /// The routes of a transfer `src → dst` on `tier` (the caller checked the tier).
    pub fn route(&self, src: u32, dst: u32, tier: Tier) -> Vec<Route> {
        let c = &self.cluster;
        let one = |links: Vec<u32>| vec![Route { links, share: 1.0 }];
        match tier {
            Tier::Local => one(vec![src]),
            Tier::ScaleOut => {
                let mut links = vec![self.nic_up_base + c.global_nic_of(src), self.nic_down_base + c.global_nic_of(dst)];
                links.extend(self.core);
                one(links)
            }
            Tier::ScaleUp => {
                let s = c.server_of(src);
                let (a, b) = (c.local_index(src), c.local_index(dst));
                let g = c.gpus_per_server;
                match c.scaleup {
                    ScaleUp::Switch { .. } => one(vec![self.su(s, a), self.su(s, g + b)]),
                    ScaleUp::FullMesh { .. } => one(vec![self.su(s, self.pair_index[(a * g + b) as usize])]),
                    ScaleUp::HybridCubeMesh { .. } => {
                        if c.scaleup_adjacent(a, b) {
                            one(vec![self.su(s, self.pair_index[(a * g + b) as usize])])
                        } else {
                            // Two hops via the lowest-indexed common neighbour (deterministic).
                            let m = (0..g).find(|&m| c.scaleup_adjacent(a, m) && c.scaleup_adjacent(m, b)).expect("cube-mesh has diameter 2");
                            one(vec![self.su(s, self.pair_index[(a * g + m) as usize]), self.su(s, self.pair_index[(m * g + b) as usize])])
                        }
                    }
                    ScaleUp::Ring { .. } => {
                        let fwd = |from: u32, hops: u32| (0..hops).map(|h| self.su(s, (from + h) % g)).collect::<Vec<_>>();
                        let bwd = |from: u32, hops: u32| (0..hops).map(|h| self.su(s, g + (from + g - h) % g)).collect::<Vec<_>>();
                        if g <= 2 {
                            return one(fwd(a, 1));
                        }
                        let d = (b + g - a) % g;
                        if d < g - d {
                            one(fwd(a, d))
                        } else if d > g - d {
                            one(bwd(a, g - d))
                        } else {
                            // Antipodal: half each way, so both directions carry it.
                            vec![Route { links: fwd(a, d), share: 0.5 }, Route { links: bwd(a, d), share: 0.5 }]
                        }
                    }
                }
            }
        }
    }

    /// A readable name for a link, e.g. "nic_up server 3 nic 1".
    pub fn name(&self, l: u32) -> String {
        let c = &self.cluster;
        let g = c.gpus_per_server;
        if l < self.scaleup_base {
            return format!("local copy of GPU {l}");
        }
        if l < self.nic_up_base {
            let s = (l - self.scaleup_base) / self.scaleup_per_server;
            let i = (l - self.scaleup_base) % self.scaleup_per_server;
            let r = |x: u32| c.rank(s, x);
            return match c.scaleup {
                ScaleUp::Switch { .. } if i < g => format!("switch egress port of GPU {}", r(i)),
                ScaleUp::Switch { .. } => format!("switch ingress port of GPU {}", r(i - g)),
                ScaleUp::Ring { .. } if i < g => format!("ring link GPU {}→{}", r(i), r((i + 1) % g)),
                ScaleUp::Ring { .. } => format!("ring link GPU {}→{}", r(i - g), r((i - g + g - 1) % g)),
                _ => {
                    let k = self.pair_index.iter().position(|&x| x == i).unwrap_or(0) as u32;
                    format!("link GPU {}→{}", r(k / g), r(k % g))
                }
            };
        }
        if Some(l) == self.core {
            return "shared core link".to_string();
        }
        if self.class.get(l as usize) == Some(&LinkClass::Protocol) {
            return "low-latency protocol rate cap".to_string();
        }
        let nics = c.nics_per_server;
        if l < self.nic_down_base {
            let n = l - self.nic_up_base;
            return format!("NIC uplink of server {} NIC {}", n / nics, n % nics);
        }
        let n = l - self.nic_down_base;
        format!("NIC downlink of server {} NIC {}", n / nics, n % nics)
    }
}
