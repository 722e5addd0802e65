//! The Plan: what every algorithm produces and every consumer (verifier,
//! simulator, executor, exporters, drawings) reads.
//!
//! Flat layout: `transfers` index ranges of the shared `segments` and `deps`
//! arrays, so a plan with millions of segments is three vectors, not a tree.
pub mod floor;
pub mod content_hash;
pub mod hash;
pub mod rank_plan;
pub mod rank_program;
pub mod serialize;
pub mod verify;

use crate::error::Result;
use crate::invalid;
use crate::topology::Tier;
use crate::traffic::Traffic;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which per-rank buffer a segment touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Buf {
    Input = 0,
    Output = 1,
    Scratch = 2,
}

impl Buf {
    pub fn from_u8(v: u8) -> Option<Buf> {
        match v {
            0 => Some(Buf::Input),
            1 => Some(Buf::Output),
            2 => Some(Buf::Scratch),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Buf::Input => "input",
            Buf::Output => "output",
            Buf::Scratch => "scratch",
        }
    }
}

/// What the receiver does with the bytes: overwrite, or add element-wise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Op {
    Copy = 0,
    ReduceSum = 1,
}

impl Op {
    pub fn from_u8(v: u8) -> Option<Op> {
        match v {
            0 => Some(Op::Copy),
            1 => Some(Op::ReduceSum),
            _ => None,
        }
    }
}

/// One contiguous piece: `len` bytes from the sender's `src_buf[src_off..]`
/// to the receiver's `dst_buf[dst_off..]`. A transfer's segments are gathered
/// into one message by the sender and scattered by the receiver (Fusco's
/// segment descriptors), so a layout change costs nothing extra.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub src_buf: Buf,
    pub src_off: u64,
    pub dst_buf: Buf,
    pub dst_off: u64,
    pub len: u64,
}

/// One message from `src` to `dst` (equal for a local copy).
/// `segs`/`deps` are half-open index ranges into `Plan::segments` / `Plan::deps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub src: u32,
    pub dst: u32,
    pub op: Op,
    pub tier: Tier,
    /// Synchronous execution order: all transfers of step s run as one batch after step s-1.
    pub step: u32,
    pub seg_begin: u32,
    pub seg_end: u32,
    pub dep_begin: u32,
    pub dep_end: u32,
}

impl Transfer {
    pub fn seg_range(&self) -> std::ops::Range<usize> {
        self.seg_begin as usize..self.seg_end as usize
    }
    pub fn dep_range(&self) -> std::ops::Range<usize> {
        self.dep_begin as usize..self.dep_end as usize
    }
}

/// What the plan computes. The verifier derives the expected final buffers from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Collective {
    /// `all_to_all_single` with the given matrix.
    AllToAll { traffic: Traffic<'static> },
    /// Every rank contributes `shard_bytes`; output is all shards in rank order.
    AllGather { ranks: u32, shard_bytes: u64 },
    /// Input is `ranks × shard_bytes`; rank r's output is the element-wise sum of shard r over ranks.
    ReduceScatter { ranks: u32, shard_bytes: u64, elem_bytes: u32 },
    /// Input and output `bytes`; output is the element-wise sum of all inputs.
    AllReduce { ranks: u32, bytes: u64, elem_bytes: u32 },
}

impl Collective {
    pub fn num_ranks(&self) -> u32 {
        match self {
            Collective::AllToAll { traffic } => traffic.n() as u32,
            Collective::AllGather { ranks, .. } | Collective::ReduceScatter { ranks, .. } | Collective::AllReduce { ranks, .. } => *ranks,
        }
    }
    pub fn input_size(&self, rank: u32) -> u64 {
        match self {
            Collective::AllToAll { traffic } => traffic.row_sum(rank as usize),
            Collective::AllGather { shard_bytes, .. } => *shard_bytes,
            Collective::ReduceScatter { ranks, shard_bytes, .. } => *ranks as u64 * shard_bytes,
            Collective::AllReduce { bytes, .. } => *bytes,
        }
    }
    pub fn output_size(&self, rank: u32) -> u64 {
        match self {
            Collective::AllToAll { traffic } => traffic.col_sum(rank as usize),
            Collective::AllGather { ranks, shard_bytes } => *ranks as u64 * shard_bytes,
            Collective::ReduceScatter { shard_bytes, .. } => *shard_bytes,
            Collective::AllReduce { bytes, .. } => *bytes,
        }
    }
    /// `input_size` of every rank.
    pub fn input_sizes(&self) -> Vec<u64> {
        match self {
            Collective::AllToAll { traffic } => traffic.input_sizes(),
            _ => (0..self.num_ranks()).map(|r| self.input_size(r)).collect(),
        }
    }
    /// `output_size` of every rank.
    pub fn output_sizes(&self) -> Vec<u64> {
        match self {
            Collective::AllToAll { traffic } => traffic.output_sizes(),
            _ => (0..self.num_ranks()).map(|r| self.output_size(r)).collect(),
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            Collective::AllToAll { .. } => "all_to_all",
            Collective::AllGather { .. } => "allgather",
            Collective::ReduceScatter { .. } => "reduce_scatter",
            Collective::AllReduce { .. } => "allreduce",
        }
    }
}

/// Steps a plan may have (`check_shape`): the simulator and its report keep state per step,
/// so a corrupt step number must not make them allocate for billions of steps. Producers
/// use a few thousand at most (spreadout: one per rank).
pub const MAX_STEPS: u32 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
// A misspelt or foreign field in a plan file is refused rather than silently dropped.
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Producer name, e.g. "fanout" or "fast".
    pub algorithm: String,
    pub collective: Collective,
    /// GPUs per server of the cluster planned for (tiers are checked against it).
    pub gpus_per_server: u32,
    /// Scratch bytes each rank must provide.
    pub scratch_bytes: Vec<u64>,
    pub transfers: Vec<Transfer>,
    pub segments: Vec<Segment>,
    pub deps: Vec<u32>,
    /// Hash of everything the plan was computed from (matrix, cluster, algorithm, options).
    pub input_hash: u64,
    /// Producer facts for people and selectors: stage count, choice and reason, predicted time.
    pub meta: BTreeMap<String, String>,
    /// Digest of the producer's decisions with the inputs mixed in (`RankPlan::digest`, see
    /// `algo::plan_for_rank`); 0 when the plan has none. Not part of the plan's content:
    /// its hash, JSON and binary forms leave it out, so a plan read back has none.
    #[serde(skip)]
    pub decisions_digest: u64,
}

impl Plan {
    pub fn num_ranks(&self) -> u32 {
        self.collective.num_ranks()
    }
    /// One more than the largest step (saturating: `check_shape` bounds steps by
    /// `MAX_STEPS`, but this is also asked of plans not yet checked).
    pub fn num_steps(&self) -> u32 {
        self.transfers.iter().map(|t| t.step.saturating_add(1)).max().unwrap_or(0)
    }
    pub fn segments_of(&self, t: &Transfer) -> &[Segment] {
        &self.segments[t.seg_range()]
    }
    pub fn deps_of(&self, t: &Transfer) -> &[u32] {
        &self.deps[t.dep_range()]
    }
    /// Whether the plan runs as a backend's collective kernels (allgather, reduce-scatter,
    /// allreduce: the ring, tree and forest producers) rather than as point-to-point sends
    /// (all-to-all, MoE dispatch/combine). The hardware model's collective-kernel terms
    /// (`coll_eff_*`, the low-latency protocol) apply to the former only.
    pub fn is_collective_kernel(&self) -> bool {
        !matches!(self.collective, Collective::AllToAll { .. })
    }
    /// Bytes carried by one transfer.
    pub fn transfer_bytes(&self, t: &Transfer) -> u64 {
        self.segments_of(t).iter().map(|s| s.len).sum()
    }
    /// Bytes moved on each tier, indexed by `Tier as usize`. 128-bit: a plan that relays
    /// bytes moves more than its matrix holds, which can pass 2^64.
    pub fn bytes_per_tier(&self) -> [u128; 3] {
        let mut b = [0u128; 3];
        for t in &self.transfers {
            b[t.tier as usize] += u128::from(self.transfer_bytes(t));
        }
        b
    }
    /// Bytes the transfer, segment and dependency arrays take in memory (what a planner
    /// writes; the matrix the plan carries is not counted).
    pub fn array_bytes(&self) -> usize {
        use std::mem::size_of;
        self.transfers.len() * size_of::<Transfer>() + self.segments.len() * size_of::<Segment>() + self.deps.len() * size_of::<u32>()
    }
}

/// Builds a Plan transfer by transfer. Producers call `transfer()` and get the id to depend on.
/// Built `for_rank`, it keeps only one rank's transfers (`finish_rank`): the same producer
/// code then expands one rank's part of the plan without writing the others'.
pub struct PlanBuilder {
    plan: Plan,
    one: Option<Box<OneRank>>,
}

/// What a builder `for_rank` keeps: the rank's part, which ids it takes part in (to restrict
/// deps) and the next id.
struct OneRank {
    out: rank_plan::RankPlan,
    next_id: u32,
    mine: Vec<u64>,
}

impl PlanBuilder {
    pub fn new(algorithm: &str, collective: Collective, gpus_per_server: u32) -> PlanBuilder {
        let n = collective.num_ranks() as usize;
        PlanBuilder {
            plan: Plan {
                algorithm: algorithm.to_string(),
                collective,
                gpus_per_server,
                scratch_bytes: vec![0; n],
                transfers: Vec::new(),
                segments: Vec::new(),
                deps: Vec::new(),
                input_hash: 0,
                meta: BTreeMap::new(),
                decisions_digest: 0,
            },
            one: None,
        }
    }
    /// A builder that keeps only `rank`'s transfers (see `finish_rank`) of a plan for
    /// `num_ranks` ranks; the rank's buffer sizes are given (its collective is not kept).
    pub fn for_rank(algorithm: &str, num_ranks: u32, gpus_per_server: u32, rank: u32, input_bytes: u64, output_bytes: u64) -> PlanBuilder {
        let mut b = PlanBuilder::new(algorithm, Collective::AllGather { ranks: num_ranks, shard_bytes: 0 }, gpus_per_server);
        let mut out = rank_plan::RankPlan::empty(algorithm, rank, num_ranks, gpus_per_server, 0);
        out.input_bytes = input_bytes;
        out.output_bytes = output_bytes;
        b.one = Some(Box::new(OneRank { out, next_id: 0, mine: Vec::new() }));
        b
    }
    /// Whether this builder keeps one rank only, and which.
    pub fn rank(&self) -> Option<u32> {
        self.one.as_ref().map(|o| o.out.rank)
    }
    /// The rank's part of the plan of a builder made `for_rank` (its digest left 0, its
    /// moving pairs only if the producer set them), with the plan's meta; None for a
    /// whole-plan builder.
    pub fn finish_rank(self) -> Option<(rank_plan::RankPlan, BTreeMap<String, String>)> {
        let mut one = self.one?;
        one.out.scratch_bytes = self.plan.scratch_bytes[one.out.rank as usize];
        one.out.finish();
        Some((one.out, self.plan.meta))
    }
    /// One-rank mode: record transfer `id` over the staged lists from `seg_begin` and
    /// `dep_begin`, keep it if the rank takes part, then drop the staged lists.
    fn keep_one(&mut self, t: Transfer) -> u32 {
        let (one, p) = (self.one.as_mut().expect("one-rank mode"), &mut self.plan);
        let id = one.next_id;
        one.next_id += 1;
        let (segs, deps) = (&p.segments[t.seg_range()], &p.deps[t.dep_range()]);
        let r = one.out.rank;
        if t.src == r || t.dst == r {
            if one.mine.len() <= id as usize / 64 {
                one.mine.resize(id as usize / 64 + 1, 0);
            }
            one.mine[id as usize / 64] |= 1 << (id % 64);
            let mine = &one.mine;
            // Filtered straight into the rank plan (no list allocated per kept transfer).
            one.out.push_filtered(id, &t, segs, deps, |d| mine.get(d as usize / 64).is_some_and(|w| w >> (d % 64) & 1 == 1));
        }
        p.segments.truncate(t.seg_begin as usize);
        p.deps.truncate(t.dep_begin as usize);
        id
    }
    pub fn collective(&self) -> &Collective {
        &self.plan.collective
    }
    /// Reserve room for `transfers` and `segments` more entries, in the arrays of a
    /// recycled plan when one of a fitting size is pooled (see `recycle`).
    pub fn reserve(&mut self, transfers: usize, segments: usize) {
        if self.one.is_some() {
            return;
        }
        if let Ok(mut pool) = RECYCLED.lock() {
            reuse(&mut self.plan.transfers, &mut pool.transfers, transfers);
            reuse(&mut self.plan.segments, &mut pool.segments, segments);
        }
        self.plan.transfers.reserve(transfers);
        self.plan.segments.reserve(segments);
    }
    /// Reserve room for `deps` more dependency ids (growth copies the whole array).
    pub fn reserve_deps(&mut self, deps: usize) {
        if self.one.is_some() {
            return;
        }
        if let Ok(mut pool) = RECYCLED.lock() {
            reuse(&mut self.plan.deps, &mut pool.deps, deps);
        }
        self.plan.deps.reserve(deps);
    }
    /// Make sure `rank` has at least `bytes` of scratch.
    pub fn need_scratch(&mut self, rank: u32, bytes: u64) {
        let s = &mut self.plan.scratch_bytes[rank as usize];
        *s = (*s).max(bytes);
    }
    /// Append a transfer and return its id. Empty segments are dropped; a transfer
    /// left with no segment is still recorded (it may order others) only if it has deps
    /// or is explicitly wanted, so callers should skip empty transfers themselves.
    #[inline]
    pub fn transfer(&mut self, src: u32, dst: u32, op: Op, tier: Tier, step: u32, segs: &[Segment], deps: &[u32]) -> u32 {
        let p = &mut self.plan;
        let id = p.transfers.len() as u32;
        let seg_begin = p.segments.len() as u32;
        // Element loops, not extend/extend_from_slice: lists are a few entries long, where a
        // memcpy call or a filter adapter costs more than the copy.
        for s in segs {
            if s.len > 0 {
                p.segments.push(*s);
            }
        }
        let dep_begin = p.deps.len() as u32;
        for &d in deps {
            p.deps.push(d);
        }
        let (seg_end, dep_end) = (p.segments.len() as u32, p.deps.len() as u32);
        let t = Transfer { src, dst, op, tier, step, seg_begin, seg_end, dep_begin, dep_end };
        if self.one.is_some() {
            return self.keep_one(t);
        }
        p.transfers.push(t);
        id
    }
    /// The segment and dependency arrays, for producers that write a transfer's lists in
    /// place (no staging copy) and then call `close_transfer`.
    #[inline]
    pub fn lists_mut(&mut self) -> (&mut Vec<Segment>, &mut Vec<u32>) {
        (&mut self.plan.segments, &mut self.plan.deps)
    }
    /// Append a transfer over the segments from `seg_begin` and the deps from `dep_begin`
    /// to the ends of the arrays (pushed through `lists_mut`; no segment may be empty).
    #[inline]
    pub fn close_transfer(&mut self, src: u32, dst: u32, op: Op, tier: Tier, step: u32, seg_begin: usize, dep_begin: usize) -> u32 {
        let p = &mut self.plan;
        debug_assert!(p.segments[seg_begin..].iter().all(|s| s.len > 0));
        let id = p.transfers.len() as u32;
        let (seg_end, dep_end) = (p.segments.len() as u32, p.deps.len() as u32);
        let t = Transfer { src, dst, op, tier, step, seg_begin: seg_begin as u32, seg_end, dep_begin: dep_begin as u32, dep_end };
        if self.one.is_some() {
            return self.keep_one(t);
        }
        p.transfers.push(t);
        id
    }
    /// Transfers (ids) so far.
    pub fn num_transfers(&self) -> usize {
        self.one.as_ref().map_or(self.plan.transfers.len(), |o| o.next_id as usize)
    }
    pub fn set_meta(&mut self, key: &str, value: impl ToString) {
        self.plan.meta.insert(key.to_string(), value.to_string());
    }
    pub fn set_input_hash(&mut self, h: u64) {
        self.plan.input_hash = h;
    }
    /// Record the digest of the producer's decisions (`plan_all_to_all` mixes the inputs in).
    pub fn set_decisions(&mut self, digest: u64) {
        self.plan.decisions_digest = digest;
    }
    /// The digest recorded by `set_decisions` (0 if none).
    pub fn decisions(&self) -> u64 {
        self.plan.decisions_digest
    }
    pub fn finish(self) -> Plan {
        self.plan
    }
}

/// The arrays of recently dropped plans, kept so the next large plans are written into
/// memory that is already mapped: a fresh multi-megabyte array costs a page fault per 4 KiB
/// (a quarter of FAST's planning time at 320 GPUs). Only capacity is shared, never
/// content, so plans do not depend on what was recycled. Several per kind, because `auto`
/// builds several candidates' plans at once (on two threads: one pooled array each left
/// the others faulting in ≈100 fresh pages per call at 64 GPUs).
struct Recycled {
    transfers: Vec<Vec<Transfer>>,
    segments: Vec<Vec<Segment>>,
    deps: Vec<Vec<u32>>,
}

static RECYCLED: std::sync::Mutex<Recycled> = std::sync::Mutex::new(Recycled { transfers: Vec::new(), segments: Vec::new(), deps: Vec::new() });

/// Pooled arrays above this many bytes are freed instead of kept.
const RECYCLE_LIMIT_BYTES: usize = 128 << 20;

/// Arrays kept per kind, and their total size per kind (the smallest go first).
const RECYCLE_SLOTS: usize = 4;
const RECYCLE_TOTAL_BYTES: usize = 2 * RECYCLE_LIMIT_BYTES;

/// Hand a plan that is no longer needed back, so the next `PlanBuilder::reserve` of a
/// similar size reuses its arrays (what dropping the plan would otherwise free).
pub fn recycle(plan: Plan) {
    recycle_arrays(plan.transfers, plan.segments, plan.deps);
}

/// `recycle` for a plan already taken apart.
pub fn recycle_arrays(transfers: Vec<Transfer>, segments: Vec<Segment>, deps: Vec<u32>) {
    if let Ok(mut pool) = RECYCLED.lock() {
        keep(&mut pool.transfers, transfers);
        keep(&mut pool.segments, segments);
        keep(&mut pool.deps, deps);
    }
}

fn keep<T>(pooled: &mut Vec<Vec<T>>, mut v: Vec<T>) {
    let bytes = |v: &Vec<T>| v.capacity() * std::mem::size_of::<T>();
    if v.capacity() == 0 || bytes(&v) > RECYCLE_LIMIT_BYTES {
        return;
    }
    v.clear();
    pooled.push(v);
    // Largest first; drop the smallest beyond the slots or the total.
    pooled.sort_unstable_by_key(|v| std::cmp::Reverse(v.capacity()));
    while pooled.len() > RECYCLE_SLOTS || pooled.iter().map(bytes).sum::<usize>() > RECYCLE_TOTAL_BYTES {
        pooled.pop();
    }
}

/// Swap the smallest pooled array that holds `need` entries into an empty `v`, when it
/// fits without wasting much (a small plan must not pin a large array).
fn reuse<T>(v: &mut Vec<T>, pooled: &mut Vec<Vec<T>>, need: usize) {
    if !v.is_empty() || v.capacity() >= need {
        return;
    }
    let fits = |cap: usize| cap >= need && cap <= 4 * need.max(4096);
    // Largest first, so the last that fits is the smallest.
    if let Some(k) = pooled.iter().rposition(|p| fits(p.capacity())) {
        *v = pooled.remove(k);
    }
}

/// Free-form algorithm options (`key -> value`), so producers add knobs without
/// touching a shared struct. Unknown keys are rejected by the producer that reads them.
pub type Options = BTreeMap<String, String>;

/// Read an integer option with a default; errors name the option.
pub fn option_u64(opts: &Options, key: &str, default: u64) -> Result<u64> {
    match opts.get(key) {
        None => Ok(default),
        Some(v) => match crate::units::parse_bytes(v) {
            Ok(x) => Ok(x),
            Err(_) => invalid!("option '{key}' must be a non-negative integer or size, got '{v}'"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{keep, reuse, Buf, Collective, Op, PlanBuilder, Segment, Transfer, RECYCLE_SLOTS};
    use crate::topology::Tier;
    use crate::traffic::Traffic;

    #[test]
    fn rows_stay_32_bytes_and_array_bytes_counts_them() {
        // Planning time at scale is mostly writing these rows: a field that grows them
        // makes every large plan slower.
        assert_eq!(std::mem::size_of::<Transfer>(), 32);
        assert_eq!(std::mem::size_of::<Segment>(), 32);
        let t = Traffic::new(2, vec![0, 8, 4, 0]).unwrap();
        let mut b = PlanBuilder::new("test", Collective::AllToAll { traffic: t }, 2);
        let seg = |len| Segment { src_buf: Buf::Input, src_off: 0, dst_buf: Buf::Output, dst_off: 0, len };
        let first = b.transfer(0, 1, Op::Copy, Tier::ScaleUp, 0, &[seg(4), seg(4)], &[]);
        b.transfer(1, 0, Op::Copy, Tier::ScaleUp, 1, &[seg(4)], &[first]);
        let plan = b.finish();
        assert_eq!(plan.array_bytes(), 2 * 32 + 3 * 32 + 4);
    }

    #[test]
    fn the_pool_keeps_several_arrays_and_hands_out_the_smallest_that_fits() {
        let mut pool: Vec<Vec<u64>> = Vec::new();
        for cap in [10_000usize, 40_000, 20_000, 80_000, 5_000, 160_000] {
            keep(&mut pool, Vec::with_capacity(cap));
        }
        // The largest `RECYCLE_SLOTS`, largest first.
        assert_eq!(pool.len(), RECYCLE_SLOTS);
        assert!(pool.windows(2).all(|w| w[0].capacity() >= w[1].capacity()));
        assert!(pool.last().unwrap().capacity() >= 20_000);
        // A need of 15 000 takes the smallest that holds it (20 000), not a larger one.
        let mut v: Vec<u64> = Vec::new();
        reuse(&mut v, &mut pool, 15_000);
        assert!((20_000..40_000).contains(&v.capacity()));
        assert_eq!(pool.len(), RECYCLE_SLOTS - 1);
        // A small need does not pin a much larger array.
        let mut small: Vec<u64> = Vec::new();
        reuse(&mut small, &mut pool, 100);
        assert_eq!(small.capacity(), 0);
        // A second large need finds its own array.
        let mut w: Vec<u64> = Vec::new();
        reuse(&mut w, &mut pool, 60_000);
        assert!(w.capacity() >= 80_000 && w.capacity() < 160_000);
    }
}
