//! One rank's plan: what `algo::plan_for_rank` expands for a single rank from a producer's
//! decisions, and what `Plan::rank_plan` cuts from a whole plan. The two are equal (`==`,
//! property-tested for every producer), so the runtime can plan only its own part.
//!
//! Transfer ids are the whole plan's: both sides of a message name it by the same id, so
//! the executor can tag messages by id without seeing the whole plan. Dependencies are kept
//! only where this rank takes part in the transfer depended on; an executor that follows
//! deps orders what this rank does, and the peers order theirs.
use super::{Plan, Segment, Transfer};
use crate::error::Result;
use crate::invalid;

/// One rank's share of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankPlan {
    /// The producer that made the decisions (for `auto`, the candidate it chose).
    pub algorithm: String,
    pub rank: u32,
    pub num_ranks: u32,
    pub gpus_per_server: u32,
    /// Bytes of this rank's input, output and scratch buffers.
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub scratch_bytes: u64,
    /// Global ids of this rank's transfers (it sends, receives or copies), ascending.
    pub ids: Vec<u32>,
    /// Those transfers: segment ranges index `segments`, dep ranges index `deps`.
    pub transfers: Vec<Transfer>,
    pub segments: Vec<Segment>,
    /// Global ids of transfers depended on, each one this rank also takes part in.
    pub deps: Vec<u32>,
    /// `(step, distinct ordered rank pairs moving bytes in it)` over the whole plan, ascending
    /// step: what a collective transport needs to join the same steps on every rank.
    pub moving_pairs: Vec<(u32, u32)>,
    /// Digest of the decisions every rank must agree on (with the plan's inputs mixed in):
    /// ranks compare it before moving data.
    pub digest: u64,
}

impl RankPlan {
    /// An empty plan of `rank`, to be filled by an expansion.
    pub fn empty(algorithm: &str, rank: u32, num_ranks: u32, gpus_per_server: u32, digest: u64) -> RankPlan {
        RankPlan { algorithm: algorithm.to_string(), rank, num_ranks, gpus_per_server, digest, ..RankPlan::default() }
    }

    /// Append transfer `id` (ids must come in ascending order). Empty segments are dropped,
    /// as `PlanBuilder::transfer` drops them; `deps` must already be restricted to this rank.
    pub fn push(&mut self, id: u32, t: &Transfer, segs: &[Segment], deps: &[u32]) {
        debug_assert!(self.ids.last().is_none_or(|&last| last < id));
        let seg_begin = self.segments.len() as u32;
        self.segments.extend(segs.iter().filter(|s| s.len > 0));
        let dep_begin = self.deps.len() as u32;
        self.deps.extend_from_slice(deps);
        self.ids.push(id);
        self.transfers.push(Transfer { seg_begin, seg_end: self.segments.len() as u32, dep_begin, dep_end: self.deps.len() as u32, ..*t });
    }

    pub fn segments_of(&self, t: &Transfer) -> &[Segment] {
        &self.segments[t.seg_range()]
    }
    pub fn deps_of(&self, t: &Transfer) -> &[u32] {
        &self.deps[t.dep_range()]
    }
}

impl Plan {
    /// The decisions digest `plan_all_to_all` recorded; a plan without one (a collective,
    /// one built by hand or read back) stands for its own decisions: its content hash.
    pub fn digest(&self) -> u64 {
        if self.decisions_digest != 0 { self.decisions_digest } else { self.hash() }
    }

    /// `rank`'s part of this plan (what `algo::plan_for_rank` expands on its own). Errors
    /// name a rank outside the plan or a transfer whose ranges lie outside its arrays.
    pub fn rank_plan(&self, rank: u32) -> Result<RankPlan> {
        self.rank_plan_with(rank, true)
    }

    /// `rank_plan`, with the per-step moving pairs only when `count_pairs` (which reads every
    /// transfer's segments; without it only this rank's are read and `moving_pairs` is empty:
    /// point-to-point transports need no steps that other ranks join).
    pub fn rank_plan_with(&self, rank: u32, count_pairs: bool) -> Result<RankPlan> {
        let n = self.num_ranks();
        if rank >= n {
            return invalid!("rank {rank} is outside the plan's {n} ranks");
        }
        let algorithm = self.meta.get("choice").filter(|_| self.algorithm == "auto").cloned().unwrap_or_else(|| self.algorithm.clone());
        let mut rp = RankPlan::empty(&algorithm, rank, n, self.gpus_per_server, self.digest());
        rp.input_bytes = self.collective.input_size(rank);
        rp.output_bytes = self.collective.output_size(rank);
        rp.scratch_bytes = self.scratch_bytes.get(rank as usize).copied().unwrap_or(0);
        // Whether each transfer involves `rank`, to restrict deps; and which ones move bytes
        // between two ranks, for the per-step pair counts.
        let mut mine = vec![false; self.transfers.len()];
        let mut moving = vec![0u64; self.transfers.len().div_ceil(64)];
        let mut per_step: Vec<u32> = Vec::new();
        let mut deps = Vec::new();
        for (id, t) in self.transfers.iter().enumerate() {
            let on_rank = t.src == rank || t.dst == rank;
            if !count_pairs && !on_rank {
                continue;
            }
            let segs = self.segments.get(t.seg_range()).ok_or_else(|| crate::Error::InvalidInput(format!("transfer {id}'s segments {}..{} lie outside the plan's {} segments", t.seg_begin, t.seg_end, self.segments.len())))?;
            if t.src >= n || t.dst >= n {
                return invalid!("transfer {id} names rank {} outside the plan's {n} ranks", t.src.max(t.dst));
            }
            if count_pairs && t.src != t.dst && segs.iter().any(|s| s.len > 0) {
                moving[id / 64] |= 1 << (id % 64);
                let s = t.step as usize;
                if s >= super::MAX_STEPS as usize {
                    return invalid!("transfer {id}'s step {} is not below {}", t.step, super::MAX_STEPS);
                }
                if per_step.len() <= s {
                    per_step.resize(s + 1, 0);
                }
                per_step[s] += 1;
            }
            if on_rank {
                mine[id] = true;
                let d = self.deps.get(t.dep_range()).ok_or_else(|| crate::Error::InvalidInput(format!("transfer {id}'s deps {}..{} lie outside the plan's {} deps", t.dep_begin, t.dep_end, self.deps.len())))?;
                deps.clear();
                deps.extend(d.iter().copied().filter(|&x| mine.get(x as usize).copied().unwrap_or(false)));
                rp.push(id as u32, t, segs, &deps);
            }
        }
        if count_pairs {
            rp.moving_pairs = distinct_pairs_per_step(self, &moving, Some(per_step));
        }
        Ok(rp)
    }
}

/// Pair tables up to this many entries (4 MiB of u32 stamps at 1024 ranks), given the moving
/// transfers per step, are counted in linear time; otherwise pairs are sorted.
const STAMP_TABLE_MAX: u64 = 1 << 22;

/// `(step, distinct moving pairs)` of `plan`'s moving transfers (bits of `moving`), ascending
/// step, given how many of them each step has (`per_step`; None: not counted). Buckets the pairs by step and marks them in a table stamped with the
/// step (linear time), as every planner's plans allow; sorts (step, pair) otherwise.
fn distinct_pairs_per_step(plan: &Plan, moving: &[u64], per_step: Option<Vec<u32>>) -> Vec<(u32, u32)> {
    let n = u64::from(plan.num_ranks());
    let moving = plan.transfers.iter().enumerate().filter(|&(id, _)| moving[id / 64] >> (id % 64) & 1 == 1).map(|(_, t)| t);
    let mut out = Vec::new();
    let per_step = match per_step {
        Some(v) if n * n <= STAMP_TABLE_MAX => v,
        _ => {
            let mut keys: Vec<(u32, u64)> = moving.map(|t| (t.step, u64::from(t.src) * n + u64::from(t.dst))).collect();
            keys.sort_unstable();
            keys.dedup();
            for &(step, _) in &keys {
                match out.last_mut() {
                    Some((s, k)) if *s == step => *k += 1,
                    _ => out.push((step, 1)),
                }
            }
            return out;
        }
    };
    let counted: u32 = per_step.iter().sum();
    let steps = per_step.len();
    let mut start = vec![0u32; steps + 1];
    for i in 0..steps {
        start[i + 1] = start[i] + per_step[i];
    }
    let mut fill = start.clone();
    let mut by_step = vec![0u32; counted as usize];
    for t in moving {
        let at = &mut fill[t.step as usize];
        by_step[*at as usize] = (u64::from(t.src) * n + u64::from(t.dst)) as u32;
        *at += 1;
    }
    let mut stamp = vec![0u32; (n * n) as usize];
    for step in 0..steps {
        let mark = step as u32 + 1;
        let mut k = 0;
        for &pair in &by_step[start[step] as usize..start[step + 1] as usize] {
            if stamp[pair as usize] != mark {
                stamp[pair as usize] = mark;
                k += 1;
            }
        }
        if k > 0 {
            out.push((step as u32, k));
        }
    }
    out
}

/// Distinct ordered rank pairs moving bytes per step, counted as a producer emits transfers
/// (`PlanBuilder::for_rank`). Each pair remembers the last two steps it was counted in:
/// exact for producers whose steps never go back by more than one (FAST writes round k's
/// scale-out, step k + 1, beside its redistribution, step k + 2); property-tested against
/// `Plan::rank_plan`.
pub struct PairCounter {
    n: u64,
    /// GPUs per server and servers, when they divide the ranks (see `add`).
    g: u64,
    servers: u64,
    /// Per pair, the last two steps it was counted in, plus one (0: none).
    seen: Vec<[u32; 2]>,
    per_step: Vec<u32>,
}

impl PairCounter {
    pub fn new(num_ranks: u32, gpus_per_server: u32) -> PairCounter {
        let n = u64::from(num_ranks);
        let g = u64::from(gpus_per_server);
        let (g, servers) = if g > 0 && n % g == 0 { (g, n / g) } else { (1, n) };
        PairCounter { n, g, servers, seen: vec![[0; 2]; (n * n) as usize], per_step: Vec::new() }
    }
    #[inline]
    pub fn add(&mut self, step: u32, src: u32, dst: u32) {
        // A sender's receivers of one local index side by side: the pairs a rail-aligned
        // producer uses ((s, c) → (d, c) for every d) then share cache lines instead of
        // taking one each (the table is P² entries).
        let dst = u64::from(dst);
        let col = dst % self.g * self.servers + dst / self.g;
        let slot = &mut self.seen[(u64::from(src) * self.n + col) as usize];
        let mark = step + 1;
        if slot[0] == mark || slot[1] == mark {
            return;
        }
        // Replace the older of the two.
        if slot[0] <= slot[1] {
            slot[0] = mark;
        } else {
            slot[1] = mark;
        }
        if self.per_step.len() <= step as usize {
            self.per_step.resize(step as usize + 1, 0);
        }
        self.per_step[step as usize] += 1;
    }
    pub fn finish(self) -> Vec<(u32, u32)> {
        self.per_step.iter().enumerate().filter(|&(_, &k)| k > 0).map(|(s, &k)| (s as u32, k)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::plan_all_to_all;
    use crate::plan::Options;
    use crate::traffic::generators;
    use crate::Cluster;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Against the definition: every transfer touching the rank, with its own non-empty
        /// segments, and the distinct moving pairs of each step counted by brute force;
        /// without the counts the same rows and no pairs.
        #[test]
        fn a_rank_plan_is_the_plan_restricted_to_the_rank(servers in 1u32..5, gpus in 1u32..5, algo in 0usize..4, seed in 0u64..500) {
            let c = Cluster::parse(&format!("h200:{servers},gpus={gpus}")).unwrap();
            let p_ranks = c.num_gpus() as usize;
            let t = generators::zipf(p_ranks, 0.9, 1 << 16, seed).unwrap();
            let name = ["fast", "fanout", "spreadout", "balanced_direct"][algo];
            let plan = plan_all_to_all(&t, &c, name, &Options::new()).unwrap();
            let mut pairs: std::collections::BTreeMap<u32, BTreeSet<(u32, u32)>> = Default::default();
            for tr in &plan.transfers {
                if tr.src != tr.dst && plan.transfer_bytes(tr) > 0 {
                    pairs.entry(tr.step).or_default().insert((tr.src, tr.dst));
                }
            }
            let expected_pairs: Vec<(u32, u32)> = pairs.iter().map(|(&s, set)| (s, set.len() as u32)).collect();
            for rank in 0..p_ranks as u32 {
                let v = plan.rank_plan_with(rank, true).unwrap();
                prop_assert_eq!(&v.moving_pairs, &expected_pairs);
                let own = plan.rank_plan_with(rank, false).unwrap();
                prop_assert_eq!(&own, &RankPlan { moving_pairs: Vec::new(), ..v.clone() });
                let mine: Vec<u32> = (0..plan.transfers.len() as u32).filter(|&i| { let t = &plan.transfers[i as usize]; t.src == rank || t.dst == rank }).collect();
                prop_assert_eq!(&v.ids, &mine);
                for (k, &id) in v.ids.iter().enumerate() {
                    let (orig, got) = (&plan.transfers[id as usize], &v.transfers[k]);
                    prop_assert_eq!((got.src, got.dst, got.op, got.tier, got.step), (orig.src, orig.dst, orig.op, orig.tier, orig.step));
                    let kept: Vec<Segment> = plan.segments_of(orig).iter().copied().filter(|s| s.len > 0).collect();
                    prop_assert_eq!(v.segments_of(got), &kept[..]);
                }
            }
        }
    }

    /// Without per-step totals (or past the stamp table's size) the pairs are sorted: same counts.
    #[test]
    fn pairs_counted_by_sorting_equal_the_table() {
        let c = Cluster::parse("h200:2,gpus=2").unwrap();
        let t = generators::zipf(4, 0.9, 1 << 12, 3).unwrap();
        let plan = plan_all_to_all(&t, &c, "spreadout", &Options::new()).unwrap();
        let mut moving = vec![0u64; plan.transfers.len().div_ceil(64)];
        let mut per_step = Vec::new();
        for (id, tr) in plan.transfers.iter().enumerate() {
            if tr.src != tr.dst && plan.transfer_bytes(tr) > 0 {
                moving[id / 64] |= 1 << (id % 64);
                per_step.resize(per_step.len().max(tr.step as usize + 1), 0);
                per_step[tr.step as usize] += 1;
            }
        }
        let table = distinct_pairs_per_step(&plan, &moving, Some(per_step));
        assert!(table.len() > 1);
        assert_eq!(distinct_pairs_per_step(&plan, &moving, None), table);
    }

    #[test]
    fn bad_ranks_and_corrupt_ranges_are_errors() {
        let c = Cluster::parse("h200:2,gpus=2").unwrap();
        let t = generators::uniform(4, 1 << 10, 0).unwrap();
        let mut plan = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        for count_pairs in [true, false] {
            assert!(plan.rank_plan_with(4, count_pairs).unwrap_err().to_string().contains("rank 4 is outside the plan's 4 ranks"));
        }
        plan.transfers[1].seg_end = plan.segments.len() as u32 + 3;
        let (src, dst) = (plan.transfers[1].src, plan.transfers[1].dst);
        for count_pairs in [true, false] {
            assert!(plan.rank_plan_with(src, count_pairs).unwrap_err().to_string().contains("transfer 1's segments"));
            assert!(plan.rank_plan_with(dst, count_pairs).unwrap_err().to_string().contains("transfer 1's segments"));
        }
        // Without the counts, a rank that does not take part never reads the bad range.
        let other = (0..4).find(|&r| r != src && r != dst).unwrap();
        assert!(plan.rank_plan_with(other, false).is_ok());
    }

    /// A pair counts once per step, also when two steps alternate (FAST's scale-out of round
    /// k beside the redistribution of round k − 1); steps without pairs are left out.
    #[test]
    fn pairs_count_once_per_step_across_two_alternating_steps() {
        let mut c = PairCounter::new(4, 2);
        for (step, src, dst) in [(0, 0, 1), (0, 0, 1), (0, 1, 0), (2, 0, 1), (3, 0, 1), (2, 0, 1), (3, 0, 1), (3, 2, 3), (2, 2, 3), (3, 2, 3)] {
            c.add(step, src, dst);
        }
        assert_eq!(c.finish(), vec![(0, 2), (2, 2), (3, 2)]);
    }
}
