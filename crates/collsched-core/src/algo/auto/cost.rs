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

/// Flag on a link key: the transfer puts half its bytes on this link.
pub const HALF: u64 = 1 << 60;

fn key(kind: u64, server: u32, a: u32, b: u32) -> u64 {
    (kind << 61) | ((server as u64) << 40) | ((a as u64) << 20) | b as u64
}

/// The link a key names and the bytes a transfer of `bytes` puts on it.
fn split(k: u64, bytes: u64) -> (u64, u64) {
    let link = k & !HALF;
    if k & HALF != 0 {
        (link, bytes.div_ceil(2))
    } else {
        (link, bytes)
    }
}

/// Append the (link key, bandwidth) pairs transfer `src → dst` of `tier` occupies.
/// An antipodal ring transfer goes half each way: its links get the high key bit
/// `HALF`, meaning they carry half of its bytes.
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
                    // Shorter direction; an antipodal transfer splits evenly over both.
                    let fwd = (b + g - a) % g;
                    let mut walk = |step: u32, flag: u64| {
                        let mut x = a;
                        while x != b {
                            let y = (x + step) % g;
                            out.push((key(KIND_LINK, server, x, y) | flag, link_bw));
                            x = y;
                        }
                    };
                    if g <= 2 || fwd < g - fwd {
                        walk(1, 0);
                    } else if fwd > g - fwd {
                        walk(g - 1, 0);
                    } else {
                        walk(1, HALF);
                        walk(g - 1, HALF);
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
    predict_finish_ns(plan, cluster).into_iter().max().unwrap_or(0)
}

/// Predicted finish time of every transfer, integer nanoseconds.
pub fn predict_finish_ns(plan: &Plan, cluster: &Cluster) -> Vec<u64> {
    Model::new(plan, cluster).run()
}

struct Model<'a> {
    plan: &'a Plan,
    cluster: &'a Cluster,
    level: Vec<u32>,
    bytes: Vec<u64>,
    /// Transfer id → its slots in `links` (`link_begin[id]..link_begin[id + 1]`).
    link_begin: Vec<usize>,
    links: Vec<(u64, u64)>,
    /// (level, link) → bytes of levels ≤ level on the link.
    cum: FastMap<(u32, u64), u64>,
    /// Transfer ids ordered by level (stable).
    by_level: Vec<u32>,
}

impl<'a> Model<'a> {
    fn new(plan: &'a Plan, cluster: &'a Cluster) -> Model<'a> {
        let m = plan.transfers.len();
        let mut level = vec![0u32; m];
        let mut bytes = vec![0u64; m];
        let mut link_begin = Vec::with_capacity(m + 1);
        let mut links: Vec<(u64, u64)> = Vec::with_capacity(2 * m);
        let mut cum: FastMap<(u32, u64), u64> = FastMap::default();
        cum.reserve(2 * m);
        for (id, t) in plan.transfers.iter().enumerate() {
            let lv = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| level[d as usize] + 1).max().unwrap_or(0);
            level[id] = lv;
            bytes[id] = plan.transfer_bytes(t);
            link_begin.push(links.len());
            links_of(cluster, t.src, t.dst, t.tier, &mut links);
            for &(k, _) in &links[link_begin[id]..] {
                let (l, b) = split(k, bytes[id]);
                let e = cum.entry((lv, l)).or_insert(0);
                *e = e.saturating_add(b);
            }
        }
        link_begin.push(links.len());
        // Prefix sums over levels per link (sorted keys: the order matters for the sums).
        let mut keys: Vec<(u64, u32)> = cum.keys().map(|&(lv, l)| (l, lv)).collect();
        keys.sort_unstable();
        let mut acc = 0u64;
        for (i, &(l, lv)) in keys.iter().enumerate() {
            if i == 0 || keys[i - 1].0 != l {
                acc = 0;
            }
            let e = cum.get_mut(&(lv, l)).expect("key from the map");
            acc = acc.saturating_add(*e);
            *e = acc;
        }
        let mut by_level: Vec<u32> = (0..m as u32).collect();
        by_level.sort_by_key(|&i| level[i as usize]);
        Model { plan, cluster, level, bytes, link_begin, links, cum, by_level }
    }

    /// Finish times, level by level.
    fn run(&self) -> Vec<u64> {
        let (plan, links, m) = (self.plan, &self.links, self.plan.transfers.len());
        let mut finish = vec![0u64; m];
        let mut release = vec![0u64; m];
        // Per level: (link, release, bytes on link, slot) of every transfer of the level.
        let mut uses: Vec<(u64, u64, u64, u32)> = Vec::new();
        // Per slot: processor-sharing bytes (Σ_j min(b_j, b) over the level), the link's
        // work-conserving completion over the level, and the level's bytes on the link.
        let mut shared = vec![0u64; links.len()];
        let mut drained = vec![0u64; links.len()];
        let mut level_total = vec![0u64; links.len()];
        let mut lo = 0;
        while lo < m {
            let lv = self.level[self.by_level[lo] as usize];
            let mut hi = lo;
            while hi < m && self.level[self.by_level[hi] as usize] == lv {
                hi += 1;
            }
            uses.clear();
            for &id in &self.by_level[lo..hi] {
                let id = id as usize;
                let t = &plan.transfers[id];
                let ready = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| finish[d as usize]).max().unwrap_or(0);
                release[id] = ready.saturating_add(self.cluster.alpha_ns(t.tier));
                if self.bytes[id] > 0 {
                    for slot in self.link_begin[id]..self.link_begin[id + 1] {
                        let (l, b) = split(links[slot].0, self.bytes[id]);
                        uses.push((l, release[id], b, slot as u32));
                    }
                }
            }
            // Work-conserving completion of each link over its level:
            // max_j (release_j + bytes released at or after release_j / bw).
            uses.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.3.cmp(&b.3)));
            let mut i = 0;
            while i < uses.len() {
                let (l, begin) = (uses[i].0, i);
                let bw = links[uses[i].3 as usize].1;
                let (mut acc, mut done) = (0u64, 0u64);
                while i < uses.len() && uses[i].0 == l {
                    acc = acc.saturating_add(uses[i].2);
                    done = done.max(uses[i].1.saturating_add(drain_ns(acc, bw)));
                    i += 1;
                }
                for u in &uses[begin..i] {
                    drained[u.3 as usize] = done;
                    level_total[u.3 as usize] = acc;
                }
            }
            // Processor sharing: with equal shares a transfer of b bytes finishes once
            // Σ_j min(b_j, b) bytes went through the link.
            uses.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.2.cmp(&b.2)).then(a.3.cmp(&b.3)));
            let mut i = 0;
            while i < uses.len() {
                let (l, begin) = (uses[i].0, i);
                while i < uses.len() && uses[i].0 == l {
                    i += 1;
                }
                let n = (i - begin) as u64;
                let mut before = 0u64;
                for (k, u) in uses[begin..i].iter().enumerate() {
                    shared[u.3 as usize] = before.saturating_add(u.2.saturating_mul(n - k as u64));
                    before = before.saturating_add(u.2);
                }
            }
            for &id in &self.by_level[lo..hi] {
                let id = id as usize;
                let alpha = self.cluster.alpha_ns(plan.transfers[id].tier);
                let mut f = release[id];
                if self.bytes[id] > 0 {
                    for slot in self.link_begin[id]..self.link_begin[id + 1] {
                        let (l, bw) = (split(links[slot].0, 0).0, links[slot].1);
                        let mine = shared[slot];
                        let own_level = drained[slot].min(release[id].saturating_add(drain_ns(mine, bw)));
                        // Bytes of lower levels on the same link go first (released earlier).
                        let below = self.cum[&(lv, l)].saturating_sub(level_total[slot]);
                        let behind = alpha.saturating_add(drain_ns(below.saturating_add(mine), bw));
                        f = f.max(own_level).max(behind);
                    }
                }
                finish[id] = f;
            }
            lo = hi;
        }
        finish
    }
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
        assert_eq!(v.len(), 8, "antipodal: half each way");
        assert!(v.iter().all(|&(k, _)| k & HALF != 0));
        let cube = Cluster::parse("v100:1").unwrap();
        v.clear();
        links_of(&cube, 0, 5, Tier::ScaleUp, &mut v);
        assert_eq!(v.len(), 2);
    }
}
