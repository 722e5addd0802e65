//! One rank's executable program, laid out from its `RankPlan`: what the runtime's
//! executors run (python/collsched/comm/program.py builds its objects from this).
//!
//! - **steps** (NCCL point-to-point, the alltoallv and hybrid transports): the transfers that
//!   move bytes, each as a message (its segments on this side, with their place in the
//!   message) or a local copy, cut per step; staged messages (several segments, or a
//!   received ReduceSum) get an aligned offset in their step's staging area.
//! - **overlap** (the dependency-driven executor on Gloo): the same transfers in id order,
//!   each waiting for its plan deps cut to the rank and for every earlier transfer of the
//!   rank with a conflicting access to its buffers; receives into the user's buffer are
//!   posted once the accesses they conflict with are done.
//!
//! A whole plan's rank goes through `Plan::rank_plan_with`, so there is one layout.
use super::rank_plan::RankPlan;
use super::{Buf, Op, Segment, Transfer};
use crate::error::Result;
use crate::invalid;
use crate::topology::Tier;

/// Staged messages start on this boundary so a slice can be viewed as any dtype.
pub const STAGING_ALIGN: u64 = 16;

fn align(x: u64) -> u64 {
    x.div_ceil(STAGING_ALIGN) * STAGING_ALIGN
}

/// What this rank does in a transfer (the numbers are the Python executors' constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    Send = 0,
    Recv = 1,
    Local = 2,
}

/// One transfer of the rank that moves bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Its row in the rank plan.
    pub row: u32,
    /// Its tag (`RankPlan::tags`): both sides of a message name it alike.
    pub tag: u32,
    pub kind: Kind,
    /// The other rank (this rank for a local copy).
    pub peer: u32,
    pub op: Op,
    pub step: u32,
    pub nbytes: u64,
    /// Its non-empty segments: a range of `RankProgram::segments`.
    pub seg_begin: u32,
    pub seg_end: u32,
    /// Moved through staging: several segments, or a received ReduceSum.
    pub staged: bool,
    /// Offset in its step's staging area (step transports), -1 when not staged.
    pub step_stage: i64,
}

impl Action {
    pub fn seg_range(&self) -> std::ops::Range<usize> {
        self.seg_begin as usize..self.seg_end as usize
    }
}

/// One step in which this rank acts, or which every rank joins (`global_comm`). Ranges
/// index the step-ordered lists of `RankProgram`: `comm` its messages (`comm_order`),
/// `sends` / `recvs` the sends and receives among them, `locals` its copies (`local_order`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub step: u32,
    pub comm: (u32, u32),
    pub sends: (u32, u32),
    pub recvs: (u32, u32),
    pub locals: (u32, u32),
    pub staging_bytes: u64,
    /// Some rank moves bytes in this step (counted only when asked for).
    pub global_comm: bool,
    /// At least half of all ordered rank pairs move bytes in it (same on every rank).
    pub dense: bool,
}

/// Rows of per-index lists, back to back (`start[i]..start[i + 1]` of `items`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rows {
    pub start: Vec<u32>,
    pub items: Vec<u32>,
}

impl Rows {
    /// Rows of `n` indices from (row, item) pairs sorted by row (items keep their order).
    fn from_sorted(n: usize, pairs: impl Iterator<Item = (u32, u32)>) -> Rows {
        let mut start = vec![0u32; n + 1];
        let mut items = Vec::new();
        for (r, x) in pairs {
            start[r as usize + 1] += 1;
            items.push(x);
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        Rows { start, items }
    }
    pub fn row(&self, i: usize) -> &[u32] {
        &self.items[self.start[i] as usize..self.start[i + 1] as usize]
    }
}

/// One rank's program (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankProgram {
    pub rank: u32,
    pub num_ranks: u32,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub scratch_bytes: u64,
    /// The transfers that move bytes, in id order.
    pub actions: Vec<Action>,
    /// Their non-empty segments, back to back in action order.
    pub segments: Vec<Segment>,
    /// Messages (sends and receives) and local copies as indices of `actions`, ordered by
    /// step, stably (id order within a step).
    pub comm_order: Vec<u32>,
    pub local_order: Vec<u32>,
    pub steps: Vec<Step>,
    /// Max over steps of their staging (step transports).
    pub staging_bytes: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub uses_reduce: bool,
    /// (transfer, transfer it waits for) as action indices: the plan's deps between
    /// transfers of this rank that move bytes, sorted, duplicates kept.
    pub deps: Vec<(u32, u32)>,
}

/// What the dependency-driven executor needs beyond the actions (indices are actions').
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overlap {
    /// Per action, the earlier actions it waits for: deps and conflicting accesses, ascending.
    pub waits_for: Rows,
    /// Per action, the later actions that wait for it, ascending.
    pub dependents: Rows,
    /// Per action, its own aligned offset in the run's staging area, -1 when not staged.
    pub stage: Vec<i64>,
    pub staging_bytes: u64,
    /// Per receive into the user's buffer, the earlier actions whose accesses conflict with
    /// its destination: it is posted once they are done.
    pub post_after: Rows,
    /// The inverse of `post_after`.
    pub post_waiters: Rows,
    /// Receives with nothing to wait for before posting, ascending.
    pub early_recvs: Vec<u32>,
}

/// The program of `rp`'s rank. `collective_steps`: also list the steps every rank joins
/// (from `rp.moving_pairs`), which the alltoallv and hybrid transports need.
pub fn compile(rp: &RankPlan, collective_steps: bool) -> Result<RankProgram> {
    let rank = rp.rank;
    let mut actions = Vec::new();
    let mut segments: Vec<Segment> = Vec::new();
    // Per row of `rp`, its action index (u32::MAX: moves no bytes).
    let mut action_of = vec![u32::MAX; rp.transfers.len()];
    let (mut bytes_sent, mut bytes_received, mut uses_reduce) = (0u64, 0u64, false);
    if collective_steps && rp.moving_pairs.is_none() {
        return invalid!("collective steps need the rank plan's moving pairs, which were not counted (plan it with them)");
    }
    if rp.tags.len() != rp.transfers.len() {
        return invalid!("the rank plan has {} tags for {} transfers", rp.tags.len(), rp.transfers.len());
    }
    for (row, (&tag, t)) in rp.tags.iter().zip(&rp.transfers).enumerate() {
        let segs = rp.segments.get(t.seg_range()).ok_or_else(|| crate::Error::InvalidInput(format!("row {row}'s segments {}..{} lie outside the rank plan's {} segments", t.seg_begin, t.seg_end, rp.segments.len())))?;
        let seg_begin = segments.len() as u32;
        segments.extend(segs.iter().filter(|s| s.len > 0));
        let seg_end = segments.len() as u32;
        if seg_end == seg_begin {
            continue;
        }
        let nbytes = segments[seg_begin as usize..].iter().fold(0u64, |a, s| a.saturating_add(s.len));
        let kind = if t.src == t.dst {
            Kind::Local
        } else if t.src == rank {
            Kind::Send
        } else if t.dst == rank {
            Kind::Recv
        } else {
            return invalid!("row {row} runs from rank {} to rank {}, not on rank {rank}", t.src, t.dst);
        };
        match kind {
            Kind::Send => bytes_sent += nbytes,
            Kind::Recv => bytes_received += nbytes,
            Kind::Local => {}
        }
        uses_reduce |= t.op == Op::ReduceSum;
        let staged = kind != Kind::Local && (seg_end - seg_begin > 1 || (kind == Kind::Recv && t.op == Op::ReduceSum));
        let peer = if kind == Kind::Send { t.dst } else { t.src };
        action_of[row] = actions.len() as u32;
        actions.push(Action { row: row as u32, tag, kind, peer, op: t.op, step: t.step, nbytes, seg_begin, seg_end, staged, step_stage: -1 });
    }
    let deps = dep_pairs(rp, &action_of)?;

    // Step order: stable by step (id order within a step); most plans' ids already ascend by step.
    let mut order: Vec<u32> = (0..actions.len() as u32).collect();
    if actions.windows(2).any(|w| w[1].step < w[0].step) {
        order.sort_by_key(|&i| actions[i as usize].step);
    }
    // Staging (step transports): per step the staged sends, then the staged receives, in id
    // order, each on an aligned offset.
    let mut staged: Vec<u32> = order.iter().copied().filter(|&i| actions[i as usize].staged).collect();
    staged.sort_by_key(|&i| (actions[i as usize].step, actions[i as usize].kind));
    let mut step_staging: Vec<(u32, u64)> = Vec::new();
    for &i in &staged {
        let a = &mut actions[i as usize];
        let at = match step_staging.last_mut() {
            Some((s, used)) if *s == a.step => used,
            _ => {
                step_staging.push((a.step, 0));
                &mut step_staging.last_mut().unwrap().1
            }
        };
        a.step_stage = *at as i64;
        *at += align(a.nbytes);
    }
    let comm_order: Vec<u32> = order.iter().copied().filter(|&i| actions[i as usize].kind != Kind::Local).collect();
    let local_order: Vec<u32> = order.iter().copied().filter(|&i| actions[i as usize].kind == Kind::Local).collect();

    // Every step of an action, and with `collective_steps` every step someone moves bytes in.
    let mut all_steps: Vec<u32> = order.iter().map(|&i| actions[i as usize].step).collect();
    let moving_pairs: &[(u32, u32)] = rp.moving_pairs.as_deref().unwrap_or_default();
    if collective_steps {
        all_steps.extend(moving_pairs.iter().map(|&(s, _)| s));
        all_steps.sort_unstable();
    }
    all_steps.dedup();
    let n = u64::from(rp.num_ranks);
    let (mut c, mut s, mut r, mut l) = (0usize, 0u32, 0u32, 0usize);
    let mut steps = Vec::with_capacity(all_steps.len());
    for step in all_steps {
        let (c0, s0, r0, l0) = (c, s, r, l);
        while c < comm_order.len() && actions[comm_order[c] as usize].step == step {
            if actions[comm_order[c] as usize].kind == Kind::Send { s += 1 } else { r += 1 }
            c += 1;
        }
        while l < local_order.len() && actions[local_order[l] as usize].step == step {
            l += 1;
        }
        let pairs = if collective_steps { moving_pairs.binary_search_by_key(&step, |&(s, _)| s).ok().map(|k| moving_pairs[k].1) } else { None };
        steps.push(Step {
            step,
            comm: (c0 as u32, c as u32),
            sends: (s0, s),
            recvs: (r0, r),
            locals: (l0 as u32, l as u32),
            staging_bytes: step_staging.binary_search_by_key(&step, |&(x, _)| x).map_or(0, |k| step_staging[k].1),
            global_comm: pairs.is_some(),
            dense: pairs.is_some_and(|k| 2 * u64::from(k) >= n * n.saturating_sub(1)),
        });
    }
    Ok(RankProgram {
        rank,
        num_ranks: rp.num_ranks,
        input_bytes: rp.input_bytes,
        output_bytes: rp.output_bytes,
        scratch_bytes: rp.scratch_bytes,
        staging_bytes: step_staging.iter().map(|&(_, b)| b).max().unwrap_or(0),
        actions,
        segments,
        comm_order,
        local_order,
        steps,
        bytes_sent,
        bytes_received,
        uses_reduce,
        deps,
    })
}

/// The plan's deps between `rp`'s transfers that move bytes (`action_of` row → action),
/// as sorted (action, action it waits for) pairs; a dep on a transfer this rank does not take
/// part in, or one that moves nothing, is left out (its rank orders it).
fn dep_pairs(rp: &RankPlan, action_of: &[u32]) -> Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for (row, t) in rp.transfers.iter().enumerate() {
        let succ = action_of[row];
        if succ == u32::MAX {
            continue;
        }
        let deps = rp.deps.get(t.dep_range()).ok_or_else(|| crate::Error::InvalidInput(format!("row {row}'s deps {}..{} lie outside the rank plan's {} deps", t.dep_begin, t.dep_end, rp.deps.len())))?;
        for &d in deps {
            if d as usize >= row {
                return invalid!("row {row} depends on row {d}, which is not an earlier row");
            }
            if action_of[d as usize] != u32::MAX {
                out.push((succ, action_of[d as usize]));
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// (later, earlier) action pairs with a conflicting access to this rank's buffers:
/// overlapping bytes of one buffer, at least one of the two writing; each pair once, sorted.
///
/// Input is never written, so its reads are left out. Accesses are swept per buffer by
/// start, keeping the earlier ones that reach past the current start (only those can
/// overlap it, or anything after it).
pub fn conflict_pairs(p: &RankProgram) -> Vec<(u32, u32)> {
    struct Access {
        buf: Buf,
        lo: u64,
        hi: u64,
        write: bool,
        act: u32,
    }
    let mut acc = Vec::new();
    for (i, a) in p.actions.iter().enumerate() {
        for s in &p.segments[a.seg_range()] {
            // Sends and local copies read their source; receives and local copies write their destination.
            if a.kind != Kind::Recv && s.src_buf != Buf::Input {
                acc.push(Access { buf: s.src_buf, lo: s.src_off, hi: s.src_off.saturating_add(s.len), write: false, act: i as u32 });
            }
            if a.kind != Kind::Send {
                acc.push(Access { buf: s.dst_buf, lo: s.dst_off, hi: s.dst_off.saturating_add(s.len), write: true, act: i as u32 });
            }
        }
    }
    acc.sort_by_key(|a| (a.buf, a.lo));
    let mut out = Vec::new();
    let mut live: Vec<usize> = Vec::new();
    for (i, a) in acc.iter().enumerate() {
        if i > 0 && acc[i - 1].buf != a.buf {
            live.clear();
        }
        live.retain(|&j| acc[j].hi > a.lo);
        for &j in &live {
            let b = &acc[j];
            if (a.write || b.write) && a.act != b.act {
                out.push((a.act.max(b.act), a.act.min(b.act)));
            }
        }
        live.push(i);
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The dependency-driven executor's view of `p` (see `Overlap`).
pub fn overlap(p: &RankProgram) -> Overlap {
    let n = p.actions.len();
    let conflicts = conflict_pairs(p);
    let mut edges: Vec<(u32, u32)> = p.deps.iter().chain(&conflicts).copied().collect();
    edges.sort_unstable();
    edges.dedup();
    let waits_for = Rows::from_sorted(n, edges.iter().copied());
    let mut inverse: Vec<(u32, u32)> = edges.iter().map(|&(s, d)| (d, s)).collect();
    inverse.sort_unstable();
    let dependents = Rows::from_sorted(n, inverse.into_iter());
    // Each staged message its own aligned offset, in id order (any number may be in flight).
    let mut stage = vec![-1i64; n];
    let mut staging_bytes = 0u64;
    for (i, a) in p.actions.iter().enumerate() {
        if a.staged {
            stage[i] = staging_bytes as i64;
            staging_bytes += align(a.nbytes);
        }
    }
    // A receive into the user's buffer is posted after the accesses it conflicts with.
    let posted: Vec<(u32, u32)> = conflicts.into_iter().filter(|&(s, _)| p.actions[s as usize].kind == Kind::Recv && stage[s as usize] < 0).collect();
    let post_after = Rows::from_sorted(n, posted.iter().copied());
    let mut inverse: Vec<(u32, u32)> = posted.iter().map(|&(s, d)| (d, s)).collect();
    inverse.sort_unstable();
    let post_waiters = Rows::from_sorted(n, inverse.into_iter());
    let early_recvs = (0..n as u32).filter(|&i| p.actions[i as usize].kind == Kind::Recv && post_after.row(i as usize).is_empty()).collect();
    Overlap { waits_for, dependents, stage, staging_bytes, post_after, post_waiters, early_recvs }
}

impl RankProgram {
    /// The plan's deps between this rank's transfers that move bytes, as (row, row it waits
    /// for) of the rank plan, sorted (what `rank_deps` reports).
    pub fn dep_rows(&self) -> Vec<(u32, u32)> {
        self.deps.iter().map(|&(s, d)| (self.actions[s as usize].row, self.actions[d as usize].row)).collect()
    }
}

impl RankPlan {
    /// A rank plan from raw rows, as `Plan._raw_arrays` lays them out (a whole plan's decoded
    /// arrays cut to the rank): `ids` the ascending global ids of `transfers` (src, dst, op, tier, step,
    /// seg_begin, seg_end, dep_begin, dep_end), `segments` (src_buf, src_off, dst_buf,
    /// dst_off, len). Empty segments are dropped; ops and buffer ids are checked on what
    /// moves bytes (an empty transfer is dropped by every executor alike).
    ///
    /// Errors name the first transfer in row order with an unknown op or buffer id, or with
    /// ranges outside the rows.
    #[allow(clippy::too_many_arguments)]
    pub fn from_rows(rank: u32, num_ranks: u32, ids: &[u32], transfers: &[[u32; 9]], segments: &[[u64; 5]], deps: &[u32], moving_pairs: Option<Vec<(u32, u32)>>, sizes: (u64, u64, u64)) -> Result<RankPlan> {
        if ids.len() != transfers.len() {
            return invalid!("{} ids for {} transfers", ids.len(), transfers.len());
        }
        if let Some(k) = ids.windows(2).position(|w| w[1] <= w[0]) {
            return invalid!("ids must ascend: id {} follows {}", ids[k + 1], ids[k]);
        }
        let mut rp = RankPlan::empty("", rank, num_ranks, 0, 0);
        (rp.input_bytes, rp.output_bytes, rp.scratch_bytes) = sizes;
        rp.moving_pairs = moving_pairs;
        let mut segs = Vec::new();
        for (&id, row) in ids.iter().zip(transfers) {
            let [src, dst, op, tier, step, sb, se, db, de] = *row;
            let raw = segments.get(sb as usize..se as usize).ok_or_else(|| crate::Error::InvalidInput(format!("transfer {id}'s segments {sb}..{se} lie outside the {} segment rows", segments.len())))?;
            let d = deps.get(db as usize..de as usize).ok_or_else(|| crate::Error::InvalidInput(format!("transfer {id}'s deps {db}..{de} lie outside the {} dep rows", deps.len())))?;
            let moves = raw.iter().any(|s| s[4] > 0);
            let op = match u8::try_from(op).ok().and_then(Op::from_u8) {
                Some(op) => op,
                None if !moves => Op::Copy,
                None => return invalid!("transfer {id} has unknown op {op}"),
            };
            segs.clear();
            for &[src_buf, src_off, dst_buf, dst_off, len] in raw.iter().filter(|s| s[4] > 0) {
                let (Some(src_buf), Some(dst_buf)) = (buf_of(src_buf), buf_of(dst_buf)) else {
                    return invalid!("transfer {id} names an unknown buffer id");
                };
                segs.push(Segment { src_buf, src_off, dst_buf, dst_off, len });
            }
            let tier = u8::try_from(tier).ok().and_then(Tier::from_u8).ok_or_else(|| crate::Error::InvalidInput(format!("transfer {id} has unknown tier {tier}")))?;
            if src >= num_ranks || dst >= num_ranks {
                return invalid!("transfer {id} names rank {} outside the plan's {num_ranks} ranks", src.max(dst));
            }
            let t = Transfer { src, dst, op, tier, step, seg_begin: 0, seg_end: 0, dep_begin: 0, dep_end: 0 };
            rp.push(id, &t, &segs, d);
        }
        rp.finish();
        Ok(rp)
    }
}

fn buf_of(v: u64) -> Option<Buf> {
    u8::try_from(v).ok().and_then(Buf::from_u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(src_buf: Buf, src_off: u64, dst_buf: Buf, dst_off: u64, len: u64) -> Segment {
        Segment { src_buf, src_off, dst_buf, dst_off, len }
    }

    /// A rank plan of rank 0 of 2 from (src, dst, segments) in id order, no deps.
    fn rank_plan(rows: &[(u32, u32, Vec<Segment>)]) -> RankPlan {
        let mut rp = RankPlan::empty("test", 0, 2, 2, 0);
        for (id, (src, dst, segs)) in rows.iter().enumerate() {
            let t = Transfer { src: *src, dst: *dst, op: Op::Copy, tier: Tier::ScaleUp, step: id as u32, seg_begin: 0, seg_end: 0, dep_begin: 0, dep_end: 0 };
            rp.push(id as u32, &t, segs, &[]);
        }
        rp.finish();
        rp
    }

    /// Every pair of actions against the definition: overlapping bytes of one buffer, one of
    /// the two writing, input reads left out.
    fn brute_force(p: &RankProgram) -> Vec<(u32, u32)> {
        let mut acc = Vec::new();
        for (i, a) in p.actions.iter().enumerate() {
            for s in &p.segments[a.seg_range()] {
                if a.kind != Kind::Recv && s.src_buf != Buf::Input {
                    acc.push((i as u32, s.src_buf, s.src_off, s.src_off + s.len, false));
                }
                if a.kind != Kind::Send {
                    acc.push((i as u32, s.dst_buf, s.dst_off, s.dst_off + s.len, true));
                }
            }
        }
        let mut out = Vec::new();
        for x in &acc {
            for y in &acc {
                if x.0 > y.0 && x.1 == y.1 && x.2 < y.3 && y.2 < x.3 && (x.4 || y.4) {
                    out.push((x.0, y.0));
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// A receive into output that overlaps a local copy's destination, a send reading scratch
    /// that a later receive overwrites, and accesses that only touch end to start.
    #[test]
    fn the_sweep_finds_overlaps_with_a_writer_and_only_those() {
        let rp = rank_plan(&[
            (0, 0, vec![seg(Buf::Input, 0, Buf::Output, 0, 8)]),       // 0: local copy writes output 0..8
            (1, 0, vec![seg(Buf::Input, 0, Buf::Output, 4, 8)]),       // 1: receive writes output 4..12: after 0
            (0, 1, vec![seg(Buf::Scratch, 0, Buf::Output, 0, 16)]),    // 2: send reads scratch 0..16
            (1, 0, vec![seg(Buf::Input, 0, Buf::Scratch, 16, 4)]),     // 3: receive writes scratch 16..20: touches 2 only
            (1, 0, vec![seg(Buf::Input, 0, Buf::Scratch, 8, 4)]),      // 4: receive writes scratch 8..12: after 2
            (0, 1, vec![seg(Buf::Input, 4, Buf::Output, 0, 4)]),       // 5: send reads input: never conflicts
            (0, 1, vec![seg(Buf::Output, 12, Buf::Output, 0, 4)]),     // 6: send reads output 12..16: touches 1 only
        ]);
        let p = compile(&rp, false).unwrap();
        let got = conflict_pairs(&p);
        assert_eq!(got, vec![(1, 0), (4, 2)]);
        assert_eq!(got, brute_force(&p));
        let ov = overlap(&p);
        // Unstaged receives wait for their conflicts before posting; the rest post at once.
        assert_eq!(ov.post_after.row(1), &[0]);
        assert_eq!(ov.post_after.row(4), &[2]);
        assert_eq!(ov.early_recvs, vec![3]);
        assert_eq!(ov.post_waiters.row(0), &[1]);
        assert_eq!(ov.dependents.row(2), &[4]);
    }

    /// Random accesses (several segments per transfer, all three buffers, every kind): the
    /// sweep reports exactly the pairs the definition does.
    #[test]
    fn the_sweep_equals_the_definition_on_random_accesses() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let bufs = [Buf::Input, Buf::Output, Buf::Scratch];
        for _ in 0..200 {
            let rows: Vec<(u32, u32, Vec<Segment>)> = (0..next(12))
                .map(|_| {
                    let (src, dst) = [(0, 0), (0, 1), (1, 0)][next(3) as usize];
                    let segs = (0..1 + next(3)).map(|_| seg(bufs[next(3) as usize], next(40), bufs[next(3) as usize], next(40), next(10))).collect();
                    (src, dst, segs)
                })
                .collect();
            let p = compile(&rank_plan(&rows), false).unwrap();
            assert_eq!(conflict_pairs(&p), brute_force(&p));
        }
    }
}
