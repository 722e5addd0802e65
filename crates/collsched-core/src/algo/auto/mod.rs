//! `auto`, the runtime's default: plan every candidate, predict each plan's time with
//! the integer closed-form cost model (`cost::predict_ns`) and keep the fastest. Ties go to
//! the earlier candidate in `CANDIDATES`. A candidate that answers `Error::Unsupported`
//! is skipped. Decisions are cached (bounded LRU keyed by matrix, cluster, options).
//!
//! Close calls — candidates predicted within `REFINE_MARGIN_PERCENT` of the best — are
//! re-evaluated with the integer fluid model (`cost::fluid_predict_ns`: the simulator's
//! max-min physics in integers) when its counted work fits `FLUID_BUDGET_NS`, and the
//! smallest fluid time wins. No floating point enters the default decision.
//!
//! Options: `candidates` (comma-separated subset of `CANDIDATES`, in any order; the
//! fixed order still breaks ties), `cache` (1 = use the decision cache, the default; 0 = not),
//! `threads` (0 = automatic: one per core up to one per candidate, for 32 to 256 GPUs),
//! `refine` (`fluid`, the default; `never`: the closed form alone; `budget`: simulate close
//! calls when affordable; `always`: simulate them). The simulator is single-threaded and uses
//! only correctly rounded IEEE-754 operations, so opted-in simulation is still reproducible.
pub mod bounds;
pub mod cache;
pub mod cost;
pub mod fluid;

use crate::algo;
use crate::error::{Error, Result};
use crate::invalid;
use crate::plan::{option_u64, Options, Plan};
use crate::sim::{simulate, SimOptions};
pub use cache::How;
use crate::topology::Cluster;
use crate::traffic::Traffic;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// How to refine close calls: the integer fluid model (default), the simulator, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refine {
    Fluid,
    Budget,
    Always,
    Never,
}

/// Candidates predicted within this many percent of the best prediction are close calls.
/// The model's residuals against the simulator (docs/auto.md) reach a few percent each way
/// for the usual winners; over the 240 cases of `tests/auto_sim.rs` the truly best
/// candidate was predicted at most 5.1% above the best prediction, so close calls are
/// those within 8%.
pub const REFINE_MARGIN_PERCENT: u64 = 8;
/// Refinement may cost at most this percentage of the predicted transfer time.
pub const REFINE_BUDGET_PERCENT: u64 = 5;
/// Simulation cost per transfer (ns) on a loaded 2-core container, measured with
/// `tests/auto_sim.rs` (`simcost`, best of 3): median 0.8 µs, p90 1.9 µs, max 5.3 µs per
/// transfer over the 240 cases' candidate plans; 2 µs covers 90% of them.
pub const SIM_NS_PER_TRANSFER: u64 = 2_000;
/// Wall time per work unit of the integer fluid model (`fluid::run_plan` counts flow-link
/// incidences of rate computations, flows scanned, and fixed charges per transfer and per
/// rate computation): measured 9–17 ns on this 2-core container over the close calls of
/// the 240 cases of `tests/auto_sim.rs` (`auto_diag.rs`, `fluid_cost`), 13–31 ns per
/// candidate on 32–64 GPUs (`auto.rs`, `candidate_cost`); 20 ns covers most.
pub const FLUID_NS_PER_WORK: u64 = 20;
/// The fluid refinement of the close calls may cost this much (ns, as counted work), or
/// `REFINE_BUDGET_PERCENT` of the predicted time when that is larger; past it, the
/// closed-form model decides alone. 4 ms ≈ 200 000 units: close calls of up to ~32 GPUs
/// fit; 64 GPUs with balanced_direct and fast both close (~500 000 units) do not.
pub const FLUID_BUDGET_NS: u64 = 4_000_000;

/// Plan with the candidate of smallest predicted time, refined on close calls; meta records
/// `choice`, `reason`, `refined`, `refined_with`, `predicted_<candidate>_ns` for each
/// predicted candidate, `pruned_<candidate>_bound_ns` for each pruned one and
/// `fluid_<candidate>_ns` / `simulated_<candidate>_ns` for each refined one.
pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    for k in opts.keys() {
        if !["candidates", "cache", "threads", "refine"].contains(&k.as_str()) {
            return invalid!("auto: unknown option '{k}' (known: candidates, cache, threads, refine)");
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
    let refine = match opts.get("refine").map(String::as_str) {
        // Default: the integer fluid model, so decisions stay integer-only. The simulator's
        // times are IEEE-754 floats: opt-in only (budget/always).
        None | Some("fluid") => Refine::Fluid,
        Some("budget") => Refine::Budget,
        Some("always") => Refine::Always,
        Some("never") => Refine::Never,
        Some(v) => return invalid!("auto: option 'refine' must be fluid, budget, always or never, got '{v}'"),
    };
    let context = format!("{}|{:?}|{:?}", cluster.spec(), mask, refine);
    if use_cache {
        if let Some((d, kept)) = DECISIONS.get(traffic, &context) {
            if let Some(plan) = kept {
                return Ok(plan);
            }
            let plan = plan_candidate(CANDIDATES[d.winner], traffic, cluster)?;
            return Ok(finish(plan, &d));
        }
    }
    let chosen: Vec<usize> = (0..CANDIDATES.len()).filter(|&i| mask[i]).collect();
    // First only what decides the closed-form winner: every candidate that could beat the
    // best prediction so far (margin 0). The close calls are completed below only if a
    // refinement may run on them.
    let Evaluated { mut plans, mut predicted, mut pruned, chains, mut spare } = evaluate_pruned(&chosen, traffic, cluster, threads)?;
    // Strictly smaller wins: ties keep the earlier candidate.
    let Some(by_model) = argmin(&predicted) else {
        return Err(Error::Unsupported("auto: no candidate algorithm supports this input".into()));
    };
    let best_pred = predicted[by_model].unwrap_or(0);
    let is_close = |ns: u64| ns as u128 * 100 <= best_pred as u128 * (100 + REFINE_MARGIN_PERCENT) as u128;
    let budget_ns = best_pred as u128 * REFINE_BUDGET_PERCENT as u128 / 100;
    // The fluid refinement's budget: 5% of the best prediction or FLUID_BUDGET_NS, whichever is larger.
    let fluid_budget_ns = budget_ns.max(FLUID_BUDGET_NS as u128).min(u64::MAX as u128) as u64;
    let fluid_units = fluid_budget_ns / FLUID_NS_PER_WORK;
    let transfers_of = |plans: &[Option<Plan>], set: &[usize]| -> u64 { set.iter().map(|&i| plans[i].as_ref().map_or(0, |p| p.transfers.len() as u64)).sum() };
    // Pruned candidates whose bound is within the margin may still be close calls: complete
    // them (likeliest first) only while a refinement may still run. The known close calls
    // only grow, so once they alone put refinement over its budget the decision is settled.
    let close_limit = (best_pred as u128 * (100 + REFINE_MARGIN_PERCENT) as u128 / 100).min(u64::MAX as u128) as u64;
    let mut maybe_close: Vec<(u64, usize)> = (0..CANDIDATES.len()).filter_map(|i| pruned[i].filter(|&b| b <= close_limit).map(|b| (b, i))).collect();
    maybe_close.sort_unstable();
    let mut known: Vec<usize> = (0..CANDIDATES.len()).filter(|&i| predicted[i].is_some_and(is_close)).collect();
    // Settled once the known close calls alone put refinement over its budget: more close
    // calls would not bring it under, and with one close call there is nothing to refine,
    // so the closed-form choice stands either way.
    let settled = |plans: &[Option<Plan>], known: &[usize]| {
        let t = transfers_of(plans, known);
        !known.is_empty()
            && match refine {
                Refine::Never => true,
                Refine::Fluid => t.saturating_mul(traffic.n() as u64 + fluid::TRANSFER_WORK) > fluid_units,
                Refine::Budget => t.saturating_mul(SIM_NS_PER_TRANSFER) as u128 > budget_ns,
                Refine::Always => false,
            }
    };
    // Possible close calls left uncompleted because refinement was settled over budget.
    let mut left_open = false;
    if refine != Refine::Never {
        for &(b, i) in &maybe_close {
            if settled(&plans, &known) {
                left_open = true;
                break;
            }
            let made = match spare[i].take().map(|e| e.against(close_limit)) {
                Some(Ok(e)) => Some(e),
                Some(Err((plan, chain))) => evaluate(i, Some(plan), Some(chain), traffic, cluster, &AtomicU64::new(close_limit))?,
                None => evaluate(i, plans[i].take(), chains[i], traffic, cluster, &AtomicU64::new(close_limit))?,
            };
            match made {
                None => pruned[i] = None, // unsupported
                Some(e) => {
                    plans[i] = Some(e.plan);
                    match e.prediction {
                        Some(ns) => {
                            predicted[i] = Some(ns);
                            pruned[i] = None;
                            if is_close(ns) {
                                known.push(i);
                            }
                        }
                        None => pruned[i] = Some(b.max(e.chain).max(e.first)),
                    }
                }
            }
        }
    }
    let close: Vec<usize> = (0..CANDIDATES.len()).filter(|&i| predicted[i].is_some_and(is_close)).collect();
    // With refinement off or settled over budget (close calls not completed), say so
    // whenever another candidate might have been close.
    let unresolved = (refine == Refine::Never && !maybe_close.is_empty()) || left_open;
    let close_len = if unresolved { close.len().max(2) } else { close.len() };
    let close_transfers = transfers_of(&plans, &close);
    let mut simulated = vec![None; CANDIDATES.len()];
    let mut how = How::Model;
    if close_len > 1 {
        how = match refine {
            Refine::Never => How::ModelRefineOff,
            Refine::Fluid => How::Fluid,
            Refine::Budget => {
                let estimate_ns = close_transfers.saturating_mul(SIM_NS_PER_TRANSFER);
                if estimate_ns as u128 <= budget_ns {
                    How::Simulated
                } else {
                    How::ModelOverBudget { estimate_ns }
                }
            }
            Refine::Always => How::Simulated,
        };
    }
    let mut winner = by_model;
    if how == How::Fluid {
        // Counted work, not clocks: the same input refines (or not) on every machine.
        let (units, budget_ns) = (fluid_units, fluid_budget_ns);
        // Skip hopeless runs up front: the work grows with transfers × concurrent flows,
        // measured 0.9–1.6 work units per transfer and rank for every candidate but fanout
        // (whose single scale-out round costs ~10), so estimate ranks + TRANSFER_WORK per
        // transfer. Only a shortcut: the hard cap below decides.
        let estimate = close_transfers.saturating_mul(traffic.n() as u64 + fluid::TRANSFER_WORK);
        if estimate > units {
            how = How::FluidOverBudget { budget_ns };
        } else {
            // Refined iff every close call completes and their counted work adds up to at
            // most the budget: a rule on counts only, so threads (each run capped at what
            // is left, or at the whole budget when concurrent) cannot change the decision.
            let runs: Vec<&Plan> = close.iter().filter_map(|&i| plans[i].as_ref()).collect();
            let results = fluid_all(&runs, cluster, units, threads);
            let total = results.iter().try_fold(0u64, |acc, r| r.map(|(_, w)| acc.saturating_add(w)));
            match total {
                Some(w) if w <= units => {
                    let mut k = 0;
                    for &i in &close {
                        if plans[i].is_some() {
                            simulated[i] = results[k].map(|r| r.0);
                            k += 1;
                        }
                    }
                }
                _ => how = How::FluidOverBudget { budget_ns },
            }
        }
        if how == How::Fluid {
            winner = argmin(&simulated).unwrap_or(by_model);
        } else {
            simulated = vec![None; CANDIDATES.len()];
        }
    }
    if how == How::Simulated {
        let sim = SimOptions::default();
        for &i in &close {
            let Some(p) = plans[i].as_ref() else { continue };
            // Integer ns: the comparison below is exact and deterministic.
            simulated[i] = Some((simulate(p, cluster, &sim)?.time_s * 1e9).round() as u64);
        }
        winner = argmin(&simulated).unwrap_or(by_model);
    }
    let plan = plans[winner].take().expect("winner planned");
    plans.into_iter().flatten().for_each(crate::plan::recycle);
    spare.into_iter().flatten().for_each(|e| crate::plan::recycle(e.plan));
    let d = cache::Decision { winner, predicted_ns: predicted, simulated_ns: simulated, pruned_ns: pruned, how };
    let plan = finish(plan, &d);
    if use_cache {
        DECISIONS.put(traffic, &context, d, Some(&plan));
    }
    Ok(plan)
}

/// Index of the smallest value; ties keep the earlier index.
fn argmin(v: &[Option<u64>]) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (i, x) in v.iter().enumerate() {
        if let Some(x) = *x {
            if best.is_none_or(|b| x < b.1) {
                best = Some((i, x));
            }
        }
    }
    best.map(|b| b.0)
}

/// How a candidate routes scale-out bytes, if its NIC lower bound is computable from the
/// matrix before planning it.
fn matrix_route(i: usize) -> Option<cost::Route> {
    match CANDIDATES[i] {
        "fanout" | "spreadout" => Some(cost::Route::Direct),
        "hierarchical" | "sabre_light" => Some(cost::Route::Rail),
        "sabre_skewed" => Some(cost::Route::SabreProxies),
        _ => None,
    }
}

/// Per candidate: its plan (if kept), prediction (None = unsupported or pruned), the bound
/// it was pruned by, and its critical-path bound when computed.
struct Evaluated {
    plans: Vec<Option<Plan>>,
    predicted: Vec<Option<u64>>,
    pruned: Vec<Option<u64>>,
    chains: Vec<Option<u64>>,
    /// Evaluations made beside or ahead of others for candidates the replay then pruned by
    /// their bound: they do not count (meta is as if they never ran), but completing a close
    /// call later reuses them instead of planning and predicting again.
    spare: Vec<Option<Evaluation>>,
}

/// Plan and predict the chosen candidates, skipping those that cannot win by the model.
/// Candidates without a matrix bound are planned first (on up to `threads` threads) and get
/// the larger of the plan's NIC and critical-path bounds; then, in order of increasing bound (ties by index), each is
/// planned if needed and predicted, unless a lower bound on its prediction exceeds the best
/// prediction so far: then it is pruned (its prediction is ≥ its bound). The running best
/// is never below the final best, so pruning never removes the winner (a tie is never
/// pruned), and the order is fixed, so the result (meta included) is the same for any
/// thread count. Pruned candidates may still be close calls; `plan` completes those when
/// a refinement needs them.
/// Returns plans and predictions (None = unsupported or pruned) and the bounds of pruned ones.
fn evaluate_pruned(chosen: &[usize], traffic: &Traffic, cluster: &Cluster, threads: usize) -> Result<Evaluated> {
    let k = CANDIDATES.len();
    let mut plans: Vec<Option<Plan>> = (0..k).map(|_| None).collect();
    let mut predicted = vec![None; k];
    let mut pruned = vec![None; k];
    let mut bound: Vec<Option<u64>> = vec![None; k];
    let mut chains: Vec<Option<u64>> = vec![None; k];
    let mut spare: Vec<Option<Evaluation>> = (0..k).map(|_| None).collect();
    let first: Vec<usize> = chosen.iter().copied().filter(|&i| matrix_route(i).is_none()).collect();
    // The matrix bounds, O(P²) each, once per route (fanout and spreadout share theirs),
    // computed beside the first plans. sabre_skewed's adds the gather before and the
    // distribution after its scale-out to its NIC bound (`bounds::sabre_skewed_lower_bound_ns`).
    let matrix_bounds = || {
        let mut per_route: Vec<(cost::Route, u64)> = Vec::new();
        for &i in chosen {
            if let Some(r) = matrix_route(i) {
                if !per_route.iter().any(|x| x.0 == r) {
                    let b = match r {
                        cost::Route::SabreProxies => cost::sabre_skewed_lower_bound_ns(traffic, cluster),
                        _ => cost::matrix_nic_lower_bound_ns(traffic, cluster, r),
                    };
                    per_route.push((r, b));
                }
            }
        }
        per_route
    };
    let (first_plans, per_route) = plan_all(&first, traffic, cluster, threads, matrix_bounds);
    for &i in chosen {
        if let Some(r) = matrix_route(i) {
            bound[i] = per_route.iter().find(|x| x.0 == r).map(|x| x.1);
        }
    }
    for (i, r) in first.iter().copied().zip(first_plans) {
        match r {
            Ok(b) => {
                // Both bounds are ≤ the prediction; the chain one prunes FAST early when a
                // one-round plan is faster (its stages are sequential per NIC).
                bound[i] = Some(b.nic.max(b.chain));
                // A plan stopped before assembly is planned in full at its turn, and its
                // chain bound computed from the plan then (it prunes more).
                chains[i] = b.plan.is_some().then_some(b.chain);
                plans[i] = b.plan;
            }
            Err(Error::Unsupported(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let mut order: Vec<(u64, usize)> = chosen.iter().filter_map(|&i| bound[i].map(|b| (b, i))).collect();
    order.sort_unstable();
    let mut best: Option<u64> = None;
    let mut at = 0;
    // An evaluation made ahead, beside an earlier pair (candidate, result).
    let mut early: Option<(usize, Result<Option<Evaluation>>)> = None;
    while at < order.len() {
        let (b, i) = order[at];
        at += 1;
        let ready = early.take_if(|e| e.0 == i).map(|e| e.1);
        if best.is_some_and(|best| b > best) {
            // Pruned by its bound: an evaluation made ahead (and any error of it) does not
            // count; it is kept only to spare the work if `plan` completes this candidate.
            if let Some(Ok(Some(e))) = ready {
                spare[i] = Some(e);
            }
            pruned[i] = Some(b);
            continue;
        }
        // With threads, the next candidate that the bound does not prune yet is evaluated
        // beside this one against the same best so far; replaying the rule in order with
        // the updated best gives what evaluating it afterwards would have.
        let next = (ready.is_none() && threads > 1 && at < order.len() && best.is_none_or(|best| order[at].0 <= best)).then(|| order[at]);
        let give_up_above = best.unwrap_or(u64::MAX);
        let (this, beside) = match (ready, next) {
            (Some(r), _) => (r?, None),
            (None, None) => (evaluate(i, plans[i].take(), chains[i], traffic, cluster, &AtomicU64::new(give_up_above))?, None),
            (None, Some((bj, j))) => {
                at += 1;
                // The candidate after these two (k) is evaluated ahead too, by whichever thread
                // is free first, when it is likely to be evaluated next (not pruned yet, its
                // bound within the refinement margin of the lowest).
                let lowest = order[0].0 as u128;
                let ahead = order.get(at).copied().filter(|&(bk, k)| {
                    plans[k].is_none() && best.is_none_or(|best| bk <= best) && bk as u128 * 100 <= lowest * (100 + REFINE_MARGIN_PERCENT) as u128
                });
                let (pi, pj) = (plans[i].take(), plans[j].take());
                // In order, j would be evaluated against i's prediction too, and k against i's
                // and j's. They start against the best so far and give up as soon as the
                // predictions before them (shared once known) are below one of their bounds:
                // the replay below prunes them then anyway, so only wasted work is saved.
                let limit_j = AtomicU64::new(give_up_above);
                let limit_k = AtomicU64::new(give_up_above);
                let taken = AtomicBool::new(false);
                let (ci, cj) = (chains[i], chains[j]);
                let share = |r: &Result<Option<Evaluation>>, limits: &[&AtomicU64]| {
                    if let Ok(Some(Evaluation { prediction: Some(ns), .. })) = r {
                        limits.iter().for_each(|l| _ = l.fetch_min(*ns, Ordering::Relaxed));
                    }
                };
                let take_k = || {
                    let (bk, k) = ahead?;
                    // Once a prediction before k is below k's bound, the replay prunes k by
                    // that bound: nothing to evaluate.
                    if bk > limit_k.load(Ordering::Relaxed) {
                        return None;
                    }
                    (!taken.swap(true, Ordering::Relaxed)).then(|| (k, evaluate(k, None, None, traffic, cluster, &limit_k)))
                };
                let ((rj, kj), (ri, ki)) = join_seq(
                    || {
                        // Started after i's prediction is below j's bound (the calling thread
                        // took this job back, or i was quick): the replay prunes j by that
                        // bound whatever this returns, so only keep its plan as a spare.
                        let r = if bj > limit_j.load(Ordering::Relaxed) {
                            Ok(pj.map(|plan| Evaluation { plan, chain: cj.expect("a plan comes with its chain bound"), first: 0, prediction: None }))
                        } else {
                            evaluate(j, pj, cj, traffic, cluster, &limit_j)
                        };
                        share(&r, &[&limit_k]);
                        (r, take_k())
                    },
                    || {
                        let r = evaluate(i, pi, ci, traffic, cluster, &AtomicU64::new(give_up_above));
                        share(&r, &[&limit_j, &limit_k]);
                        (r, take_k())
                    },
                );
                // An error (or Unsupported) of k surfaces if and when k's turn comes.
                early = kj.or(ki);
                (ri?, Some((order[at - 1].0, j, rj)))
            }
        };
        for (b, i, e) in std::iter::once((b, i, Ok(this))).chain(beside) {
            if best.is_some_and(|best| b > best) {
                // Pruned by its bound before planning, had it come second: its planning
                // (and any error of it) does not count; kept as a spare (see above).
                if let Ok(Some(e)) = e {
                    spare[i] = Some(e);
                }
                pruned[i] = Some(b);
                continue;
            }
            let Some(e) = e? else { continue }; // unsupported
            plans[i] = Some(e.plan);
            if best.is_some_and(|best| e.chain > best) {
                pruned[i] = Some(b.max(e.chain));
            } else if best.is_some_and(|best| e.first > best) {
                pruned[i] = Some(b.max(e.chain).max(e.first));
            } else {
                let ns = e.prediction.expect("predicted: its first pass is within the best so far");
                predicted[i] = Some(ns);
                best = Some(best.map_or(ns, |b| b.min(ns)));
            }
        }
    }
    if let Some((_, Ok(Some(e)))) = early {
        crate::plan::recycle(e.plan);
    }
    // Pruned plans are dropped (their arrays recycled for the next plan); only
    // predicted ones can win.
    for i in 0..k {
        if predicted[i].is_none() {
            if let Some(p) = plans[i].take() {
                crate::plan::recycle(p);
            }
        }
    }
    Ok(Evaluated { plans, predicted, pruned, chains, spare })
}

/// One candidate's plan and the bounds and prediction `evaluate_pruned` prunes by.
struct Evaluation {
    plan: Plan,
    /// Critical-path bound (`cost::critical_path_lower_bound_ns`).
    chain: u64,
    /// The model's first pass; 0 when skipped because `chain` already exceeded the limit.
    first: u64,
    /// The prediction, computed when neither bound exceeded the limit.
    prediction: Option<u64>,
}

impl Evaluation {
    /// What `evaluate` against the fixed limit `limit` returns, derived from an evaluation
    /// made against another limit; `Err((plan, chain))` when that needs the model again.
    /// `evaluate` skips the model's first pass when the chain bound exceeds its limit
    /// (first = 0) and the prediction when the first pass does.
    fn against(self, limit: u64) -> std::result::Result<Evaluation, (Plan, u64)> {
        let Evaluation { plan, chain, first, prediction } = self;
        if chain > limit {
            return Ok(Evaluation { plan, chain, first: 0, prediction: None });
        }
        match prediction {
            Some(ns) => Ok(Evaluation { plan, chain, first, prediction: (first <= limit).then_some(ns) }),
            // The first pass ran (it is 0 only when skipped) and exceeds this limit too.
            None if first > limit => Ok(Evaluation { plan, chain, first, prediction: None }),
            None => Err((plan, chain)),
        }
    }
}

/// Plan candidate `i` (unless `plan` is given) and bound (unless `chain` is known) and predict
/// it, skipping the rest once a bound exceeds `give_up_above` (read at each step: another
/// thread may lower it). None if the candidate is unsupported.
fn evaluate(i: usize, plan: Option<Plan>, chain: Option<u64>, traffic: &Traffic, cluster: &Cluster, give_up_above: &AtomicU64) -> Result<Option<Evaluation>> {
    let limit = || give_up_above.load(Ordering::Relaxed);
    let plan = match plan {
        Some(p) => p,
        None => match plan_candidate(CANDIDATES[i], traffic, cluster) {
            Ok(p) => p,
            Err(Error::Unsupported(_)) => return Ok(None),
            Err(e) => return Err(e),
        },
    };
    // A second bound from the plan, O(transfers): dependency chains (spreadout's rounds).
    // Also ≤ the prediction, so the same pruning argument holds.
    let chain = chain.unwrap_or_else(|| cost::critical_path_lower_bound_ns(&plan, cluster));
    if chain > limit() {
        return Ok(Some(Evaluation { plan, chain, first: 0, prediction: None }));
    }
    // The model's first pass is a third bound (≤ the prediction): above the limit, the
    // second pass is skipped.
    let (first, prediction) = cost::first_pass_and_prediction_within(&plan, cluster, limit);
    Ok(Some(Evaluation { plan, chain, first, prediction }))
}

/// Threads for candidate evaluation: one per core up to one per candidate, for clusters of
/// 32 to 256 GPUs (every plan is alive at once); else one (below 32 GPUs a candidate costs
/// less than starting a thread and warming its working memory).
fn default_threads(ranks: usize) -> usize {
    // Sequential by default since the hand-made helper thread (`beside`) was removed
    // (issue 33); `threads=N` still evaluates on scoped threads.
    let _ = (ranks, MIN_RANKS_FOR_THREADS);
    1
}

/// What `beside::join` did, one job after the other (the second first, as the caller ran it).
fn join_seq<A, B>(a: impl FnOnce() -> A, b: impl FnOnce() -> B) -> (A, B) {
    let rb = b();
    (a(), rb)
}

/// Smallest cluster on which `auto` uses threads by default (see `default_threads`).
const MIN_RANKS_FOR_THREADS: usize = 32;

/// The fluid model of each plan, capped at `units` of counted work in all: sequentially
/// each run is capped at what the earlier ones left (and the rest are skipped once one
/// stops); on threads each is capped at `units`. The caller accepts the results only if all
/// completed within `units` together, so both ways give the same decision.
fn fluid_all(runs: &[&Plan], cluster: &Cluster, units: u64, threads: usize) -> Vec<Option<(u64, u64)>> {
    if threads <= 1 || runs.len() <= 1 {
        let mut left = units;
        let mut out = Vec::with_capacity(runs.len());
        for p in runs {
            let r = if out.last().is_some_and(|r: &Option<(u64, u64)>| r.is_none()) { None } else { cost::fluid_predict_ns(p, cluster, left) };
            if let Some((_, w)) = r {
                left = left.saturating_sub(w);
            }
            out.push(r);
        }
        return out;
    }
    if threads == 2 && runs.len() == 2 {
        // The calling thread's warm helper (`crate::beside`) instead of two fresh threads.
        let (a, b) = join_seq(|| cost::fluid_predict_ns(runs[1], cluster, units), || cost::fluid_predict_ns(runs[0], cluster, units));
        return vec![b, a];
    }
    let mut out = vec![None; runs.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs.iter().map(|p| scope.spawn(move || cost::fluid_predict_ns(p, cluster, units))).collect();
        for (slot, h) in out.iter_mut().zip(handles) {
            match h.join() {
                Ok(r) => *slot = r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    out
}

/// A plan with its NIC and critical-path lower bounds.
struct Bounded {
    /// None when FAST stopped before assembly (`FAST_STOP_PERCENT`): `nic` and `chain`
    /// are then its pre-assembly bounds (`cost::fast_preview_bounds_ns`).
    plan: Option<Plan>,
    nic: u64,
    chain: u64,
}

/// FAST stops before assembly when its pre-assembly chain bound exceeds its NIC bound by
/// more than this percentage: its stages' latency then likely puts it behind a one-round
/// plan (balanced_direct's prediction is typically 3–7% above the same NIC bound), and it
/// is pruned without the assembly, the most costly part of its planning. Only a guess about
/// work: a FAST stopped here and not pruned after all is planned in full at its turn, so
/// the decision is the same either way.
const FAST_STOP_PERCENT: u64 = 5;

fn plan_and_bound(i: usize, traffic: &Traffic, cluster: &Cluster) -> Result<Bounded> {
    if CANDIDATES[i] == "fast" {
        // The preview's bounds serve the assembled plan too: its NIC bound is the plan's
        // (equal, property-tested) and its chain a path in the plan's dependencies (≤ the
        // plan's critical-path bound, equal at 256 MiB per GPU and within 1% at 16 MiB on 64
        // GPUs), so the plan is not walked again for them (≈47 µs at 64 GPUs).
        let mut previewed = None;
        let stop = |preview: &algo::fast::ScaleoutPreview| {
            let (chain, nic) = cost::fast_preview_bounds_ns(preview, cluster);
            previewed = Some((chain, nic));
            (chain as u128 * 100 > nic as u128 * (100 + FAST_STOP_PERCENT) as u128).then_some((chain, nic))
        };
        return Ok(match algo::fast::plan_unless(traffic, cluster, &Options::new(), stop)? {
            Ok(plan) => {
                let (chain, nic) = previewed.unwrap_or_else(|| (cost::critical_path_lower_bound_ns(&plan, cluster), cost::nic_lower_bound_ns(&plan, cluster)));
                Bounded { nic, chain, plan: Some(plan) }
            }
            Err((chain, nic)) => Bounded { plan: None, nic, chain },
        });
    }
    plan_candidate(CANDIDATES[i], traffic, cluster).map(|plan| Bounded { nic: cost::nic_lower_bound_ns(&plan, cluster), chain: cost::critical_path_lower_bound_ns(&plan, cluster), plan: Some(plan) })
}

/// Plan (and bound) each chosen candidate, on up to `threads` threads, and run `beside` meanwhile (with
/// two threads on whichever finishes its plans first, else on the calling thread). Each
/// result depends only on its candidate, so the threads' interleaving cannot change anything.
fn plan_all<R: Send>(chosen: &[usize], traffic: &Traffic, cluster: &Cluster, threads: usize, beside: impl FnOnce() -> R + Send) -> (Vec<Result<Bounded>>, R) {
    let one = |i: usize| plan_and_bound(i, traffic, cluster);
    if threads <= 1 || chosen.len() <= 1 {
        return (chosen.iter().map(|&i| one(i)).collect(), beside());
    }
    // Candidate k goes to worker k mod threads; results come back in candidate order.
    let workers = threads.min(chosen.len());
    let share = |w: usize| chosen.iter().enumerate().skip(w).step_by(workers).map(|(k, &i)| (k, one(i))).collect::<Vec<_>>();
    let mut slots: Vec<Option<Result<Bounded>>> = (0..chosen.len()).map(|_| None).collect();
    let extra = if workers == 2 {
        // The calling thread's warm helper (`crate::beside`) instead of a fresh thread.
        // `beside` goes to whichever finishes its share first (FAST stopped before assembly
        // is done long before balanced_direct's plan; a FAST planned in full is not). The
        // caller takes the later share (FAST's, with the default candidates), the longer one
        // when FAST is planned in full: it starts at once, while a helper that was asleep
        // starts 30–60 µs later on the 2-vCPU container.
        let beside = std::sync::Mutex::new(Some(beside));
        let take = || beside.lock().map_or(None, |mut f| f.take()).map(|f| f());
        let ((even, a), (odd, b)) = join_seq(|| (share(0), take()), || (share(1), take()));
        for (k, r) in even.into_iter().chain(odd) {
            slots[k] = Some(r);
        }
        a.or(b).expect("one of the two ran it")
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let share = &share;
                    scope.spawn(move || share(w))
                })
                .collect();
            let extra = beside();
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
            extra
        })
    };
    (slots.into_iter().map(|r| r.expect("every candidate planned")).collect(), extra)
}

/// Attach auto's decision to the winner's plan. Identical whether or not the decision
/// came from the cache: ranks must produce byte-identical plans.
fn finish(mut plan: Plan, d: &cache::Decision) -> Plan {
    let choice = CANDIDATES[d.winner];
    let best = d.predicted_ns[d.winner].unwrap_or(0);
    let runner_up = |v: &[Option<u64>]| {
        v.iter().enumerate().filter(|&(i, p)| i != d.winner && p.is_some()).map(|(i, p)| (p.unwrap_or(0), i)).min()
    };
    // Why the close calls (if any) were not refined.
    let unrefined = match d.how {
        How::ModelRefineOff => Some("refinement off".to_string()),
        How::ModelOverBudget { estimate_ns } => Some(format!("refinement skipped: estimated simulation {estimate_ns} ns over {REFINE_BUDGET_PERCENT}% of the predicted time")),
        How::FluidOverBudget { budget_ns } => Some(format!("fluid refinement skipped: over its budget of {budget_ns} ns of counted work")),
        How::Model | How::Simulated | How::Fluid => None,
    };
    let reason = match (d.how, runner_up(&d.predicted_ns)) {
        (_, None) => match runner_up(&d.pruned_ns) {
            Some((ns, i)) => {
                let pruned = format!("smallest predicted time {best} ns; every other candidate pruned by a lower bound above it (lowest: {} at {ns} ns)", CANDIDATES[i]);
                // Some pruned ones may have been within the margin, left uncompleted.
                match unrefined {
                    Some(why) => format!("{pruned}; {why}"),
                    None => pruned,
                }
            }
            None => format!("only supported candidate (predicted {best} ns)"),
        },
        (How::Simulated | How::Fluid, _) => {
            let what = if d.how == How::Fluid { "fluid-model" } else { "simulated" };
            let sim = d.simulated_ns[d.winner].unwrap_or(0);
            let simulated = d.simulated_ns.iter().filter(|s| s.is_some()).count();
            match runner_up(&d.simulated_ns) {
                Some((ns, i)) => format!(
                    "smallest {what} time {sim} ns of {simulated} close calls (predicted within {REFINE_MARGIN_PERCENT}%); next {} at {ns} ns",
                    CANDIDATES[i]
                ),
                None => format!("{what} time {sim} ns"),
            }
        }
        (_, Some((ns, i))) => {
            let why = unrefined.unwrap_or_else(|| "no other candidate predicted within the refinement margin".to_string());
            format!("smallest predicted time {best} ns; next {} at {ns} ns; {why}", CANDIDATES[i])
        }
    };
    // Keep the winner's own facts under a prefix, then auto's.
    let own = std::mem::take(&mut plan.meta);
    for (k, v) in own {
        plan.meta.insert(format!("{choice}.{k}"), v);
    }
    plan.algorithm = "auto".into();
    plan.meta.insert("choice".into(), choice.into());
    plan.meta.insert("reason".into(), reason);
    let refined = matches!(d.how, How::Simulated | How::Fluid);
    plan.meta.insert("refined".into(), refined.to_string());
    let with = match d.how {
        How::Fluid => "fluid",
        How::Simulated => "simulator",
        _ => "none",
    };
    plan.meta.insert("refined_with".into(), with.into());
    for (i, p) in d.predicted_ns.iter().enumerate() {
        if let Some(ns) = p {
            plan.meta.insert(format!("predicted_{}_ns", CANDIDATES[i]), ns.to_string());
        }
    }
    for (i, p) in d.pruned_ns.iter().enumerate() {
        if let Some(ns) = p {
            plan.meta.insert(format!("pruned_{}_bound_ns", CANDIDATES[i]), ns.to_string());
        }
    }
    let key = if d.how == How::Fluid { "fluid" } else { "simulated" };
    for (i, p) in d.simulated_ns.iter().enumerate() {
        if let Some(ns) = p {
            plan.meta.insert(format!("{key}_{}_ns", CANDIDATES[i]), ns.to_string());
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::generators;

    /// A hit returns the kept plan; a hit whose plan was dropped (over the byte budget)
    /// replans the winner: both byte-identical to computing afresh.
    #[test]
    fn cache_hits_with_and_without_the_kept_plan_agree() {
        let c = Cluster::parse("h200:2,gpus=4,nic=50Gbps").unwrap();
        let t = generators::zipf(8, 0.99, 3 << 18, 4242).unwrap();
        let mut cold = Options::new();
        cold.insert("cache".into(), "0".into());
        let fresh = plan(&t, &c, &cold).unwrap();
        let first = plan(&t, &c, &Options::new()).unwrap();
        let context = format!("{}|{:?}|{:?}", c.spec(), vec![true; CANDIDATES.len()], Refine::Fluid);
        let (d, kept) = DECISIONS.get(&t, &context).expect("cached");
        assert_eq!(kept.as_ref().map(Plan::hash), Some(fresh.hash()));
        assert_eq!(plan(&t, &c, &Options::new()).unwrap().hash(), fresh.hash());
        DECISIONS.put(&t, &context, d, None);
        assert_eq!(DECISIONS.get(&t, &context).expect("cached").1, None);
        assert_eq!(plan(&t, &c, &Options::new()).unwrap().hash(), fresh.hash());
        assert_eq!(first.hash(), fresh.hash());
    }

    #[test]
    fn kept_plans_stay_within_the_byte_budget() {
        let lru = cache::Lru::new(4);
        let c = Cluster::parse("h200:2,gpus=2").unwrap();
        let t = generators::uniform(4, 1000, 1).unwrap();
        let p = algo::fanout::plan(&t, &c, &Options::new()).unwrap();
        let d = cache::Decision { winner: 0, predicted_ns: vec![], simulated_ns: vec![], pruned_ns: vec![], how: How::Model };
        assert!(cache::plan_bytes(&p) > 0);
        for k in 0..4u64 {
            let tk = generators::uniform(4, 1000 + k, 1).unwrap();
            lru.put(&tk, "c", d.clone(), Some(&p));
        }
        assert_eq!(lru.plans_kept(), 4, "small plans are all kept");
        assert_eq!(lru.get(&generators::uniform(4, 1003, 1).unwrap(), "c").and_then(|x| x.1).map(|x| x.hash()), Some(p.hash()));
    }
}
