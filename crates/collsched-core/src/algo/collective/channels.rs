//! Ring orders for multi-channel rings, as NCCL and RCCL build them: one ring
//! per channel, each channel carrying an equal part of the data.
//!
//! - Several servers: channel k enters every server at a different GPU and
//!   leaves it from the GPU before it in the server's local cycle, so channels
//!   use different NIC uplinks and downlinks (one ring per NIC by default);
//!   consecutive ranks inside a server are scale-up neighbours.
//! - One full-mesh server (xGMI): the rings are arc-disjoint Hamiltonian cycles
//!   of the mesh, so G-1 rings load every link once (G = 4 and 6 have no such
//!   decomposition; there the coprime rotations i → i+d are used).
//! - Otherwise (one switch or ring-fabric server, no cluster): every channel is
//!   the rank ring 0 → 1 → … (one ring already loads every switch port).
//!
//! Channel 0 is always the rank ring 0 → 1 → … → P-1, so `channels = 1`
//! reproduces the single-ring plans.
use crate::topology::{Cluster, ScaleUp};

/// Largest mesh the Hamiltonian-decomposition search is run on, and its step budget.
const MAX_SEARCHED_MESH: u32 = 16;
const SEARCH_BUDGET: u64 = 2_000_000;

/// The channel count NCCL/RCCL would use here: one ring per NIC of a server
/// across servers, one per disjoint mesh cycle on a single full-mesh server, else 1;
/// at most `MAX_CHANNELS` (an NVL72 rack has 72 NICs).
pub(crate) fn default_channels(cluster: Option<&Cluster>) -> u64 {
    let n = match cluster {
        Some(c) if c.servers > 1 => c.nics_per_server as u64,
        Some(c) if matches!(c.scaleup, ScaleUp::FullMesh { .. }) && c.gpus_per_server > 2 => mesh_cycles(c.gpus_per_server).len() as u64,
        _ => 1,
    };
    n.min(super::MAX_CHANNELS)
}

/// One ring: `order[i]` is the rank at position i.
pub(crate) struct RingOrder {
    order: Vec<u32>,
    pos: Vec<u32>,
}

impl RingOrder {
    pub(crate) fn new(order: Vec<u32>) -> RingOrder {
        let mut pos = vec![0u32; order.len()];
        for (i, &r) in order.iter().enumerate() {
            pos[r as usize] = i as u32;
        }
        RingOrder { order, pos }
    }
    /// The rank `hops` positions after `rank` on this ring.
    pub(crate) fn after(&self, rank: u32, hops: u32) -> u32 {
        let p = self.order.len() as u32;
        self.order[((self.pos[rank as usize] + hops) % p) as usize]
    }
}

/// The ring of each of `channels` channels over `ranks` ranks.
pub(crate) fn ring_orders(ranks: u32, cluster: Option<&Cluster>, channels: u64) -> Vec<RingOrder> {
    let identity: Vec<u32> = (0..ranks).collect();
    let Some(c) = cluster else {
        return (0..channels).map(|_| RingOrder::new(identity.clone())).collect();
    };
    let g = c.gpus_per_server;
    let mesh = matches!(c.scaleup, ScaleUp::FullMesh { .. }) && g > 2;
    let cycles = if mesh { mesh_cycles(g) } else { vec![(0..g).collect()] };
    if c.servers == 1 {
        return (0..channels).map(|k| RingOrder::new(if mesh { cycles[(k % cycles.len() as u64) as usize].clone() } else { identity.clone() })).collect();
    }
    let nics = c.nics_per_server as usize;
    let cycle_of = |k: u64| &cycles[(k % cycles.len() as u64) as usize];
    let pred = |k: u64, l: u32| {
        let cy = cycle_of(k);
        cy[(cy.iter().position(|&x| x == l).unwrap_or(0) + g as usize - 1) % g as usize]
    };
    // Entry GPUs, `nics` channels at a time: every channel of a group enters through its own
    // NIC and leaves (from the GPU before its entry) through its own NIC.
    let mut entries = Vec::with_capacity(channels as usize);
    while (entries.len() as u64) < channels {
        let group: Vec<u64> = (entries.len() as u64..channels.min(entries.len() as u64 + nics as u64)).collect();
        let mut picked = Vec::new();
        let (mut down, mut up) = (vec![false; nics], vec![false; nics]);
        if !pick_entries(c, &group, &pred, &mut picked, &mut down, &mut up, &mut SEARCH_BUDGET.clone()) {
            picked = group.iter().map(|&k| (k % g as u64) as u32).collect();
        }
        entries.extend(picked);
    }
    entries
        .iter()
        .enumerate()
        .map(|(k, &entry)| {
            let cycle = cycle_of(k as u64);
            let start = cycle.iter().position(|&x| x == entry).unwrap_or(0);
            let local: Vec<u32> = (0..g as usize).map(|i| cycle[(start + i) % g as usize]).collect();
            RingOrder::new((0..c.servers).flat_map(|s| local.iter().map(move |&l| s * g + l)).collect())
        })
        .collect()
}

/// Depth-first choice of one entry GPU per channel of `group` (candidates from GPU k on, so
/// channel 0 enters at GPU 0) with no two sharing a downlink NIC (`down`) or, for the GPU
/// they leave from, an uplink NIC (`up`); gives up after `budget` steps.
#[allow(clippy::too_many_arguments)]
fn pick_entries(c: &Cluster, group: &[u64], pred: &impl Fn(u64, u32) -> u32, picked: &mut Vec<u32>, down: &mut [bool], up: &mut [bool], budget: &mut u64) -> bool {
    let Some(&k) = group.get(picked.len()) else { return true };
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    let g = c.gpus_per_server;
    for i in 0..g {
        let e = (i + (k % g as u64) as u32) % g;
        let (d, u) = (c.nic_of(e) as usize, c.nic_of(pred(k, e)) as usize);
        if down[d] || up[u] {
            continue;
        }
        down[d] = true;
        up[u] = true;
        picked.push(e);
        if pick_entries(c, group, pred, picked, down, up, budget) {
            return true;
        }
        picked.pop();
        down[d] = false;
        up[u] = false;
    }
    false
}

/// Arc-disjoint Hamiltonian cycles of the complete digraph on `g` nodes, the
/// first being 0 → 1 → … → g-1: g-1 of them where a search finds them (every g
/// but 4 and 6, Tillson 1980), else the rotations i → i+d for d coprime with g.
pub(crate) fn mesh_cycles(g: u32) -> Vec<Vec<u32>> {
    if g <= MAX_SEARCHED_MESH {
        if let Some(c) = search_decomposition(g) {
            return c;
        }
    }
    (1..g).filter(|&d| gcd(d, g) == 1).map(|d| (0..g).map(|i| i * d % g).collect()).collect()
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

struct Search {
    g: usize,
    used: Vec<bool>,
    cycles: Vec<Vec<u32>>,
    steps: u64,
}

impl Search {
    fn arc(&self, a: u32, b: u32) -> usize {
        a as usize * self.g + b as usize
    }
    /// Extend `path` (a cycle under construction from node 0) depth-first; on
    /// closing a cycle, start the next. True once g-1 cycles are found.
    fn extend(&mut self, path: &mut Vec<u32>, seen: &mut [bool]) -> bool {
        self.steps += 1;
        if self.steps > SEARCH_BUDGET {
            return false;
        }
        let g = self.g as u32;
        let last = *path.last().expect("paths start at node 0");
        if path.len() == self.g {
            let close = self.arc(last, path[0]);
            if self.used[close] {
                return false;
            }
            self.used[close] = true;
            self.cycles.push(path.clone());
            if self.cycles.len() == self.g - 1 || self.extend(&mut vec![0], &mut Self::fresh(self.g)) {
                return true;
            }
            self.cycles.pop();
            self.used[close] = false;
            return false;
        }
        for b in 0..g {
            let a = self.arc(last, b);
            if seen[b as usize] || self.used[a] {
                continue;
            }
            self.used[a] = true;
            seen[b as usize] = true;
            path.push(b);
            if self.extend(path, seen) {
                return true;
            }
            path.pop();
            seen[b as usize] = false;
            self.used[a] = false;
        }
        false
    }
    fn fresh(g: usize) -> Vec<bool> {
        let mut seen = vec![false; g];
        seen[0] = true;
        seen
    }
}

fn search_decomposition(g: u32) -> Option<Vec<Vec<u32>>> {
    let n = g as usize;
    let mut s = Search { g: n, used: vec![false; n * n], cycles: vec![(0..g).collect()], steps: 0 };
    for i in 0..g {
        let (a, b) = (s.arc(i, i), s.arc(i, (i + 1) % g));
        s.used[a] = true;
        s.used[b] = true;
    }
    if n < 3 {
        return None;
    }
    if s.extend(&mut vec![0], &mut Search::fresh(n)) {
        Some(s.cycles)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arcs(cycle: &[u32]) -> Vec<(u32, u32)> {
        (0..cycle.len()).map(|i| (cycle[i], cycle[(i + 1) % cycle.len()])).collect()
    }

    #[test]
    fn mesh_cycles_are_arc_disjoint_hamiltonian() {
        for g in 3..=16u32 {
            let cycles = mesh_cycles(g);
            assert_eq!(cycles[0], (0..g).collect::<Vec<_>>(), "g={g}: channel 0 is the rank ring");
            let want = if g == 4 || g == 6 { 2 } else { g as usize - 1 };
            assert_eq!(cycles.len(), want, "g={g}");
            let mut seen = std::collections::BTreeSet::new();
            for c in &cycles {
                let mut sorted = c.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..g).collect::<Vec<_>>(), "g={g}: {c:?} is not Hamiltonian");
                for a in arcs(c) {
                    assert!(a.0 != a.1 && seen.insert(a), "g={g}: arc {a:?} used twice");
                }
            }
        }
    }

    #[test]
    fn multi_server_channels_use_distinct_nics() {
        for spec in ["h100:4", "h100:3,nics=4", "mi300x:2", "h100:2,nics=2", "mi300x:3,nics=4"] {
            let c = Cluster::parse(spec).unwrap();
            let rings = ring_orders(c.num_gpus(), Some(&c), default_channels(Some(&c)));
            assert_eq!(rings.len(), c.nics_per_server as usize, "{spec}");
            assert_eq!(rings[0].order, (0..c.num_gpus()).collect::<Vec<_>>(), "{spec}");
            let (mut up, mut down) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
            for r in &rings {
                let crossings: Vec<(u32, u32)> = (0..c.num_gpus()).map(|x| (x, r.after(x, 1))).filter(|&(a, b)| c.server_of(a) != c.server_of(b)).collect();
                assert_eq!(crossings.len(), c.servers as usize, "{spec}: a ring crosses each server boundary once");
                assert!(up.insert(c.nic_of(crossings[0].0)) && down.insert(c.nic_of(crossings[0].1)), "{spec}: NIC shared by two channels");
            }
        }
    }
}
