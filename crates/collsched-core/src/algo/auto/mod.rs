//! `auto`, the runtime's default: plan every candidate, predict each plan's time with
//! the integer cost model (`cost::predict_ns`) and keep the fastest. Ties go to the
//! earlier candidate in `CANDIDATES`. A candidate that answers `Error::Unsupported`
//! is skipped. Decisions are cached (bounded LRU keyed by matrix, cluster, options).
//!
//! Options: `candidates` (comma-separated subset of `CANDIDATES`, in any order; the
//! fixed order still breaks ties), `cache` (1 = use the decision cache, the default; 0 = not).
pub mod cache;
pub mod cost;

use crate::algo;
use crate::error::{Error, Result};
use crate::invalid;
use crate::plan::{option_u64, Options, Plan};
use crate::topology::Cluster;
use crate::traffic::Traffic;

/// Candidates in tie-breaking order.
pub const CANDIDATES: &[&str] = &["fanout", "spreadout", "hierarchical", "balanced_direct", "fast", "sabre_skewed", "sabre_light"];


static DECISIONS: cache::Lru = cache::Lru::new(32);

/// The decision cache (exposed for tests and benchmarks).
pub fn decision_cache() -> &'static cache::Lru {
    &DECISIONS
}

fn plan_candidate(name: &str, traffic: &Traffic, cluster: &Cluster) -> Result<Plan> {
    let none = Options::new();
    match name {
        "fanout" => algo::fanout::plan(traffic, cluster, &none),
        "spreadout" => algo::spreadout::plan(traffic, cluster, &none),
        "hierarchical" => algo::hierarchical::plan(traffic, cluster, &none),
        "balanced_direct" => algo::balanced_direct::plan(traffic, cluster, &none),
        "fast" => algo::fast::plan(traffic, cluster, &none),
        "sabre_skewed" => algo::sabre::plan_skewed(traffic, cluster, &none),
        "sabre_light" => algo::sabre::plan_light(traffic, cluster, &none),
        _ => invalid!("auto: unknown candidate '{name}' (known: {})", CANDIDATES.join(", ")),
    }
}

/// Which candidates to consider, as a mask over `CANDIDATES`.
fn selected(opts: &Options) -> Result<Vec<bool>> {
    let Some(list) = opts.get("candidates") else { return Ok(vec![true; CANDIDATES.len()]) };
    let mut mask = vec![false; CANDIDATES.len()];
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match CANDIDATES.iter().position(|&c| c == name) {
            Some(i) => mask[i] = true,
            None => return invalid!("auto: unknown candidate '{name}' in option 'candidates' (known: {})", CANDIDATES.join(", ")),
        }
    }
    if !mask.contains(&true) {
        return invalid!("auto: option 'candidates' names no candidate");
    }
    Ok(mask)
}

/// Plan with the candidate of smallest predicted time; meta records `choice`, `reason`
/// and `predicted_<candidate>_ns` for each candidate that could plan the input.
pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    for k in opts.keys() {
        if k != "candidates" && k != "cache" {
            return invalid!("auto: unknown option '{k}' (known: candidates, cache)");
        }
    }
    let mask = selected(opts)?;
    let use_cache = match option_u64(opts, "cache", 1)? {
        0 => false,
        1 => true,
        v => return invalid!("auto: option 'cache' must be 0 or 1, got {v}"),
    };
    let context = format!("{}|{:?}", cluster.spec(), mask);
    if use_cache {
        if let Some(d) = DECISIONS.get(traffic, &context) {
            let plan = plan_candidate(CANDIDATES[d.winner], traffic, cluster)?;
            return Ok(finish(plan, &d));
        }
    }
    let mut best: Option<(usize, u64, Plan)> = None;
    let mut predicted = vec![None; CANDIDATES.len()];
    for (i, &name) in CANDIDATES.iter().enumerate() {
        if !mask[i] {
            continue;
        }
        let plan = match plan_candidate(name, traffic, cluster) {
            Ok(p) => p,
            Err(Error::Unsupported(_)) => continue,
            Err(e) => return Err(e),
        };
        let ns = cost::predict_ns(&plan, cluster);
        predicted[i] = Some(ns);
        // Strictly smaller wins: ties keep the earlier candidate.
        if best.as_ref().is_none_or(|b| ns < b.1) {
            best = Some((i, ns, plan));
        }
    }
    let Some((winner, _, plan)) = best else {
        return Err(Error::Unsupported("auto: no candidate algorithm supports this input".into()));
    };
    let d = cache::Decision { winner, predicted_ns: predicted };
    if use_cache {
        DECISIONS.put(traffic, &context, d.clone());
    }
    Ok(finish(plan, &d))
}

/// Attach auto's decision to the winner's plan. Identical whether or not the decision
/// came from the cache: ranks must produce byte-identical plans.
fn finish(mut plan: Plan, d: &cache::Decision) -> Plan {
    let choice = CANDIDATES[d.winner];
    let best = d.predicted_ns[d.winner].unwrap_or(0);
    let runner_up = d
        .predicted_ns
        .iter()
        .enumerate()
        .filter(|&(i, p)| i != d.winner && p.is_some())
        .map(|(i, p)| (p.unwrap_or(0), i))
        .min();
    let reason = match runner_up {
        Some((ns, i)) => format!("smallest predicted time {best} ns; next {} at {ns} ns", CANDIDATES[i]),
        None => format!("only supported candidate (predicted {best} ns)"),
    };
    // Keep the winner's own facts under a prefix, then auto's.
    let own = std::mem::take(&mut plan.meta);
    for (k, v) in own {
        plan.meta.insert(format!("{choice}.{k}"), v);
    }
    plan.algorithm = "auto".into();
    plan.meta.insert("choice".into(), choice.into());
    plan.meta.insert("reason".into(), reason);
    for (i, p) in d.predicted_ns.iter().enumerate() {
        if let Some(ns) = p {
            plan.meta.insert(format!("predicted_{}_ns", CANDIDATES[i]), ns.to_string());
        }
    }
    plan
}
