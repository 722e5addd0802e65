//! `auto`, the runtime's default: plan every candidate, predict each plan's time with
//! the integer cost model (`cost::predict_ns`) and keep the fastest. Ties go to the
//! earlier candidate in `CANDIDATES`. A candidate that answers `Error::Unsupported`
//! is skipped. Decisions are cached (bounded LRU keyed by matrix, cluster, options).
//!
//! Options: `candidates` (comma-separated subset of `CANDIDATES`, in any order; the
//! fixed order still breaks ties), `cache` (1 = use the decision cache, the default; 0 = not),
//! `threads` (0 = automatic: one per core up to one per candidate, with ≥ 4 cores and ≤ 256 GPUs).
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
        if !["candidates", "cache", "threads"].contains(&k.as_str()) {
            return invalid!("auto: unknown option '{k}' (known: candidates, cache, threads)");
        }
    }
    let mask = selected(opts)?;
    let use_cache = match option_u64(opts, "cache", 1)? {
        0 => false,
        1 => true,
        v => return invalid!("auto: option 'cache' must be 0 or 1, got {v}"),
    };
    let threads = match option_u64(opts, "threads", 0)? {
        0 => default_threads(traffic.n()),
        t if t <= 64 => t as usize,
        t => return invalid!("auto: option 'threads' must be at most 64, got {t}"),
    };
    let context = format!("{}|{:?}", cluster.spec(), mask);
    if use_cache {
        if let Some(d) = DECISIONS.get(traffic, &context) {
            let plan = plan_candidate(CANDIDATES[d.winner], traffic, cluster)?;
            return Ok(finish(plan, &d));
        }
    }
    let chosen: Vec<usize> = (0..CANDIDATES.len()).filter(|&i| mask[i]).collect();
    let evaluated = evaluate(&chosen, traffic, cluster, threads);
    let mut best: Option<(usize, u64, Plan)> = None;
    let mut predicted = vec![None; CANDIDATES.len()];
    // Fixed-order reduction: the result does not depend on which thread finished first.
    for (i, r) in chosen.into_iter().zip(evaluated) {
        let (plan, ns) = match r {
            Ok(x) => x,
            Err(Error::Unsupported(_)) => continue,
            Err(e) => return Err(e),
        };
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

/// Threads for candidate evaluation: on machines with at least 4 cores, one per core up to
/// one per candidate, for clusters up to 256 GPUs (every plan is alive at once); else one
/// (on a small shared machine thread start-up costs more than it saves).
fn default_threads(ranks: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if ranks > 256 || cores < 4 {
        return 1;
    }
    cores.min(CANDIDATES.len())
}

/// Plan and predict each chosen candidate, on up to `threads` scoped threads. Each result
/// depends only on its candidate, so the threads' interleaving cannot change anything.
fn evaluate(chosen: &[usize], traffic: &Traffic, cluster: &Cluster, threads: usize) -> Vec<Result<(Plan, u64)>> {
    let one = |i: usize| plan_candidate(CANDIDATES[i], traffic, cluster).map(|p| {
        let ns = cost::predict_ns(&p, cluster);
        (p, ns)
    });
    if threads <= 1 || chosen.len() <= 1 {
        return chosen.iter().map(|&i| one(i)).collect();
    }
    // Candidate k goes to worker k mod threads; results come back in candidate order.
    let workers = threads.min(chosen.len());
    let mut slots: Vec<Option<Result<(Plan, u64)>>> = (0..chosen.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let one = &one;
                scope.spawn(move || chosen.iter().enumerate().skip(w).step_by(workers).map(|(k, &i)| (k, one(i))).collect::<Vec<_>>())
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(done) => {
                    for (k, r) in done {
                        slots[k] = Some(r);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    slots.into_iter().map(|r| r.expect("every candidate evaluated")).collect()
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
