//! One rank's plan: what `algo::plan_for_rank` expands for a single rank from a producer's
//! decisions, and what `Plan::rank_plan` cuts from a whole plan. The two are equal (`==`,
//! property-tested for every producer), so the runtime can plan only its own part.
//!
//! A rank plan names nothing that only the whole plan knows, so that a rank can expand its
//! part without counting the others' transfers:
//! - a row's **tag** is its sequence number among the rank's rows with the same ordered
//!   (src, dst) pair: the sender and the receiver of a message compute the same tag alone;
//! - **deps** are rows of this rank plan (deps on transfers the rank takes no part in are
//!   the other ranks' to keep);
//! - of a message, only this rank's side of each segment is kept: a send's destination and a
//!   receive's source are cleared to `(Input, 0)` (a sender need not know where the receiver
//!   puts the bytes; both sides keep the same segment lengths);
//! - the whole plan's per-step moving pairs only when asked for (`moving_pairs`).
//!
//! Producers push their rows in the whole plan's order with any ascending ids and deps by
//! those ids (`push`), then `finish` turns them into tags and rows.
use super::{Buf, Plan, Segment, Transfer};
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
    /// Per row, its tag: the row's sequence number among this rank's rows with the same
    /// ordered (src, dst) pair (until `finish`: the producer's ascending ids).
    pub tags: Vec<u32>,
    /// This rank's transfers in the whole plan's order: segment ranges index `segments`,
    /// dep ranges index `deps`.
    pub transfers: Vec<Transfer>,
    pub segments: Vec<Segment>,
    /// Rows depended on, each an earlier row (until `finish`: the producer's ids).
    pub deps: Vec<u32>,
    /// `(step, distinct ordered rank pairs moving bytes in it)` over the whole plan, ascending
    /// step: what a collective transport needs to join the same steps on every rank. None
    /// unless asked for (`Plan::rank_plan_with`, `algo::plan_for_rank_in`).
    pub moving_pairs: Option<Vec<(u32, u32)>>,
    /// Digest of the decisions every rank must agree on (with the plan's inputs mixed in):
    /// ranks compare it before moving data.
    pub digest: u64,
}

impl RankPlan {
    /// An empty plan of `rank`, to be filled by an expansion.
    pub fn empty(algorithm: &str, rank: u32, num_ranks: u32, gpus_per_server: u32, digest: u64) -> RankPlan {
        RankPlan { algorithm: algorithm.to_string(), rank, num_ranks, gpus_per_server, digest, ..RankPlan::default() }
    }

    /// Append the transfer with id `id` (ascending, in the whole plan's order; any numbering
    /// that keeps that order). Empty segments are dropped, as `PlanBuilder::transfer` drops
    /// them; `deps` are ids of earlier pushed transfers (others are ignored by `finish`).
    pub fn push(&mut self, id: u32, t: &Transfer, segs: &[Segment], deps: &[u32]) {
        self.push_filtered(id, t, segs, deps, |_| true);
    }

    /// `push` with only the `deps` that `keep` accepts.
    pub fn push_filtered(&mut self, id: u32, t: &Transfer, segs: &[Segment], deps: &[u32], keep: impl Fn(u32) -> bool) {
        debug_assert!(self.tags.last().is_none_or(|&last| last < id));
        let seg_begin = self.segments.len() as u32;
        self.segments.extend(segs.iter().filter(|s| s.len > 0));
        let dep_begin = self.deps.len() as u32;
        self.deps.extend(deps.iter().copied().filter(|&d| keep(d)));
        self.tags.push(id);
        self.transfers.push(Transfer { seg_begin, seg_end: self.segments.len() as u32, dep_begin, dep_end: self.deps.len() as u32, ..*t });
    }

    /// Turn the pushed ids into tags and deps into rows, and clear the peer's side of every
    /// message (see the module doc). Every way of making a rank plan ends here, once.
    pub fn finish(&mut self) {
        let ids = std::mem::take(&mut self.tags);
        for d in &mut self.deps {
            *d = ids.binary_search(d).map_or(u32::MAX, |row| row as u32);
        }
        // Deps on ids never pushed are dropped (the rows' dep ranges shift left).
        if self.deps.contains(&u32::MAX) {
            let mut kept = 0u32;
            for t in &mut self.transfers {
                let begin = kept;
                for k in t.dep_range() {
                    let d = self.deps[k];
                    if d != u32::MAX {
                        self.deps[kept as usize] = d;
                        kept += 1;
                    }
                }
                (t.dep_begin, t.dep_end) = (begin, kept);
            }
            self.deps.truncate(kept as usize);
        }
        let n = self.num_ranks as usize;
        let (mut sent, mut received, mut local) = (vec![0u32; n], vec![0u32; n], 0u32);
        self.tags.reserve(self.transfers.len());
        for t in &self.transfers {
            let next = if t.src == t.dst {
                &mut local
            } else if t.src == self.rank {
                &mut sent[t.dst as usize]
            } else {
                &mut received[t.src as usize]
            };
            self.tags.push(*next);
            *next += 1;
            if t.src != t.dst {
                let send = t.src == self.rank;
                for s in &mut self.segments[t.seg_range()] {
                    if send {
                        (s.dst_buf, s.dst_off) = (Buf::Input, 0);
                    } else {
                        (s.src_buf, s.src_off) = (Buf::Input, 0);
                    }
                }
            }
        }
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

    /// `rank`'s part of this plan (what `algo::plan_for_rank` expands on its own), without the
    /// moving pairs. Errors name a rank outside the plan or a transfer whose ranges lie
    /// outside its arrays.
    pub fn rank_plan(&self, rank: u32) -> Result<RankPlan> {
        self.rank_plan_with(rank, false)
    }

    /// `rank_plan`, with the per-step moving pairs when `count_pairs` (which reads every
    /// transfer's segments; without it only this rank's are read and `moving_pairs` is None:
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
            rp.moving_pairs = Some(distinct_pairs_per_step(self, &moving, Some(per_step)));
        }
        rp.finish();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::plan_all_to_all;
    use crate::plan::Options;
    use crate::traffic::generators;
    use crate::Cluster;

    // The definition of a rank plan (rows, tags, deps, own sides, moving pairs) is checked
    // for every producer in tests/rank_plan.rs (`restricted`, `check_all_ranks`).

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
}
