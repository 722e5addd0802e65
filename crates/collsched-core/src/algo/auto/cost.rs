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
// Plain allocations where the per-thread pools of `reuse` (removed, issue 33) were.
fn empty<T>(cap: usize) -> Vec<T> {
    Vec::with_capacity(cap)
}
fn filled<T: Clone>(len: usize, fill: T) -> Vec<T> {
    vec![fill; len]
}
fn give<T>(v: Vec<T>) {
    drop(v)
}
use crate::plan::Plan;
use crate::topology::{Cluster, ScaleUp, Tier};
pub use super::bounds::{critical_path_lower_bound_ns, fast_preview_bounds_ns, matrix_nic_lower_bound_ns, nic_lower_bound_ns, plan_nic_loads, sabre_skewed_lower_bound_ns, Route};

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

/// Append the (link key, bandwidth) pairs transfer `src → dst` of `tier` occupies.
/// An antipodal ring transfer goes half each way: its links get the high key bit
/// `HALF`, meaning they carry half of its bytes.
pub fn links_of(c: &Cluster, src: u32, dst: u32, tier: Tier, out: &mut Vec<(u64, u64)>) {
    route(c, src, dst, tier, |kind, server, a, b, bw, half| out.push((key(kind, server, a, b) | if half { HALF } else { 0 }, bw)));
}

/// Call `emit(kind, server, a, b, bandwidth, half)` for each link transfer `src → dst` of
/// `tier` occupies, in route order (an antipodal ring transfer: the forward walk, then
/// the backward walk, both `half`).
#[inline]
fn route(c: &Cluster, src: u32, dst: u32, tier: Tier, mut emit: impl FnMut(u64, u32, u32, u32, u64, bool)) {
    match tier {
        Tier::Local => emit(KIND_COPY, 0, 0, src, c.local_copy_bw, false),
        Tier::ScaleOut => {
            emit(KIND_NIC_UP, 0, 0, c.global_nic_of(src), c.nic_bw, false);
            emit(KIND_NIC_DOWN, 0, 0, c.global_nic_of(dst), c.nic_bw, false);
        }
        Tier::ScaleUp => {
            let server = c.server_of(src);
            let (a, b) = (c.local_index(src), c.local_index(dst));
            let g = c.gpus_per_server;
            match c.scaleup {
                ScaleUp::Switch { port_bw } => {
                    emit(KIND_PORT_OUT, 0, 0, src, port_bw, false);
                    emit(KIND_PORT_IN, 0, 0, dst, port_bw, false);
                }
                ScaleUp::FullMesh { link_bw } => emit(KIND_LINK, server, a, b, link_bw, false),
                ScaleUp::Ring { link_bw } => {
                    // Shorter direction; an antipodal transfer splits evenly over both.
                    let fwd = (b + g - a) % g;
                    let mut walk = |step: u32, half: bool| {
                        let mut x = a;
                        while x != b {
                            let y = (x + step) % g;
                            emit(KIND_LINK, server, x, y, link_bw, half);
                            x = y;
                        }
                    };
                    if g <= 2 || fwd < g - fwd {
                        walk(1, false);
                    } else if fwd > g - fwd {
                        walk(g - 1, false);
                    } else {
                        walk(1, true);
                        walk(g - 1, true);
                    }
                }
                ScaleUp::HybridCubeMesh { link_bw } => {
                    if c.scaleup_adjacent(a, b) {
                        emit(KIND_LINK, server, a, b, link_bw, false);
                    } else {
                        let via = (0..g).find(|&x| c.scaleup_adjacent(a, x) && c.scaleup_adjacent(x, b)).unwrap_or(b);
                        emit(KIND_LINK, server, a, via, link_bw, false);
                        if via != b {
                            emit(KIND_LINK, server, via, b, link_bw, false);
                        }
                    }
                }
            }
        }
    }
}

/// Dense link ids in order of first use, from each link's position in the cluster's
/// geometry (copy engine = rank, NIC up/down = global NIC, switch port out/in = rank,
/// scale-up link = server·g² + a·g + b) instead of hashing. Keys outside the geometry
/// (ranks beyond the cluster in an unchecked plan) go to a map, never iterated.
struct DenseLinks {
    ranks: u64,
    nics: u64,
    g: u64,
    id: Vec<u32>,
    other: std::collections::BTreeMap<u64, u32>,
}

impl DenseLinks {
    const NONE: u32 = u32::MAX;
    fn new(c: &Cluster) -> DenseLinks {
        let (ranks, nics, g) = (c.num_gpus() as u64, (c.servers * c.nics_per_server) as u64, c.gpus_per_server as u64);
        let size = 3 * ranks + 2 * nics + c.servers as u64 * g * g;
        DenseLinks { ranks, nics, g, id: filled(size as usize, Self::NONE), other: Default::default() }
    }
    /// The dense id of a link (`kind`, `server`, `a`, `b` as `route` gives them);
    /// a new link gets the next id and its bandwidth is pushed onto `bw`.
    #[inline]
    fn get(&mut self, kind: u64, server: u32, a: u32, b: u32, link_bw: u64, bw: &mut Vec<u64>) -> u32 {
        let (r, n, g) = (self.ranks, self.nics, self.g);
        let (a, b) = (a as u64, b as u64);
        let pos = match kind {
            KIND_COPY => (b < r).then_some(b),
            KIND_NIC_UP => (b < n).then_some(r + b),
            KIND_NIC_DOWN => (b < n).then_some(r + n + b),
            KIND_PORT_OUT => (b < r).then_some(r + 2 * n + b),
            KIND_PORT_IN => (b < r).then_some(2 * r + 2 * n + b),
            _ => (a < g && b < g && (server as u64) < r / g.max(1)).then(|| 3 * r + 2 * n + server as u64 * g * g + a * g + b),
        };
        let next = bw.len() as u32;
        let slot = match pos {
            Some(p) => &mut self.id[p as usize],
            None => self.other.entry(key(kind, server, a as u32, b as u32)).or_insert(Self::NONE),
        };
        if *slot == Self::NONE {
            *slot = next;
            bw.push(link_bw);
        }
        *slot
    }
}

/// `bytes / bw` in nanoseconds, rounded up. u64 arithmetic whenever `bytes · 10^9`
/// fits (below 18 GB), since 128-bit division dominated the model's cost.
#[inline]
pub(super) fn drain_ns(bytes: u64, bw: u64) -> u64 {
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

/// `drain_ns` for one bandwidth, without a hardware division: `⌈x / d⌉` for
/// `x = bytes · 10^9` from a multiply by `m = ⌊(2^64 − 1) / d⌋`. Then
/// `x/d − 1 < x·m / 2^64 ≤ x/d`, so the estimate is the quotient or one less, and one
/// comparison of the remainder fixes it: exact, the same result as `drain_ns`
/// (property-tested), several times cheaper than a 64-bit `div` here.
#[derive(Debug, Clone, Copy)]
pub(super) struct Drain {
    bw: u64,
    magic: u64,
}

impl Drain {
    pub(super) fn new(bw: u64) -> Drain {
        let bw = bw.max(1);
        Drain { bw, magic: u64::MAX / bw }
    }
    #[inline]
    pub(super) fn ns(self, bytes: u64) -> u64 {
        const NS: u64 = 1_000_000_000;
        if bytes > u64::MAX / NS {
            return drain_ns(bytes, self.bw);
        }
        let x = bytes * NS;
        let mut q = ((x as u128 * self.magic as u128) >> 64) as u64;
        let mut r = x - q * self.bw;
        while r >= self.bw {
            q += 1;
            r -= self.bw;
        }
        q + (r > 0) as u64
    }
}

/// Predicted completion time of `plan` on `cluster`, integer nanoseconds.
pub fn predict_ns(plan: &Plan, cluster: &Cluster) -> u64 {
    if let Some(ns) = single_level_ns(plan, cluster) {
        return ns;
    }
    let finish = predict_finish_ns(plan, cluster);
    let most = finish.iter().copied().max().unwrap_or(0);
    give(finish);
    most
}

/// `predict_ns`, or stop early: `Err(bound)` when the model's first pass already
/// predicts `bound > give_up_above`. The first pass (before the later levels' interference
/// is added) is a lower bound on the prediction: the second pass only adds bytes, and every
/// term is non-decreasing in bytes and in release times (a work-conserving link never
/// drains sooner when work arrives later), so no transfer finishes earlier.
pub fn predict_or_bound_ns(plan: &Plan, cluster: &Cluster, give_up_above: u64) -> std::result::Result<u64, u64> {
    match first_pass_and_prediction_ns(plan, cluster, give_up_above) {
        (_, Some(ns)) => Ok(ns),
        (first, None) => Err(first),
    }
}

/// The model's first pass (a lower bound on the prediction) and, unless it exceeds
/// `give_up_above`, the prediction: `predict_or_bound_ns` that also reports the first pass
/// when it completes, so a caller can replay the pruning rule for a lower `give_up_above`.
pub fn first_pass_and_prediction_ns(plan: &Plan, cluster: &Cluster, give_up_above: u64) -> (u64, Option<u64>) {
    first_pass_and_prediction_within(plan, cluster, || give_up_above)
}

/// `first_pass_and_prediction_ns` against a limit that may drop while it runs (another
/// thread finding a better candidate): the limit is read after the first pass and again
/// before the second, and the prediction is skipped if the first pass exceeds it then.
pub fn first_pass_and_prediction_within(plan: &Plan, cluster: &Cluster, give_up_above: impl Fn() -> u64) -> (u64, Option<u64>) {
    if let Some(ns) = single_level_ns(plan, cluster) {
        return (ns, (ns <= give_up_above()).then_some(ns));
    }
    let model = Model::new(plan, cluster);
    let mut order = empty(0);
    let pass = model.run(None, &mut order);
    let first = pass.latest();
    if first > give_up_above() {
        give(order);
        return (first, None);
    }
    let Some(extra) = model.interference(&pass.finish, &pass.release, &order) else {
        give(order);
        return (first, Some(first));
    };
    if first > give_up_above() {
        give(extra);
        give(order);
        return (first, None);
    }
    let most = model.run(Some((&extra, &pass)), &mut order).latest();
    give(extra);
    give(order);
    (first, Some(most))
}

/// `predict_ns` of a plan without dependencies (fanout's single round), in one pass with
/// no sorting; None if any transfer depends on an earlier one. Every transfer is then
/// released at its tier's alpha and there are no lower levels and no interference, so
/// the model's finish of a transfer is `max(alpha, alpha + shared / bw)` over its links
/// (the level's drain term can only lower it), and the largest processor-sharing total on
/// a link is the link's whole load: the prediction is the latest of every transfer's alpha
/// and, per link, its alpha plus its load over its bandwidth.
fn single_level_ns(plan: &Plan, cluster: &Cluster) -> Option<u64> {
    let has_deps = plan.transfers.iter().enumerate().any(|(id, t)| plan.deps_of(t).iter().any(|&d| (d as usize) < id));
    if has_deps {
        return None;
    }
    let mut dense = DenseLinks::new(cluster);
    let mut link_bw: Vec<u64> = empty(0);
    let mut load: Vec<u64> = empty(0);
    let mut link_alpha: Vec<u64> = empty(0);
    let mut latest = 0u64;
    for t in &plan.transfers {
        let alpha = cluster.alpha_ns(t.tier);
        latest = latest.max(alpha);
        let bytes = plan.transfer_bytes(t);
        if bytes == 0 {
            continue;
        }
        route(cluster, t.src, t.dst, t.tier, |kind, server, a, b, bw, half| {
            let l = dense.get(kind, server, a, b, bw, &mut link_bw) as usize;
            if l == load.len() {
                load.push(0);
                link_alpha.push(alpha);
            }
            load[l] = load[l].saturating_add(if half { bytes.div_ceil(2) } else { bytes });
        });
    }
    for l in 0..load.len() {
        latest = latest.max(link_alpha[l].saturating_add(drain_ns(load[l], link_bw[l])));
    }
    give(dense.id);
    give(link_bw);
    give(load);
    give(link_alpha);
    Some(latest)
}

/// Predicted finish time of every transfer, integer nanoseconds.
pub fn predict_finish_ns(plan: &Plan, cluster: &Cluster) -> Vec<u64> {
    let model = Model::new(plan, cluster);
    let mut order = empty(0);
    let pass = model.run(None, &mut order);
    let pass = match model.interference(&pass.finish, &pass.release, &order) {
        Some(extra) => {
            let second = model.run(Some((&extra, &pass)), &mut order);
            give(extra);
            second
        }
        None => pass,
    };
    give(order);
    pass.into_finish()
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
    let model = Routes::new(plan, cluster);
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


/// Each transfer's links (dense ids in order of first use) and the bytes it puts on each.
struct Routes {
    /// Per transfer: an antipodal ring transfer, half its bytes each way.
    half: Vec<bool>,
    /// Transfer id → its slots (`slot_begin[id]..slot_begin[id + 1]`): one per link it uses.
    slot_begin: Vec<usize>,
    /// Per slot: dense link id and the bytes the transfer puts on the link.
    slot_link: Vec<u32>,
    slot_bytes: Vec<u64>,
    /// Per dense link: its bandwidth.
    link_bw: Vec<u64>,
}

impl Routes {
    /// Per dense link: `Drain` for its bandwidth.
    fn drains(&self) -> Vec<Drain> {
        self.link_bw.iter().map(|&bw| Drain::new(bw)).collect()
    }
}

impl Routes {
    fn new(plan: &Plan, cluster: &Cluster) -> Routes {
        let m = plan.transfers.len();
        let mut r = Routes {
            half: filled(m, false),
            slot_begin: empty(m + 1),
            slot_link: empty(2 * m),
            slot_bytes: empty(2 * m),
            link_bw: empty(0),
        };
        let mut dense = DenseLinks::new(cluster);
        // Scale-out and switch transfers (nearly all of them) take their two links from a
        // per-rank NIC table: `global_nic_of` divides twice per rank, a fifth of this pass.
        let ranks = cluster.num_gpus();
        let mut nic = empty(ranks as usize);
        nic.extend((0..ranks).map(|x| cluster.global_nic_of(x)));
        let port_bw = match cluster.scaleup {
            ScaleUp::Switch { port_bw } => Some(port_bw),
            _ => None,
        };
        for (id, t) in plan.transfers.iter().enumerate() {
            let bytes = plan.transfer_bytes(t);
            r.slot_begin.push(r.slot_link.len());
            let Routes { half, slot_link, slot_bytes, link_bw, .. } = &mut r;
            let two = match (t.tier, port_bw) {
                _ if t.src >= ranks || t.dst >= ranks => None,
                (Tier::ScaleOut, _) => Some((KIND_NIC_UP, KIND_NIC_DOWN, nic[t.src as usize], nic[t.dst as usize], cluster.nic_bw)),
                (Tier::ScaleUp, Some(port_bw)) => Some((KIND_PORT_OUT, KIND_PORT_IN, t.src, t.dst, port_bw)),
                _ => None,
            };
            if let Some((out, into, a, b, bw)) = two {
                // As `route` emits them.
                slot_link.push(dense.get(out, 0, 0, a, bw, link_bw));
                slot_link.push(dense.get(into, 0, 0, b, bw, link_bw));
                slot_bytes.extend([bytes, bytes]);
                continue;
            }
            route(cluster, t.src, t.dst, t.tier, |kind, server, a, b, bw, h| {
                slot_link.push(dense.get(kind, server, a, b, bw, link_bw));
                slot_bytes.push(if h { bytes.div_ceil(2) } else { bytes });
                half[id] |= h;
            });
        }
        r.slot_begin.push(r.slot_link.len());
        give(dense.id);
        give(nic);
        r
    }
}

impl Drop for Routes {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.half));
        give(std::mem::take(&mut self.slot_begin));
        give(std::mem::take(&mut self.slot_link));
        give(std::mem::take(&mut self.slot_bytes));
        give(std::mem::take(&mut self.link_bw));
    }
}

/// The closed form's fixed structure: everything that does not depend on release times,
/// computed once and shared by both passes.
struct Model<'a> {
    plan: &'a Plan,
    cluster: &'a Cluster,
    routes: Routes,
    /// Transfer ids ordered by level (stable); level `lv` is `by_level[level_start[lv]..level_start[lv + 1]]`.
    by_level: Vec<u32>,
    level_start: Vec<usize>,
    /// Slots carrying bytes, grouped by (link, level): link-major, levels ascending, each
    /// group's entries in level order (by transfer id). Group `k` is `group_slots[group_start[k]..group_start[k + 1]]`,
    /// with its slots' transfers and bytes alongside (`group_owner`, `group_bytes`: read
    /// in order, not through the slot); link `l`'s groups are `link_groups[l]..link_groups[l + 1]`.
    group_slots: Vec<u32>,
    group_owner: Vec<u32>,
    group_bytes: Vec<u64>,
    group_start: Vec<usize>,
    link_groups: Vec<usize>,
    /// Groups of each level: `level_group[level_group_start[lv]..level_group_start[lv + 1]]`.
    level_group: Vec<u32>,
    level_group_start: Vec<usize>,
    /// Per group: total bytes and its link.
    group_total: Vec<u64>,
    group_link: Vec<u32>,
    /// Per slot, what the finish of its transfer needs, in one place.
    terms: Vec<SlotTerms>,
    /// Per dense link: its bandwidth, as a divider.
    drain: Vec<Drain>,
}

impl Drop for Model<'_> {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.level_start));
        give(std::mem::take(&mut self.group_start));
        give(std::mem::take(&mut self.link_groups));
        give(std::mem::take(&mut self.level_group_start));
        give(std::mem::take(&mut self.by_level));
        give(std::mem::take(&mut self.group_slots));
        give(std::mem::take(&mut self.level_group));
        give(std::mem::take(&mut self.group_owner));
        give(std::mem::take(&mut self.group_bytes));
        give(std::mem::take(&mut self.group_total));
        give(std::mem::take(&mut self.group_link));
        give(std::mem::take(&mut self.terms));
    }
}

/// One pass of the closed form: per transfer its finish and release, per (link, level)
/// group its drain (`Model::run`). The arrays go back to the pools when dropped.
struct Pass {
    finish: Vec<u64>,
    release: Vec<u64>,
    drained: Vec<u64>,
}

impl Pass {
    /// The latest finish: the prediction.
    fn latest(&self) -> u64 {
        self.finish.iter().copied().max().unwrap_or(0)
    }
    fn into_finish(mut self) -> Vec<u64> {
        std::mem::take(&mut self.finish)
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.finish));
        give(std::mem::take(&mut self.release));
        give(std::mem::take(&mut self.drained));
    }
}

/// What one slot contributes to its transfer's finish.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SlotTerms {
    /// Processor-sharing bytes: Σ_j min(b_j, b) over its group (with equal shares a
    /// transfer of b bytes finishes once that much went through the link).
    shared: u64,
    /// Bytes of lower levels on the same link.
    below: u64,
    /// `shared / bw` and `alpha + (below + shared) / bw` (ns): the slot's terms when no
    /// later level's bytes share its link (every slot in the first pass), computed once.
    shared_ns: u64,
    behind_ns: u64,
    link: u32,
    /// Its (link, level) group; `NO_GROUP` for a slot without bytes.
    group: u32,
}

const NO_GROUP: u32 = u32::MAX;

/// Links with at most this many slots (or few levels) take the merge path of `interference`.
const MERGE_MAX_SLOTS: usize = 256;

/// Larger links merge too while the merge path's rebuilds stay within this many slot
/// moves per slot (the Fenwick path's sort and tree cost about log₂ slots each).
/// FAST's pipelines release levels in order, so they rarely rebuild: at 320 GPUs merging
/// every link made FAST's prediction 40–47 → 29 ms.
const MERGE_REBUILD_PER_SLOT: usize = 8;

/// Working arrays of `Model::interference`, reused across links.
#[derive(Default)]
struct Interference {
    later: Vec<(u64, u64)>,
    merged: Vec<(u64, u64)>,
    level: Vec<(u64, u64)>,
    sums: Vec<u128>,
    by_release: Vec<(u64, u32)>,
    releases: Vec<u64>,
    pos: Vec<u32>,
    tree_bytes: Vec<u64>,
    tree_count: Vec<u64>,
}

/// Stable counting sort of `0..keys.len()` restricted to `items` by `keys`: the bucket
/// bounds (`buckets + 1` entries) and the sorted items.
fn counting_sort(items: impl Iterator<Item = u32> + Clone, buckets: usize, key: impl Fn(u32) -> usize) -> (Vec<usize>, Vec<u32>) {
    let mut start = filled(buckets + 1, 0usize);
    for x in items.clone() {
        start[key(x) + 1] += 1;
    }
    for b in 0..buckets {
        start[b + 1] += start[b];
    }
    let mut fill = empty(buckets);
    fill.extend_from_slice(&start[..buckets]);
    let mut out = filled(start[buckets], 0u32);
    for x in items {
        let k = key(x);
        out[fill[k]] = x;
        fill[k] += 1;
    }
    give(fill);
    (start, out)
}

impl<'a> Model<'a> {
    fn new(plan: &'a Plan, cluster: &'a Cluster) -> Model<'a> {
        let m = plan.transfers.len();
        let routes = Routes::new(plan, cluster);
        let mut level = filled(m, 0u32);
        let mut levels = 0usize;
        for (id, t) in plan.transfers.iter().enumerate() {
            level[id] = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| level[d as usize] + 1).max().unwrap_or(0);
            levels = levels.max(level[id] as usize + 1);
        }
        let (level_start, by_level) = counting_sort(0..m as u32, levels, |id| level[id as usize] as usize);
        let links = routes.link_bw.len();
        let slots = routes.slot_link.len();
        // Slots with bytes by link (a counting sort), filled in level order so levels
        // ascend within a link: these arrays become the groups' (a group's entries stay in
        // level order, by transfer id; nothing reads them in any other order).
        let mut link_start: Vec<usize> = filled(links + 1, 0);
        for k in 0..slots {
            if routes.slot_bytes[k] > 0 {
                link_start[routes.slot_link[k] as usize + 1] += 1;
            }
        }
        for l in 0..links {
            link_start[l + 1] += link_start[l];
        }
        let items = link_start[links];
        let mut fill: Vec<usize> = empty(links);
        fill.extend_from_slice(&link_start[..links]);
        let (mut group_slots, mut group_owner, mut group_bytes, mut item_level) = (filled(items, 0u32), filled(items, 0u32), filled(items, 0u64), filled(items, 0u32));
        for &id in &by_level {
            let lv = level[id as usize];
            for k in routes.slot_begin[id as usize]..routes.slot_begin[id as usize + 1] {
                let bytes = routes.slot_bytes[k];
                if bytes > 0 {
                    let l = routes.slot_link[k] as usize;
                    let at = fill[l];
                    fill[l] += 1;
                    (group_slots[at], group_owner[at], group_bytes[at], item_level[at]) = (k as u32, id, bytes, lv);
                }
            }
        }
        give(fill);
        give(level);
        // Split each link's run into (link, level) groups and fill every slot's terms.
        let drain = routes.drains();
        let mut terms = filled(slots, SlotTerms { group: NO_GROUP, ..SlotTerms::default() });
        let mut group_start: Vec<usize> = empty(links + 1);
        let mut group_level: Vec<u32> = empty(links + 1);
        let mut link_groups: Vec<usize> = empty(links + 1);
        let mut group_total: Vec<u64> = empty(links + 1);
        let mut group_link: Vec<u32> = empty(links + 1);
        let (mut sorted, mut below_sorted): (Vec<u64>, Vec<u64>) = (empty(0), empty(0));
        for l in 0..links {
            link_groups.push(group_start.len());
            let (bw, end) = (drain[l], link_start[l + 1]);
            // Bytes of the link's lower levels (saturating, as every sum here).
            let mut below = 0u64;
            let mut i = link_start[l];
            while i < end {
                let (g0, lv) = (i, item_level[i]);
                while i < end && item_level[i] == lv {
                    i += 1;
                }
                let gi = group_start.len() as u32;
                group_start.push(g0);
                group_level.push(lv);
                group_link.push(l as u32);
                // Processor-sharing bytes of an entry of b bytes: Σ_j min(b_j, b) over the
                // group = (bytes of entries below b) + b · (entries of at least b).
                let bytes = &group_bytes[g0..i];
                let n = bytes.len();
                let equal = bytes.iter().all(|&b| b == bytes[0]);
                let total;
                if equal {
                    total = bytes[0].saturating_mul(n as u64);
                } else {
                    sorted.clear();
                    sorted.extend_from_slice(bytes);
                    sorted.sort_unstable();
                    below_sorted.clear();
                    let mut acc = 0u64;
                    for &b in sorted.iter() {
                        below_sorted.push(acc);
                        acc = acc.saturating_add(b);
                    }
                    total = acc;
                }
                for j in g0..i {
                    let b = group_bytes[j];
                    let shared = if equal {
                        total
                    } else {
                        let p = sorted.partition_point(|&x| x < b);
                        below_sorted[p].saturating_add(b.saturating_mul((n - p) as u64))
                    };
                    let alpha = cluster.alpha_ns(plan.transfers[group_owner[j] as usize].tier);
                    terms[group_slots[j] as usize] = SlotTerms {
                        shared,
                        below,
                        shared_ns: bw.ns(shared),
                        behind_ns: alpha.saturating_add(bw.ns(below.saturating_add(shared))),
                        link: l as u32,
                        group: gi,
                    };
                }
                group_total.push(total);
                below = below.saturating_add(total);
            }
        }
        link_groups.push(group_start.len());
        let groups = group_level.len();
        group_start.push(items);
        give(link_start);
        give(item_level);
        give(sorted);
        give(below_sorted);
        let (level_group_start, level_group) = counting_sort(0..groups as u32, levels, |gi| group_level[gi as usize] as usize);
        give(group_level);
        Model { plan, cluster, by_level, level_start, group_slots, group_owner, group_bytes, group_start, link_groups, level_group, level_group_start, group_total, group_link, terms, drain, routes }
    }

    /// Finish and release times, level by level. The second pass gets `(extra, first)`:
    /// `extra[slot]`, bytes of later levels that share the slot's link while its transfer
    /// runs, and the first pass, whose drain it reuses for groups whose releases did not
    /// change (at 64 GPUs most of FAST's: only ~12% of its finishes move). `order`: each
    /// group's entries (indices into `group_*`) latest release first, which the drain needs
    /// and `interference` reuses; the first pass fills it, the second starts from it (its
    /// releases mostly keep their order, so the sort has little to do).
    fn run(&self, second: Option<(&[u64], &Pass)>, order: &mut Vec<u32>) -> Pass {
        let (plan, r, m) = (self.plan, &self.routes, self.plan.transfers.len());
        let extra = second.map(|s| s.0);
        let mut finish = filled(m, 0u64);
        let mut release = filled(m, 0u64);
        // Per group: the link's work-conserving completion over the level.
        let mut drained = filled(self.group_total.len(), 0u64);
        let mut by_release: Vec<(u64, u32)> = Vec::new();
        if extra.is_none() || order.len() != self.group_owner.len() {
            order.clear();
            order.extend(0..self.group_owner.len() as u32);
        }
        for lv in 0..self.level_start.len() - 1 {
            let transfers = &self.by_level[self.level_start[lv]..self.level_start[lv + 1]];
            for &id in transfers {
                let id = id as usize;
                let t = &plan.transfers[id];
                let ready = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| finish[d as usize]).max().unwrap_or(0);
                release[id] = ready.saturating_add(self.cluster.alpha_ns(t.tier));
            }
            for &gi in &self.level_group[self.level_group_start[lv]..self.level_group_start[lv + 1]] {
                let gi = gi as usize;
                let (g0, g1) = (self.group_start[gi], self.group_start[gi + 1]);
                let (owners, bytes) = (&self.group_owner[g0..g1], &self.group_bytes[g0..g1]);
                let bw = self.drain[self.group_link[gi] as usize];
                // max_j (release_j + bytes released at or after release_j / bw).
                let r0 = release[owners[0] as usize];
                // The same releases as in the first pass: the same drain (and order).
                let unchanged = second.filter(|(_, first)| owners.iter().all(|&o| release[o as usize] == first.release[o as usize]));
                drained[gi] = if let Some((_, first)) = unchanged {
                    first.drained[gi]
                } else if owners.iter().all(|&o| release[o as usize] == r0) {
                    r0.saturating_add(bw.ns(self.group_total[gi]))
                } else {
                    by_release.clear();
                    by_release.extend(order[g0..g1].iter().map(|&i| (release[self.group_owner[i as usize] as usize], i)));
                    // Latest release first; ties in any order give the same maximum. Short
                    // groups by insertion, which is quick on the second pass's nearly
                    // sorted start.
                    if by_release.len() <= 32 {
                        for k in 1..by_release.len() {
                            let x = by_release[k];
                            let mut j = k;
                            while j > 0 && by_release[j - 1].0 < x.0 {
                                by_release[j] = by_release[j - 1];
                                j -= 1;
                            }
                            by_release[j] = x;
                        }
                    } else {
                        by_release.sort_unstable_by_key(|x| std::cmp::Reverse(x.0));
                    }
                    order[g0..g1].iter_mut().zip(&by_release).for_each(|(o, x)| *o = x.1);
                    let (mut acc, mut done) = (0u64, 0u64);
                    for &(at, i) in &by_release {
                        acc = acc.saturating_add(bytes[i as usize - g0]);
                        done = done.max(at.saturating_add(bw.ns(acc)));
                    }
                    done
                };
            }
            for &id in transfers {
                let id = id as usize;
                let mut f = release[id];
                for slot in r.slot_begin[id]..r.slot_begin[id + 1] {
                    let t = self.terms[slot];
                    if t.group == NO_GROUP {
                        continue; // no bytes on this link
                    }
                    let more = extra.map_or(0, |e| e[slot]);
                    let drained = drained[t.group as usize];
                    // Bytes of lower levels on the same link go first (released earlier): `behind`.
                    let (own_level, behind) = if more == 0 {
                        (drained.min(release[id].saturating_add(t.shared_ns)), t.behind_ns)
                    } else {
                        let bw = self.drain[t.link as usize];
                        let alpha = self.cluster.alpha_ns(plan.transfers[id].tier);
                        let mine = t.shared.saturating_add(more);
                        (drained.saturating_add(bw.ns(more)).min(release[id].saturating_add(bw.ns(mine))), alpha.saturating_add(bw.ns(t.below.saturating_add(mine))))
                    };
                    f = f.max(own_level).max(behind);
                }
                finish[id] = f;
            }
        }
        Pass { finish, release, drained }
    }

    /// Later levels' bytes that overlap each slot's transfer on its link, from a first
    /// pass's times: transfers of later levels released before a finishes share the link
    /// with a. Under processor sharing each counts up to a's size; the estimate used is
    /// min(their bytes, their count · a's bytes). Per link, the levels are taken from the
    /// last: the later levels' slots are kept sorted by release with prefix sums of their
    /// bytes (a level is merged in once the levels below it need it), so each query is a
    /// binary search. Phases that are meant to overlap (FAST's own bytes beside
    /// balanced-in bytes, pipelined stages) slow each other down; the first pass only
    /// made later levels wait. None if no link carries several levels.
    fn interference(&self, finish: &[u64], release: &[u64], order: &[u32]) -> Option<Vec<u64>> {
        self.interference_by(finish, release, order, |g0, g1| self.merge_pays(g0, g1, release))
    }

    /// Whether the merge path is the cheaper one on the link of groups `g0..g1`. It costs
    /// O(slots) plus, for each level that is not released entirely before the levels after
    /// it, a rebuild over those levels' slots; the Fenwick path costs O(slots · log slots)
    /// with larger constants. Small links or few levels always merge.
    fn merge_pays(&self, g0: usize, g1: usize, release: &[u64]) -> bool {
        let slots = self.group_start[g1] - self.group_start[g0];
        if g1 - g0 <= 4 || slots <= MERGE_MAX_SLOTS {
            return true;
        }
        let (mut earliest, mut later, mut rebuild) = (u64::MAX, 0usize, 0usize);
        for gi in (g0 + 1..g1).rev() {
            let (s0, s1) = (self.group_start[gi], self.group_start[gi + 1]);
            let (mut lo, mut hi) = (u64::MAX, 0u64);
            for &o in &self.group_owner[s0..s1] {
                let r = release[o as usize];
                lo = lo.min(r);
                hi = hi.max(r);
            }
            if later > 0 && hi > earliest {
                rebuild += later + (s1 - s0);
            }
            earliest = earliest.min(lo);
            later += s1 - s0;
        }
        rebuild <= MERGE_REBUILD_PER_SLOT * slots
    }

    /// `interference`, merging on the links (groups `g0..g1`) where `merge(g0, g1)` says so.
    fn interference_by(&self, finish: &[u64], release: &[u64], order: &[u32], merge: impl Fn(usize, usize) -> bool) -> Option<Vec<u64>> {
        let slots = self.terms.len();
        let mut extra: Option<Vec<u64>> = None;
        let mut scratch = Interference::default();
        for l in 0..self.link_groups.len() - 1 {
            let (g0, g1) = (self.link_groups[l], self.link_groups[l + 1]);
            if g1 - g0 < 2 {
                continue; // one level (or none) on this link
            }
            let mut add = |i: usize, bytes: u64| {
                extra.get_or_insert_with(|| filled(slots, 0u64))[self.group_slots[i] as usize] = bytes;
            };
            if merge(g0, g1) {
                self.interference_merged(g0, g1, finish, release, order, &mut scratch, &mut add);
            } else {
                self.interference_tree(g0, g1, finish, release, &mut scratch, &mut add);
            }
        }
        extra
    }

    /// `interference` on one link's groups `g0..g1` (levels ascending): the later levels'
    /// slots kept sorted by release, latest first, with running sums of their bytes, so
    /// the slots released before a finish are a tail and each query is a binary search.
    /// Levels come from the last; a level released no later than everything after it (in
    /// pipelines nearly always: 98% of FAST's levels at 64 GPUs) is appended at the tail in
    /// O(its slots); otherwise it is merged in and the sums rebuilt. The sums are exact
    /// (u128) and saturated only when read, as a saturating prefix sum would give.
    #[allow(clippy::too_many_arguments)]
    fn interference_merged(&self, g0: usize, g1: usize, finish: &[u64], release: &[u64], order: &[u32], w: &mut Interference, add: &mut impl FnMut(usize, u64)) {
        let Interference { later, merged, level, sums, .. } = w;
        // later[k] in descending release; sums[k] = bytes of later[..k].
        later.clear();
        sums.clear();
        sums.push(0);
        for gi in (g0..g1).rev() {
            let (s0, s1) = (self.group_start[gi], self.group_start[gi + 1]);
            if let Some(&(earliest, _)) = later.last() {
                let total = *sums.last().expect("sums has one more entry than later");
                for i in s0..s1 {
                    let fa = finish[self.group_owner[i] as usize];
                    if fa <= earliest {
                        continue; // every later transfer is released after a finishes
                    }
                    // Released before a finishes: later[k..].
                    let k = later.partition_point(|x| x.0 >= fa);
                    let p = (later.len() - k) as u64;
                    let before = (total - sums[k]).min(u64::MAX as u128) as u64;
                    let bytes = before.min(p.saturating_mul(self.group_bytes[i]));
                    if bytes > 0 {
                        add(i, bytes);
                    }
                }
            }
            if gi > g0 {
                // The group latest release first, as the pass that gave `release` ordered it.
                level.clear();
                level.extend(order[s0..s1].iter().map(|&i| (release[self.group_owner[i as usize] as usize], self.group_bytes[i as usize])));
                if later.last().is_none_or(|&(earliest, _)| level[0].0 <= earliest) {
                    for &x in level.iter() {
                        sums.push(sums[sums.len() - 1] + x.1 as u128);
                        later.push(x);
                    }
                } else {
                    merged.clear();
                    let (mut i, mut j) = (0, 0);
                    while i < later.len() || j < level.len() {
                        if j == level.len() || (i < later.len() && later[i].0 >= level[j].0) {
                            merged.push(later[i]);
                            i += 1;
                        } else {
                            merged.push(level[j]);
                            j += 1;
                        }
                    }
                    std::mem::swap(later, merged);
                    sums.truncate(1);
                    for &x in later.iter() {
                        sums.push(sums[sums.len() - 1] + x.1 as u128);
                    }
                }
            }
        }
    }

    /// `interference` on one link's groups `g0..g1` (levels ascending) with Fenwick trees
    /// of bytes and counts over release order: levels from the last, each queried against
    /// the strictly later ones already inserted, then inserted.
    fn interference_tree(&self, g0: usize, g1: usize, finish: &[u64], release: &[u64], w: &mut Interference, add: &mut impl FnMut(usize, u64)) {
        let Interference { by_release, releases, pos, tree_bytes, tree_count, .. } = w;
        let (base, end) = (self.group_start[g0], self.group_start[g1]);
        let n = end - base;
        by_release.clear();
        by_release.extend((base..end).map(|i| (release[self.group_owner[i] as usize], i as u32)));
        by_release.sort_unstable();
        releases.clear();
        releases.extend(by_release.iter().map(|x| x.0));
        pos.clear();
        pos.resize(n, 0);
        for (r, &(_, i)) in by_release.iter().enumerate() {
            pos[i as usize - base] = r as u32;
        }
        tree_bytes.clear();
        tree_bytes.resize(n + 1, 0);
        tree_count.clear();
        tree_count.resize(n + 1, 0);
        for gi in (g0..g1).rev() {
            let (s0, s1) = (self.group_start[gi], self.group_start[gi + 1]);
            for i in s0..s1 {
                let fa = finish[self.group_owner[i] as usize];
                let mut p = releases.partition_point(|&x| x < fa);
                let (mut sum, mut cnt) = (0u64, 0u64);
                while p > 0 {
                    sum = sum.saturating_add(tree_bytes[p]);
                    cnt += tree_count[p];
                    p &= p - 1;
                }
                let bytes = sum.min(cnt.saturating_mul(self.group_bytes[i]));
                if bytes > 0 {
                    add(i, bytes);
                }
            }
            for i in s0..s1 {
                let b = self.group_bytes[i];
                let mut p = pos[i - base] as usize + 1;
                while p <= n {
                    tree_bytes[p] = tree_bytes[p].saturating_add(b);
                    tree_count[p] += 1;
                    p += p & p.wrapping_neg();
                }
            }
        }
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

    /// Both ways of computing the interference give the same bytes on every slot.
    #[test]
    fn interference_merge_and_tree_agree() {
        let mut checked = 0;
        // h200:20: FAST's links carry > 256 slots over many levels (merge_pays decides there).
        for (spec, seed) in [("h200:4", 1u64), ("h200:3,gpus=4,nics=2", 2), ("mi250:2", 3), ("v100:2", 4), ("mi300x:3", 5), ("h200:20", 6)] {
            let c = Cluster::parse(spec).unwrap();
            let n = c.num_gpus() as usize;
            let t = generators::zipf(n, 0.9, 1 << 20, seed).unwrap();
            for alg in ["fast", "balanced_direct", "sabre_light", "sabre_skewed", "hierarchical"] {
                let Ok(p) = crate::algo::plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
                let model = Model::new(&p, &c);
                let mut order = Vec::new();
                let Pass { ref finish, ref release, .. } = model.run(None, &mut order);
                let merged = model.interference_by(finish, release, &order, |_, _| true);
                let tree = model.interference_by(finish, release, &order, |_, _| false);
                assert_eq!(merged, tree, "{spec} {alg}");
                assert_eq!(model.interference(finish, release, &order), tree, "{spec} {alg}");
                checked += merged.is_some() as usize;
            }
        }
        assert!(checked >= 5, "interference found on {checked} plans");
    }

    /// The one-pass prediction of dependency-free plans equals the full model's.
    #[test]
    fn single_level_shortcut_matches_the_model() {
        let mut used = 0;
        for (spec, seed) in [("h200:4", 1u64), ("h200:3,gpus=4,nics=2", 2), ("mi250:2", 3), ("v100:2", 4), ("mi300x:3", 5), ("perlmutter:1", 6)] {
            let c = Cluster::parse(spec).unwrap();
            let n = c.num_gpus() as usize;
            let mut sparse = generators::uniform(n, 1 << 16, seed).unwrap();
            for i in 0..n {
                sparse.set(i, (i * 7 + 3) % n, 0);
            }
            for t in [generators::zipf(n, 0.9, 1 << 20, seed).unwrap(), sparse] {
                for alg in crate::algo::auto::CANDIDATES {
                    let Ok(p) = crate::algo::plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
                    let full = predict_finish_ns(&p, &c).into_iter().max().unwrap_or(0);
                    if let Some(ns) = single_level_ns(&p, &c) {
                        assert_eq!(ns, full, "{spec} {alg}");
                        used += 1;
                    }
                    assert_eq!(predict_ns(&p, &c), full, "{spec} {alg}");
                }
            }
        }
        assert!(used >= 12, "{used}");
    }

    /// The first pass bounds the prediction from below, so stopping there prunes safely.
    #[test]
    fn first_pass_bounds_the_prediction() {
        let mut stopped = 0;
        for (spec, seed) in [("h200:4", 1u64), ("h200:3,gpus=4,nics=2", 2), ("mi250:2", 3), ("v100:2", 4), ("mi300x:3", 5), ("perlmutter:3", 6)] {
            let c = Cluster::parse(spec).unwrap();
            let n = c.num_gpus() as usize;
            for t in [generators::zipf(n, 0.9, 1 << 20, seed).unwrap(), generators::uniform(n, 1 << 16, seed).unwrap()] {
                for alg in crate::algo::auto::CANDIDATES {
                    let Ok(p) = crate::algo::plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
                    let ns = predict_ns(&p, &c);
                    assert_eq!(predict_or_bound_ns(&p, &c, u64::MAX), Ok(ns), "{spec} {alg}");
                    match predict_or_bound_ns(&p, &c, 0) {
                        Ok(x) => assert_eq!(x, ns),
                        Err(first) => {
                            assert!(first > 0 && first <= ns, "{spec} {alg}: first pass {first} > prediction {ns}");
                            stopped += 1;
                        }
                    }
                    if ns > 0 {
                        assert_eq!(predict_or_bound_ns(&p, &c, ns), Ok(ns), "{spec} {alg}: stopped at its own prediction");
                    }
                }
            }
        }
        assert!(stopped > 20, "{stopped}");
    }

    #[test]
    fn drain_without_division_is_exact() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let edge = [0u64, 1, 2, 3, 999_999_999, 1_000_000_000, u64::MAX / 1_000_000_000, u64::MAX / 1_000_000_000 + 1, u64::MAX];
        let bws = [0u64, 1, 2, 3, 7, 1_000_000_000, 12_500_000_000, 50_000_000_000, 450_000_000_000, u64::MAX / 3, u64::MAX];
        for &bw in &bws {
            for &b in &edge {
                assert_eq!(Drain::new(bw).ns(b), drain_ns(b, bw), "{b} bytes at {bw} B/s");
            }
        }
        for _ in 0..200_000 {
            let bw = next() >> (next() % 64);
            let bytes = next() >> (next() % 64);
            assert_eq!(Drain::new(bw).ns(bytes), drain_ns(bytes, bw), "{bytes} bytes at {bw} B/s");
        }
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
