//! Closed-form, integer cost model for a Plan: a contention-aware critical path.
//!
//! Each transfer gets a dependency level (0 without deps, else 1 + the deepest dep).
//! Transfers of one level are taken to run together and share their links fairly, so
//! a transfer needs at least the time its most loaded link takes to drain everything
//! that level puts on it: finish ≥ max(finish of deps) + alpha + level load / bw.
//! A link also carries the earlier levels' bytes, and a link drains work at its
//! bandwidth whatever the sharing: finish ≥ alpha + (bytes of levels ≤ its level on the
//! link) / bw. The transfer finishes at the larger of the two; the prediction is the
//! latest finish. O((transfers + segments + deps + link hops) · log) and integer
//! nanoseconds throughout: no floating point.
//!
//! Links mirror the simulator's fluid model: a scale-out transfer uses its sender's
//! NIC uplink and its receiver's NIC downlink; scale-up uses the two switch ports
//! (switch) or the directed GPU-to-GPU links of its route (mesh, ring, cube-mesh);
//! a local copy uses its GPU's copy engine.
use crate::plan::Plan;
use crate::topology::{Cluster, ScaleUp, Tier};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplicative hasher for small integer keys (accumulation only: no decision
/// depends on iteration order, so the hasher cannot change a result).
#[derive(Default)]
struct IntHasher(u64);
impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

const KIND_PORT_OUT: u64 = 1;
const KIND_PORT_IN: u64 = 2;
const KIND_NIC_UP: u64 = 3;
const KIND_NIC_DOWN: u64 = 4;
const KIND_LINK: u64 = 5;
const KIND_COPY: u64 = 6;

fn key(kind: u64, server: u32, a: u32, b: u32) -> u64 {
    (kind << 61) | ((server as u64) << 40) | ((a as u64) << 20) | b as u64
}

/// Append the (link key, bandwidth) pairs transfer `src → dst` of `tier` occupies.
pub fn links_of(c: &Cluster, src: u32, dst: u32, tier: Tier, out: &mut Vec<(u64, u64)>) {
    match tier {
        Tier::Local => out.push((key(KIND_COPY, 0, 0, src), c.local_copy_bw)),
        Tier::ScaleOut => {
            out.push((key(KIND_NIC_UP, 0, 0, c.global_nic_of(src)), c.nic_bw));
            out.push((key(KIND_NIC_DOWN, 0, 0, c.global_nic_of(dst)), c.nic_bw));
        }
        Tier::ScaleUp => {
            let server = c.server_of(src);
            let (a, b) = (c.local_index(src), c.local_index(dst));
            let g = c.gpus_per_server;
            match c.scaleup {
                ScaleUp::Switch { port_bw } => {
                    out.push((key(KIND_PORT_OUT, 0, 0, src), port_bw));
                    out.push((key(KIND_PORT_IN, 0, 0, dst), port_bw));
                }
                ScaleUp::FullMesh { link_bw } => out.push((key(KIND_LINK, server, a, b), link_bw)),
                ScaleUp::Ring { link_bw } => {
                    // Shorter direction; clockwise on ties.
                    let fwd = (b + g - a) % g;
                    let step = if fwd <= g - fwd { 1 } else { g - 1 };
                    let mut x = a;
                    while x != b {
                        let y = (x + step) % g;
                        out.push((key(KIND_LINK, server, x, y), link_bw));
                        x = y;
                    }
                }
                ScaleUp::HybridCubeMesh { link_bw } => {
                    if c.scaleup_adjacent(a, b) {
                        out.push((key(KIND_LINK, server, a, b), link_bw));
                    } else {
                        let via = (0..g).find(|&x| c.scaleup_adjacent(a, x) && c.scaleup_adjacent(x, b)).unwrap_or(b);
                        out.push((key(KIND_LINK, server, a, via), link_bw));
                        if via != b {
                            out.push((key(KIND_LINK, server, via, b), link_bw));
                        }
                    }
                }
            }
        }
    }
}

/// `bytes / bw` in nanoseconds, rounded up.
fn drain_ns(bytes: u64, bw: u64) -> u64 {
    if bytes == 0 {
        return 0;
    }
    let ns = (bytes as u128 * 1_000_000_000).div_ceil(bw.max(1) as u128);
    ns.min(u64::MAX as u128) as u64
}

/// Predicted completion time of `plan` on `cluster`, integer nanoseconds.
pub fn predict_ns(plan: &Plan, cluster: &Cluster) -> u64 {
    let m = plan.transfers.len();
    let mut level = vec![0u32; m];
    let mut bytes = vec![0u64; m];
    let mut link_begin = Vec::with_capacity(m + 1);
    let mut links: Vec<(u64, u64)> = Vec::with_capacity(2 * m);
    // (level, link) -> [bytes of that level, bytes of levels ≤ it]
    let mut load: FastMap<(u32, u64), [u64; 2]> = FastMap::default();
    load.reserve(2 * m);
    for (id, t) in plan.transfers.iter().enumerate() {
        let lv = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| level[d as usize] + 1).max().unwrap_or(0);
        level[id] = lv;
        bytes[id] = plan.transfer_bytes(t);
        link_begin.push(links.len());
        links_of(cluster, t.src, t.dst, t.tier, &mut links);
        for &(l, _) in &links[link_begin[id]..] {
            let e = load.entry((lv, l)).or_insert([0, 0]);
            e[0] = e[0].saturating_add(bytes[id]);
        }
    }
    link_begin.push(links.len());
    // Prefix sums over levels per link (sorted keys: deterministic, and needed for the order).
    let mut keys: Vec<(u64, u32)> = load.keys().map(|&(lv, l)| (l, lv)).collect();
    keys.sort_unstable();
    let mut acc = 0u64;
    for (i, &(l, lv)) in keys.iter().enumerate() {
        if i == 0 || keys[i - 1].0 != l {
            acc = 0;
        }
        let e = load.get_mut(&(lv, l)).expect("key from the map");
        acc = acc.saturating_add(e[0]);
        e[1] = acc;
    }
    let mut finish = vec![0u64; m];
    let mut end = 0u64;
    for (id, t) in plan.transfers.iter().enumerate() {
        let ready = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| finish[d as usize]).max().unwrap_or(0);
        let (mut share, mut drain) = (0u64, 0u64);
        if bytes[id] > 0 {
            for &(l, bw) in &links[link_begin[id]..link_begin[id + 1]] {
                let e = load[&(level[id], l)];
                share = share.max(drain_ns(e[0], bw));
                drain = drain.max(drain_ns(e[1], bw));
            }
        }
        let alpha = cluster.alpha_ns(t.tier);
        finish[id] = ready.saturating_add(alpha).saturating_add(share).max(alpha.saturating_add(drain));
        end = end.max(finish[id]);
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Options;
    use crate::traffic::generators;

    #[test]
    fn fanout_is_bottleneck_nic_plus_alpha() {
        let c = Cluster::parse("h200:2").unwrap();
        let t = generators::balanced(16, 1_000_000).unwrap();
        let p = crate::algo::fanout::plan(&t, &c, &Options::new()).unwrap();
        // Each NIC sends 8 × 1 MB to the other server: 8e6 B / 50e9 B/s = 160 µs.
        assert_eq!(predict_ns(&p, &c), 6_000 + 160_000);
    }

    #[test]
    fn links_shared_across_levels_add_up() {
        // sabre_light on a balanced matrix: phase-2 forwarding shares the NICs with the
        // phase-1 direct exchange, so the NIC must drain both.
        let c = Cluster::parse("h200:2,gpus=4").unwrap();
        let t = generators::balanced(8, 1_000_000).unwrap();
        let p = crate::algo::sabre::plan_light(&t, &c, &Options::new()).unwrap();
        // Each NIC sends 4 × 1 MB to the other server: 80 µs at 50 GB/s.
        let ns = predict_ns(&p, &c);
        assert!(ns >= 80_000 + 6_000, "{ns}");
        assert!(ns < 80_000 + 6_000 + 20_000, "{ns}");
    }

    #[test]
    fn ring_routes_take_the_short_way() {
        let c = Cluster::parse("mi250:1").unwrap();
        let mut v = Vec::new();
        links_of(&c, 0, 6, Tier::ScaleUp, &mut v);
        assert_eq!(v.len(), 2);
        v.clear();
        links_of(&c, 0, 4, Tier::ScaleUp, &mut v);
        assert_eq!(v.len(), 4);
        let cube = Cluster::parse("v100:1").unwrap();
        v.clear();
        links_of(&cube, 0, 5, Tier::ScaleUp, &mut v);
        assert_eq!(v.len(), 2);
    }
}
