//! One rank's share of a Plan, for the runtime: the transfers the rank sends or receives
//! (in id order, with their segments) and, per step, how many ordered rank pairs move
//! bytes anywhere. Each rank compiles its program from this instead of decoding the whole
//! plan: on a cache miss that decoding, not planning, was most of a call's host time.
use super::{Plan, Segment, Transfer};
use crate::error::{Error, Result};
use crate::invalid;

/// What `rank_view` returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RankView {
    /// Plan ids of the rank's transfers, ascending.
    pub ids: Vec<u32>,
    /// Those transfers; their segment ranges index `segments`, their dep ranges are empty.
    pub transfers: Vec<Transfer>,
    pub segments: Vec<Segment>,
    /// `(step, pairs)` for every step in which some transfer between two different ranks
    /// carries bytes, ascending; `pairs` counts the distinct (src, dst) of those transfers.
    /// Every rank gets the same list, so collective transports join the same steps. Empty
    /// unless asked for (`rank_view`'s `count_pairs`): point-to-point transports do not need it.
    pub moving_pairs: Vec<(u32, u32)>,
}

/// The part of `plan` that `rank` takes part in, with the moving pairs of every step when
/// `count_pairs` (which reads every transfer's segments; without it only this rank's are
/// read). Errors name a rank outside the plan. A loaded plan has passed `check_shape`; the
/// bounds checked again here, inside the one pass (no second pass over the deps as
/// `check_shape` makes), keep a plan built in memory and never checked from panicking.
pub fn rank_view(plan: &Plan, rank: u32, count_pairs: bool) -> Result<RankView> {
    let n = plan.num_ranks();
    if rank >= n {
        return invalid!("rank {rank} is outside the plan's {n} ranks");
    }
    if !count_pairs {
        return own_transfers(plan, rank);
    }
    let mut view = RankView::default();
    // Moving transfers per step (a transfer between two ranks that carries bytes), counted
    // here, then bucketed by `distinct_pairs_per_step`.
    let mut per_step: Vec<u32> = Vec::new();
    // Whether some moving transfer's step is too large to count in a table.
    let mut far_steps = false;
    // Which transfers move, one bit each: the second pass then reads no segments.
    let mut moving = vec![0u64; plan.transfers.len().div_ceil(64)];
    for (id, t) in plan.transfers.iter().enumerate() {
        let segs = checked_segments(plan, id, t)?;
        if t.src != t.dst && segs.iter().any(|s| s.len > 0) {
            moving[id / 64] |= 1 << (id % 64);
            if (t.step as usize) < TABLE_STEPS_MAX {
                if per_step.len() <= t.step as usize {
                    per_step.resize(t.step as usize + 1, 0);
                }
                per_step[t.step as usize] += 1;
            } else {
                far_steps = true;
            }
        }
        if t.src == rank || t.dst == rank {
            view.push(id, t, segs);
        }
    }
    view.moving_pairs = distinct_pairs_per_step(plan, &moving, (!far_steps).then_some(per_step));
    Ok(view)
}

/// `rank_view` without the pair counts: one pass over the transfers, reading only this
/// rank's segments.
fn own_transfers(plan: &Plan, rank: u32) -> Result<RankView> {
    let mut view = RankView::default();
    for (id, t) in plan.transfers.iter().enumerate() {
        if t.src == rank || t.dst == rank {
            view.push(id, t, checked_segments(plan, id, t)?);
        }
    }
    Ok(view)
}

/// Transfer `id`'s segments, once its segment range and ranks are known to be in the plan.
fn checked_segments<'p>(plan: &'p Plan, id: usize, t: &Transfer) -> Result<&'p [Segment]> {
    let n = plan.num_ranks();
    let segs = plan
        .segments
        .get(t.seg_range())
        .ok_or_else(|| Error::InvalidInput(format!("transfer {id}'s segments {}..{} lie outside the plan's {} segments", t.seg_begin, t.seg_end, plan.segments.len())))?;
    if t.src >= n || t.dst >= n {
        return invalid!("transfer {id} names rank {} outside the plan's {n} ranks", t.src.max(t.dst));
    }
    Ok(segs)
}

impl RankView {
    /// Append transfer `id` with its own copy of its segments.
    fn push(&mut self, id: usize, t: &Transfer, segs: &[Segment]) {
        let begin = self.segments.len() as u32;
        self.segments.extend_from_slice(segs);
        self.ids.push(id as u32);
        self.transfers.push(Transfer { seg_begin: begin, seg_end: self.segments.len() as u32, dep_begin: 0, dep_end: 0, ..*t });
    }
}

/// Pair tables up to this many entries (4 MiB of u32 stamps at 1024 ranks), with steps below
/// `TABLE_STEPS_MAX`, are counted in linear time; beyond either, pairs are sorted.
const STAMP_TABLE_MAX: u64 = 1 << 22;
/// The steps a well-formed plan may have (`check_shape`): only a plan not yet checked has more.
const TABLE_STEPS_MAX: usize = super::MAX_STEPS as usize;

/// `(step, distinct moving pairs)` of `plan`'s moving transfers (bits of `moving`), ascending
/// step, given how many of them each step has (`per_step`, None when some step is at least
/// `TABLE_STEPS_MAX`). Buckets the pairs by step and marks them in a table stamped with the
/// step (linear time), as every planner's plans allow; sorts (step, pair) otherwise.
pub(super) fn distinct_pairs_per_step(plan: &Plan, moving: &[u64], per_step: Option<Vec<u32>>) -> Vec<(u32, u32)> {
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
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Against the definition: every transfer touching the rank, with its own segments,
        /// and the distinct moving pairs of each step counted by brute force.
        #[test]
        fn a_rank_view_is_the_plan_restricted_to_the_rank(servers in 1u32..5, gpus in 1u32..5, algo in 0usize..4, seed in 0u64..500) {
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
                let v = rank_view(&plan, rank, true).unwrap();
                prop_assert_eq!(&v.moving_pairs, &expected_pairs);
                // Without the counts: the same transfers and segments, no pairs.
                let own = rank_view(&plan, rank, false).unwrap();
                prop_assert_eq!(&own, &RankView { moving_pairs: Vec::new(), ..v.clone() });
                let mine: Vec<u32> = (0..plan.transfers.len() as u32).filter(|&i| { let t = &plan.transfers[i as usize]; t.src == rank || t.dst == rank }).collect();
                prop_assert_eq!(&v.ids, &mine);
                for (k, &id) in v.ids.iter().enumerate() {
                    let (orig, got) = (&plan.transfers[id as usize], &v.transfers[k]);
                    prop_assert_eq!((got.src, got.dst, got.op, got.tier, got.step), (orig.src, orig.dst, orig.op, orig.tier, orig.step));
                    prop_assert_eq!(&v.segments[got.seg_range()], plan.segments_of(orig));
                }
            }
        }
    }

    /// A step beyond `TABLE_STEPS_MAX` sends the count down the sorting path: same counts.
    #[test]
    fn far_steps_are_counted_by_sorting() {
        let c = Cluster::parse("h200:2,gpus=2").unwrap();
        let t = generators::zipf(4, 0.9, 1 << 12, 3).unwrap();
        let mut plan = plan_all_to_all(&t, &c, "spreadout", &Options::new()).unwrap();
        let near = rank_view(&plan, 0, true).unwrap().moving_pairs;
        assert!(near.len() > 1);
        let far = TABLE_STEPS_MAX as u32 * 2;
        plan.transfers.iter_mut().for_each(|t| t.step += far);
        let counted = rank_view(&plan, 0, true).unwrap().moving_pairs;
        assert_eq!(counted, near.iter().map(|&(s, k)| (s + far, k)).collect::<Vec<_>>());
    }

    #[test]
    fn bad_ranks_and_corrupt_ranges_are_errors() {
        let c = Cluster::parse("h200:2,gpus=2").unwrap();
        let t = generators::uniform(4, 1 << 10, 0).unwrap();
        let mut plan = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        for count_pairs in [true, false] {
            assert!(rank_view(&plan, 4, count_pairs).unwrap_err().to_string().contains("rank 4 is outside the plan's 4 ranks"));
        }
        plan.transfers[1].seg_end = plan.segments.len() as u32 + 3;
        let (src, dst) = (plan.transfers[1].src, plan.transfers[1].dst);
        for count_pairs in [true, false] {
            assert!(rank_view(&plan, src, count_pairs).unwrap_err().to_string().contains("transfer 1's segments"));
            assert!(rank_view(&plan, dst, count_pairs).unwrap_err().to_string().contains("transfer 1's segments"));
        }
        // Without the counts, a rank that does not take part never reads the bad range.
        let other = (0..4).find(|&r| r != src && r != dst).unwrap();
        assert!(rank_view(&plan, other, false).is_ok());
    }
}
