//! SABRE (ICS'26): skew-aware all-to-allv.
//!
//! - `plan_skewed` (§5.3): greedy per-destination-node balancing of each node's
//!   inter-node volume over proxy GPUs (Algorithm 1), intra-node gather, batched
//!   node-to-node exchange per communication group, intra-node distribution.
//! - `plan_light` (§6.2): two overlapping phases: direct exchange inside the
//!   inter-node group while local GPUs forward to proxies, then proxy forwarding
//!   beside the intra-node exchange.
//! - `plan` (§7.1): choose between them by the MTM ratio (default threshold 2.2).
use crate::error::Result;
use crate::invalid;
use crate::plan::{option_u64, Buf, Op, Options, Plan, PlanBuilder, Segment};
use crate::topology::Tier;
use crate::topology::Cluster;
use crate::traffic::stats;
use crate::traffic::Traffic;
use std::cmp::Ordering;

pub mod balance;
mod light;
mod skewed;
pub use skewed::ScaleOutMessage;

/// SABRE's default load tolerance α = 1.05 (§5.3.2), in thousandths.
pub const DEFAULT_ALPHA_PERMILLE: u64 = 1050;
/// SABRE's default selection threshold MTM = 2.2 (§7.1), in thousandths.
pub const DEFAULT_MTM_THRESHOLD_MILLI: u64 = 2200;

fn check_keys(opts: &Options, known: &[&str], algorithm: &str) -> Result<()> {
    for k in opts.keys() {
        if !known.contains(&k.as_str()) {
            return invalid!("{algorithm}: unknown option '{k}' (known: {})", known.join(", "));
        }
    }
    Ok(())
}

fn alpha_permille(opts: &Options) -> Result<u64> {
    let a = option_u64(opts, "alpha_permille", DEFAULT_ALPHA_PERMILLE)?;
    if !(1000..=1_000_000).contains(&a) {
        return invalid!("option 'alpha_permille' must be in 1000..=1000000 (α ≥ 1 so every block fits), got {a}");
    }
    Ok(a)
}

fn mtm_threshold_milli(opts: &Options) -> Result<u32> {
    let t = option_u64(opts, "mtm_threshold_milli", DEFAULT_MTM_THRESHOLD_MILLI)?;
    if t > u32::MAX as u64 {
        return invalid!("option 'mtm_threshold_milli' is too large: {t}");
    }
    Ok(t as u32)
}

/// Highly-skewed three-phase algorithm (§5.3). Option: `alpha_permille` (default 1050).
pub fn plan_skewed(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    check_keys(opts, &["alpha_permille"], "sabre_skewed")?;
    let alpha = alpha_permille(opts)?;
    skewed::plan(traffic, cluster, alpha, "sabre_skewed")
}

/// Bytes each NIC sends and receives (per global NIC: up, down) in `sabre_skewed`'s plan
/// with default options, from Algorithm 1's layout without emitting the plan (auto's
/// pruning bound; a test checks it against the plan).
pub fn skewed_nic_loads(traffic: &Traffic, cluster: &Cluster) -> (Vec<u64>, Vec<u64>) {
    skewed::nic_loads(traffic, cluster, DEFAULT_ALPHA_PERMILLE)
}

/// The scale-out messages `sabre_skewed` (default options) makes, with the gather and
/// distribution messages around them, without planning it (for `auto`'s bounds).
pub fn skewed_scaleout_messages(traffic: &Traffic, cluster: &Cluster) -> Vec<ScaleOutMessage> {
    skewed::scaleout_messages(traffic, cluster, DEFAULT_ALPHA_PERMILLE)
}

/// Lightly-skewed two-phase 2D algorithm (§6.2). No options.
pub fn plan_light(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    check_keys(opts, &[], "sabre_light")?;
    light::plan(traffic, cluster, "sabre_light")
}

/// SABRE's selector (§7.1): `sabre_skewed` when MTM exceeds the threshold, else `sabre_light`.
/// Options: `mtm_threshold_milli` (default 2200), `alpha_permille` (for the skewed algorithm).
pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    check_keys(opts, &["alpha_permille", "mtm_threshold_milli"], "sabre")?;
    let alpha = alpha_permille(opts)?;
    let threshold = mtm_threshold_milli(opts)?;
    let m = stats::mtm(traffic, cluster)?.overall();
    let skewed = m.cmp_milli(threshold) == Ordering::Greater;
    let mut plan = if skewed { skewed::plan(traffic, cluster, alpha, "sabre")? } else { light::plan(traffic, cluster, "sabre")? };
    let mtm_text = format_milli(m.milli());
    let thr_text = format_milli(threshold as u128);
    let (choice, reason) = if skewed {
        ("sabre_skewed", format!("MTM {mtm_text} > threshold {thr_text}: highly skewed, balance NIC load"))
    } else {
        ("sabre_light", format!("MTM {mtm_text} <= threshold {thr_text}: lightly skewed, pipelined 2D exchange"))
    };
    plan.meta.insert("choice".into(), choice.into());
    plan.meta.insert("reason".into(), reason);
    plan.meta.insert("mtm".into(), mtm_text);
    plan.meta.insert("mtm_milli".into(), m.milli().to_string());
    Ok(plan)
}

/// `rank`'s part of `algorithm`'s plan ("sabre", "sabre_skewed" or "sabre_light"): the same
/// decisions and phases into a builder that keeps only the rank's transfers. Returns it with
/// the decisions' digest and the nanoseconds spent deciding (options and the MTM choice;
/// Algorithm 1's assignment is made inside the phases, so it counts as expansion).
pub fn plan_rank(traffic: &Traffic, cluster: &Cluster, opts: &Options, rank: u32, algorithm: &str) -> Result<(crate::plan::rank_plan::RankPlan, u64, u64)> {
    let t0 = std::time::Instant::now();
    let r = rank as usize;
    let b = PlanBuilder::for_rank(algorithm, traffic.n() as u32, cluster.gpus_per_server, rank, traffic.row_sum(r), traffic.col_sum(r));
    // Options checked in the order the whole-plan entry points check them (same errors).
    let (skewed, alpha) = match algorithm {
        "sabre_skewed" => {
            check_keys(opts, &["alpha_permille"], "sabre_skewed")?;
            (true, alpha_permille(opts)?)
        }
        "sabre_light" => {
            check_keys(opts, &[], "sabre_light")?;
            (false, 0)
        }
        _ => {
            check_keys(opts, &["alpha_permille", "mtm_threshold_milli"], "sabre")?;
            let alpha = alpha_permille(opts)?;
            let threshold = mtm_threshold_milli(opts)?;
            (stats::mtm(traffic, cluster)?.overall().cmp_milli(threshold) == Ordering::Greater, alpha)
        }
    };
    let decide_ns = t0.elapsed().as_nanos() as u64;
    let b = if skewed { skewed::plan_into(traffic, cluster, alpha, b)? } else { light::plan_into(traffic, cluster, b)? };
    let decided = b.decisions();
    let (rp, _) = b.finish_rank().expect("a one-rank builder");
    Ok((rp, decided, decide_ns))
}

/// `2200` → `"2.200"`.
fn format_milli(v: u128) -> String {
    format!("{}.{:03}", v / 1000, v % 1000)
}

/// Append a segment, merging it into the previous one when both sides are contiguous
/// (fewer descriptors for the executor; the bytes moved are the same).
pub(crate) fn push_seg(segs: &mut Vec<Segment>, s: Segment) {
    if s.len == 0 {
        return;
    }
    if let Some(p) = segs.last_mut() {
        if p.src_buf == s.src_buf && p.dst_buf == s.dst_buf && p.src_off + p.len == s.src_off && p.dst_off + p.len == s.dst_off {
            p.len += s.len;
            return;
        }
    }
    segs.push(s);
}

/// Sorted, deduplicated dependency list.
pub(crate) fn dedup_deps(d: &mut Vec<u32>) {
    d.sort_unstable();
    d.dedup();
}

/// Intra-node blocks go straight Input→Output over scale-up in step 1, each after the
/// step-0 message on the same GPU pair (`first[i * g + d]`, `u32::MAX` if none), so the
/// forwarding/gather traffic gets the links first. Shared by both SABRE algorithms.
pub(crate) fn intra_node_direct(b: &mut PlanBuilder, traffic: &Traffic, g: usize, send: &[u64], recv: &[u64], first: &[u32]) {
    let n = traffic.n();
    let mut deps: Vec<u32> = Vec::with_capacity(1);
    for u in 0..n / g {
        for s in 0..g {
            for d in 0..g {
                let (i, j) = (u * g + s, u * g + d);
                let len = traffic.get(i, j);
                if s == d || len == 0 {
                    continue;
                }
                deps.clear();
                if first[i * g + d] != u32::MAX {
                    deps.push(first[i * g + d]);
                }
                let seg = Segment { src_buf: Buf::Input, src_off: send[i * n + j], dst_buf: Buf::Output, dst_off: recv[i * n + j], len };
                b.transfer(i as u32, j as u32, Op::Copy, Tier::ScaleUp, 1, &[seg], &deps);
            }
        }
    }
}
