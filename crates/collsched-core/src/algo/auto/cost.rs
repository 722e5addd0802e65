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
use super::fluid;
use crate::plan::Plan;
use crate::topology::{Cluster, ScaleUp, Tier};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher for link keys (u64). Only used to number links in order of first use, never
/// iterated, so it cannot change a result; splitmix64's finaliser spreads keys that
/// differ only in their high bits (the link kind).
#[derive(Default)]
struct KeyHasher(u64);
impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}


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

/// `bytes / bw` in nanoseconds, rounded up. u64 arithmetic whenever `bytes · 10^9`
/// fits (below 18 GB), since 128-bit division dominated the model's cost.
#[inline]
fn drain_ns(bytes: u64, bw: u64) -> u64 {
    const NS: u64 = 1_000_000_000;
    if bytes == 0 {
        return 0;
    }
    let bw = bw.max(1);
    if bytes <= u64::MAX / NS {
        return (bytes * NS).div_ceil(bw);
    }
    let ns = (bytes as u128 * NS as u128).div_ceil(bw as u128);
    ns.min(u64::MAX as u128) as u64
}

/// Predicted completion time of `plan` on `cluster`, integer nanoseconds.
pub fn predict_ns(plan: &Plan, cluster: &Cluster) -> u64 {
    predict_finish_ns(plan, cluster).into_iter().max().unwrap_or(0)
}

/// Predicted finish time of every transfer, integer nanoseconds.
pub fn predict_finish_ns(plan: &Plan, cluster: &Cluster) -> Vec<u64> {
    let model = Model::new(plan, cluster);
    let (finish, release) = model.run(None);
    match model.interference(&finish, &release) {
        Some(extra) => model.run(Some(&extra)).0,
        None => finish,
    }
}

/// Completion time (ns) of `plan` under the integer fluid model (`fluid::run_plan`):
/// max-min sharing across every link, dependencies released as they complete — the
/// simulator's physics in integers. None if it would take more than `budget` work units
/// (see `fluid::run_plan`); also returns the work it took.
pub fn fluid_predict_ns(plan: &Plan, cluster: &Cluster, budget: u64) -> Option<(u64, u64)> {
    let run = fluid_run(plan, cluster, budget)?;
    Some((run.finish.iter().copied().max().unwrap_or(0), run.work))
}

/// Finish time of every transfer under the integer fluid model (no budget).
pub fn fluid_finish_ns(plan: &Plan, cluster: &Cluster) -> Vec<u64> {
    fluid_run(plan, cluster, u64::MAX).map(|r| r.finish).unwrap_or_default()
}

fn fluid_run(plan: &Plan, cluster: &Cluster, budget: u64) -> Option<fluid::FluidRun> {
    let model = Model::new(plan, cluster);
    let m = plan.transfers.len();
    let (mut alpha, mut bytes, mut transfer) = (Vec::with_capacity(m), Vec::with_capacity(m), Vec::with_capacity(m));
    let (mut dep_off, mut deps) = (Vec::with_capacity(m + 1), Vec::with_capacity(plan.deps.len()));
    let (mut flow_off, mut link_off, mut links) = (Vec::with_capacity(m + 1), Vec::with_capacity(m + 1), Vec::with_capacity(model.slot_link.len()));
    dep_off.push(0u32);
    flow_off.push(0u32);
    link_off.push(0u32);
    let mut flow = |id: usize, slots: std::ops::Range<usize>, bytes: &mut Vec<u64>, links: &mut Vec<u32>, link_off: &mut Vec<u32>| {
        transfer.push(id as u32);
        bytes.push(slots.clone().map(|k| model.slot_bytes[k]).max().unwrap_or(0));
        links.extend(slots.filter(|&k| model.slot_bytes[k] > 0).map(|k| model.slot_link[k]));
        link_off.push(links.len() as u32);
    };
    for (id, t) in plan.transfers.iter().enumerate() {
        alpha.push(cluster.alpha_ns(t.tier));
        deps.extend(plan.deps_of(t).iter().copied().filter(|&d| (d as usize) < id));
        dep_off.push(deps.len() as u32);
        let (lo, hi) = (model.slot_begin[id], model.slot_begin[id + 1]);
        if model.half[id] {
            // An antipodal ring transfer: half its bytes each way (`links_of` lists the
            // forward walk, then the backward walk of the same length), two flows.
            let mid = lo + (hi - lo) / 2;
            flow(id, lo..mid, &mut bytes, &mut links, &mut link_off);
            flow(id, mid..hi, &mut bytes, &mut links, &mut link_off);
        } else {
            flow(id, lo..hi, &mut bytes, &mut links, &mut link_off);
        }
        flow_off.push(bytes.len() as u32);
    }
    fluid::run_plan(&fluid::PlanFlows { alpha: &alpha, dep_off: &dep_off, deps: &deps, flow_off: &flow_off, transfer: &transfer, bytes: &bytes, link_off: &link_off, links: &links, bw: &model.link_bw }, budget)
}


struct Model<'a> {
    plan: &'a Plan,
    cluster: &'a Cluster,
    level: Vec<u32>,
    /// Per transfer: an antipodal ring transfer, half its bytes each way.
    half: Vec<bool>,
    /// Transfer id → its slots (`slot_begin[id]..slot_begin[id + 1]`): one per link it uses.
    slot_begin: Vec<usize>,
    /// Per slot: dense link id, link bandwidth, bytes the transfer puts on the link, and
    /// the bytes of lower levels on the same link.
    slot_link: Vec<u32>,
    slot_bw: Vec<u64>,
    /// Per dense link: its bandwidth.
    link_bw: Vec<u64>,
    slot_bytes: Vec<u64>,
    slot_below: Vec<u64>,
    /// Per slot: the transfer it belongs to.
    slot_owner: Vec<u32>,
    links: usize,
    /// Transfer ids ordered by level (stable).
    by_level: Vec<u32>,
}

/// Stable counting sort of `items` by `key(item) < buckets`; `start` gets the bucket bounds.
fn bucket_sort<T: Copy>(items: &[T], buckets: usize, key: impl Fn(&T) -> usize, out: &mut Vec<T>, start: &mut Vec<usize>) {
    start.clear();
    start.resize(buckets + 1, 0);
    for x in items {
        start[key(x) + 1] += 1;
    }
    for b in 0..buckets {
        start[b + 1] += start[b];
    }
    let mut fill = start.clone();
    out.clear();
    let Some(&first) = items.first() else { return };
    out.resize(items.len(), first);
    for &x in items {
        let k = key(&x);
        out[fill[k]] = x;
        fill[k] += 1;
    }
}

impl<'a> Model<'a> {
    fn new(plan: &'a Plan, cluster: &'a Cluster) -> Model<'a> {
        let m = plan.transfers.len();
        let mut level = vec![0u32; m];
        let mut slot_begin = Vec::with_capacity(m + 1);
        let mut keys: Vec<(u64, u64)> = Vec::with_capacity(2 * m);
        let mut slot_bytes: Vec<u64> = Vec::with_capacity(2 * m);
        let mut half = vec![false; m];
        for (id, t) in plan.transfers.iter().enumerate() {
            level[id] = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| level[d as usize] + 1).max().unwrap_or(0);
            let bytes = plan.transfer_bytes(t);
            slot_begin.push(keys.len());
            let first = keys.len();
            links_of(cluster, t.src, t.dst, t.tier, &mut keys);
            half[id] = keys[first..].iter().any(|k| k.0 & HALF != 0);
            for k in &mut keys[first..] {
                let (l, b) = split(k.0, bytes);
                k.0 = l;
                slot_bytes.push(b);
            }
        }
        slot_begin.push(keys.len());
        let slots = keys.len();
        // Dense link ids in order of first use (deterministic: transfer order).
        let mut dense: HashMap<u64, u32, BuildHasherDefault<KeyHasher>> = HashMap::with_capacity_and_hasher(slots / 4 + 16, Default::default());
        let slot_link: Vec<u32> = keys
            .iter()
            .map(|k| {
                let next = dense.len() as u32;
                *dense.entry(k.0).or_insert(next)
            })
            .collect();
        let links = dense.len();
        // Lower-level bytes per slot: slots bucketed by link, then by level within a link.
        let mut by_link: Vec<u32> = Vec::new();
        let mut start: Vec<usize> = Vec::new();
        let ids: Vec<u32> = (0..slots as u32).collect();
        bucket_sort(&ids, links, |&k| slot_link[k as usize] as usize, &mut by_link, &mut start);
        let mut slot_level = vec![0u32; slots];
        let mut slot_owner = vec![0u32; slots];
        for id in 0..m {
            for k in slot_begin[id]..slot_begin[id + 1] {
                slot_level[k] = level[id];
                slot_owner[k] = id as u32;
            }
        }
        let mut slot_below = vec![0u64; slots];
        for l in 0..links {
            let group = &mut by_link[start[l]..start[l + 1]];
            if group.iter().any(|&k| slot_level[k as usize] != slot_level[group[0] as usize]) {
                group.sort_by_key(|&k| slot_level[k as usize]);
                let (mut below, mut acc) = (0u64, 0u64);
                for i in 0..group.len() {
                    let k = group[i] as usize;
                    if i > 0 && slot_level[group[i - 1] as usize] != slot_level[k] {
                        below = below.saturating_add(acc);
                        acc = 0;
                    }
                    slot_below[k] = below;
                    acc = acc.saturating_add(slot_bytes[k]);
                }
            }
        }
        let mut link_bw = vec![0u64; links];
        for (k, &l) in keys.iter().zip(&slot_link) {
            link_bw[l as usize] = k.1;
        }
        let slot_bw = keys.iter().map(|k| k.1).collect();
        let mut by_level: Vec<u32> = (0..m as u32).collect();
        by_level.sort_by_key(|&i| level[i as usize]);
        Model { plan, cluster, level, half, slot_begin, slot_link, link_bw, slot_bw, slot_bytes, slot_below, slot_owner, links, by_level }
    }

    /// Finish times, level by level.
    /// Finish and release times, level by level. `extra[slot]`: bytes of later levels
    /// that share the slot's link while its transfer runs (second pass).
    fn run(&self, extra: Option<&[u64]>) -> (Vec<u64>, Vec<u64>) {
        let (plan, m, slots) = (self.plan, self.plan.transfers.len(), self.slot_link.len());
        let mut finish = vec![0u64; m];
        let mut release = vec![0u64; m];
        // Per level: its slots, then the same bucketed by link.
        let mut level_slots: Vec<u32> = Vec::new();
        let mut grouped: Vec<u32> = Vec::new();
        let mut start: Vec<usize> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        let mut seen = vec![false; self.links];
        let mut local_of = vec![0u32; self.links];
        // Per slot: processor-sharing bytes (Σ_j min(b_j, b) over the level) and the link's
        // work-conserving completion over the level.
        let mut shared = vec![0u64; slots];
        let mut drained = vec![0u64; slots];
        let mut lo = 0;
        while lo < m {
            let lv = self.level[self.by_level[lo] as usize];
            let mut hi = lo;
            while hi < m && self.level[self.by_level[hi] as usize] == lv {
                hi += 1;
            }
            level_slots.clear();
            touched.clear();
            for &id in &self.by_level[lo..hi] {
                let id = id as usize;
                let t = &plan.transfers[id];
                let ready = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| finish[d as usize]).max().unwrap_or(0);
                release[id] = ready.saturating_add(self.cluster.alpha_ns(t.tier));
                for slot in self.slot_begin[id]..self.slot_begin[id + 1] {
                    if self.slot_bytes[slot] > 0 {
                        level_slots.push(slot as u32);
                        let l = self.slot_link[slot] as usize;
                        if !seen[l] {
                            seen[l] = true;
                            touched.push(l as u32);
                        }
                    }
                }
            }
            // Bucket this level's slots by link (compact ids: the link's rank among the
            // touched links, so buckets come in link order).
            touched.sort_unstable();
            for (i, &l) in touched.iter().enumerate() {
                local_of[l as usize] = i as u32;
            }
            let key = |&k: &u32| local_of[self.slot_link[k as usize] as usize] as usize;
            let buckets = touched.len();
            bucket_sort(&level_slots, buckets, key, &mut grouped, &mut start);
            for &l in &touched {
                seen[l as usize] = false;
            }
            for b in 0..buckets {
                let group = &mut grouped[start[b]..start[b + 1]];
                if group.is_empty() {
                    continue;
                }
                let bw = self.slot_bw[group[0] as usize];
                let rel = |k: u32| release[self.slot_owner[k as usize] as usize];
                // Work-conserving completion over the level:
                // max_j (release_j + bytes released at or after release_j / bw).
                let r0 = rel(group[0]);
                let done = if group.iter().all(|&k| rel(k) == r0) {
                    let total = group.iter().fold(0u64, |a, &k| a.saturating_add(self.slot_bytes[k as usize]));
                    r0.saturating_add(drain_ns(total, bw))
                } else {
                    group.sort_by_key(|&k| std::cmp::Reverse(rel(k)));
                    let (mut acc, mut done) = (0u64, 0u64);
                    for &k in group.iter() {
                        acc = acc.saturating_add(self.slot_bytes[k as usize]);
                        done = done.max(rel(k).saturating_add(drain_ns(acc, bw)));
                    }
                    done
                };
                // Processor sharing: with equal shares a transfer of b bytes finishes once
                // Σ_j min(b_j, b) bytes went through the link.
                group.sort_by_key(|&k| self.slot_bytes[k as usize]);
                let n = group.len() as u64;
                let mut before = 0u64;
                for (i, &k) in group.iter().enumerate() {
                    let b = self.slot_bytes[k as usize];
                    shared[k as usize] = before.saturating_add(b.saturating_mul(n - i as u64));
                    drained[k as usize] = done;
                    before = before.saturating_add(b);
                }
            }
            for &id in &self.by_level[lo..hi] {
                let id = id as usize;
                let alpha = self.cluster.alpha_ns(plan.transfers[id].tier);
                let mut f = release[id];
                for slot in self.slot_begin[id]..self.slot_begin[id + 1] {
                    if self.slot_bytes[slot] == 0 {
                        continue;
                    }
                    let bw = self.slot_bw[slot];
                    let more = extra.map_or(0, |e| e[slot]);
                    let mine = shared[slot].saturating_add(more);
                    let own_level = drained[slot].saturating_add(drain_ns(more, bw)).min(release[id].saturating_add(drain_ns(mine, bw)));
                    // Bytes of lower levels on the same link go first (released earlier).
                    let behind = alpha.saturating_add(drain_ns(self.slot_below[slot].saturating_add(mine), bw));
                    f = f.max(own_level).max(behind);
                }
                finish[id] = f;
            }
            lo = hi;
        }
        (finish, release)
    }

    /// Later levels' bytes that overlap each slot's transfer on its link, from a first
    /// pass's times: transfers of later levels released before a finishes share the link
    /// with a. Under processor sharing each counts up to a's size; the estimate used is
    /// min(their bytes, their count · a's bytes), from a Fenwick tree over release order
    /// (O(n log n) per link). Phases that are meant to overlap (FAST's own bytes beside
    /// balanced-in bytes, pipelined stages) slow each other down; the first pass only
    /// made later levels wait. None if no link carries several levels.
    fn interference(&self, finish: &[u64], release: &[u64]) -> Option<Vec<u64>> {
        let slots = self.slot_link.len();
        let ids: Vec<u32> = (0..slots as u32).filter(|&k| self.slot_bytes[k as usize] > 0).collect();
        let (mut grouped, mut start) = (Vec::new(), Vec::new());
        bucket_sort(&ids, self.links, |&k| self.slot_link[k as usize] as usize, &mut grouped, &mut start);
        let owner = |k: u32| self.slot_owner[k as usize] as usize;
        let mut extra = vec![0u64; slots];
        let mut any = false;
        let (mut by_release, mut releases, mut by_level) = (Vec::new(), Vec::new(), Vec::new());
        let (mut tree_bytes, mut tree_count): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
        for l in 0..self.links {
            let group = &grouped[start[l]..start[l + 1]];
            if group.len() < 2 || group.iter().all(|&k| self.level[owner(k)] == self.level[owner(group[0])]) {
                continue;
            }
            by_release.clear();
            by_release.extend_from_slice(group);
            by_release.sort_by_key(|&k| (release[owner(k)], k));
            releases.clear();
            releases.extend(by_release.iter().map(|&k| release[owner(k)]));
            by_level.clear();
            by_level.extend((0..by_release.len() as u32).map(|i| (self.level[owner(by_release[i as usize])], i)));
            by_level.sort_unstable_by(|a, b| b.cmp(a));
            let n = by_release.len();
            tree_bytes.clear();
            tree_bytes.resize(n + 1, 0);
            tree_count.clear();
            tree_count.resize(n + 1, 0);
            let mut i = 0;
            while i < n {
                let lv = by_level[i].0;
                let mut j = i;
                while j < n && by_level[j].0 == lv {
                    j += 1;
                }
                // Query this level against strictly later levels, then insert it.
                for &(_, r) in &by_level[i..j] {
                    let a = by_release[r as usize];
                    let (ba, fa) = (self.slot_bytes[a as usize], finish[owner(a)]);
                    let mut p = releases.partition_point(|&x| x < fa);
                    let (mut sum, mut cnt) = (0u64, 0u64);
                    while p > 0 {
                        sum = sum.saturating_add(tree_bytes[p]);
                        cnt += tree_count[p];
                        p &= p - 1;
                    }
                    let add = sum.min(cnt.saturating_mul(ba));
                    if add > 0 {
                        extra[a as usize] = add;
                        any = true;
                    }
                }
                for &(_, r) in &by_level[i..j] {
                    let b = self.slot_bytes[by_release[r as usize] as usize];
                    let mut p = r as usize + 1;
                    while p <= n {
                        tree_bytes[p] = tree_bytes[p].saturating_add(b);
                        tree_count[p] += 1;
                        p += p & p.wrapping_neg();
                    }
                }
                i = j;
            }
        }
        any.then_some(extra)
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

/// A lower bound on `predict_ns(plan, cluster)` from the NICs alone, in O(transfers):
/// the model finishes the last transfer on a link no earlier than its alpha plus the
/// link's whole load over its bandwidth (the "behind" term counts every lower level's
/// bytes and the largest transfer of a level shares with all of its level), so the
/// prediction is at least `alpha_scaleout + max NIC load / nic_bw` (0 without scale-out).
pub fn nic_lower_bound_ns(plan: &Plan, cluster: &Cluster) -> u64 {
    let nics = (cluster.servers * cluster.nics_per_server) as usize;
    let (mut up, mut down) = (vec![0u64; nics], vec![0u64; nics]);
    for t in &plan.transfers {
        if t.tier == Tier::ScaleOut {
            let b = plan.transfer_bytes(t);
            up[cluster.global_nic_of(t.src) as usize] += b;
            down[cluster.global_nic_of(t.dst) as usize] += b;
        }
    }
    nic_bound(cluster, &up, &down)
}

/// A lower bound on `predict_ns(plan, cluster)` along dependency chains, in
/// O(transfers + deps): the model releases a transfer alpha after its dependencies finish
/// and finishes it no earlier than its release plus its bytes over each link it uses
/// (both the processor-sharing and the drain terms include its own bytes), so
/// `cp(t) = max(cp(deps)) + alpha + bytes / (fastest link of its tier)` never exceeds
/// the model's finish (ring transfers may split over two directions: half the bytes).
/// Catches plans that serialize many small rounds (spreadout), which the NIC bound misses.
pub fn critical_path_lower_bound_ns(plan: &Plan, cluster: &Cluster) -> u64 {
    let fastest = |tier: Tier| match tier {
        Tier::Local => cluster.local_copy_bw,
        Tier::ScaleOut => cluster.nic_bw,
        Tier::ScaleUp => match cluster.scaleup {
            ScaleUp::Switch { port_bw } => port_bw,
            ScaleUp::FullMesh { link_bw } | ScaleUp::Ring { link_bw } | ScaleUp::HybridCubeMesh { link_bw } => link_bw,
        },
    };
    let ring = matches!(cluster.scaleup, ScaleUp::Ring { .. });
    let mut cp = vec![0u64; plan.transfers.len()];
    let mut most = 0;
    for (id, t) in plan.transfers.iter().enumerate() {
        let ready = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| cp[d as usize]).max().unwrap_or(0);
        let bytes = plan.transfer_bytes(t);
        let bytes = if ring && t.tier == Tier::ScaleUp { bytes.div_ceil(2) } else { bytes };
        cp[id] = ready.saturating_add(cluster.alpha_ns(t.tier)).saturating_add(drain_ns(bytes, fastest(t.tier)));
        most = most.max(cp[id]);
    }
    most
}

/// How an algorithm routes scale-out bytes, for `matrix_nic_lower_bound_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Every remote block goes straight from its sender's NIC to its receiver's (fanout, spreadout).
    Direct,
    /// Rail-aligned: block (s,l)→(s',l') leaves through server s's NIC of local index l'
    /// (hierarchical).
    Rail,
}

/// `nic_lower_bound_ns` of the plan an algorithm routing by `route` makes, computed from
/// the matrix in O(P²) without planning (tested equal to the plan's bound).
pub fn matrix_nic_lower_bound_ns(traffic: &crate::traffic::Traffic, cluster: &Cluster, route: Route) -> u64 {
    let nics = (cluster.servers * cluster.nics_per_server) as usize;
    let (mut up, mut down) = (vec![0u64; nics], vec![0u64; nics]);
    let n = traffic.n() as u32;
    let g = cluster.gpus_per_server;
    for i in 0..n {
        for j in 0..n {
            let b = traffic.get(i as usize, j as usize);
            if b == 0 || i / g == j / g {
                continue;
            }
            let via = match route {
                Route::Direct => i,
                Route::Rail => (i / g) * g + j % g,
            };
            up[cluster.global_nic_of(via) as usize] += b;
            down[cluster.global_nic_of(j) as usize] += b;
        }
    }
    nic_bound(cluster, &up, &down)
}

fn nic_bound(cluster: &Cluster, up: &[u64], down: &[u64]) -> u64 {
    let most = up.iter().chain(down).copied().max().unwrap_or(0);
    if most == 0 {
        return 0;
    }
    cluster.alpha_scaleout_ns.saturating_add(drain_ns(most, cluster.nic_bw))
}
