//! `auto`: choose the algorithm from the matrix before any plan exists, then plan only
//! the winner. `choose` predicts every candidate's time in closed form — its transfer
//! time from the matrix's per-link loads (`loads`, `model`) plus its host overhead on the
//! backend (per call, step, message and staged byte, and its planning per transfer:
//! `backend`, constants kept as data in `calibration.json`) — and picks the smallest.
//! `native` (torch's own `all_to_all_single`: no plan, one call) is a candidate; the
//! runtime calls torch for it, and `plan_all_to_all(.., "auto")` plans fanout, which moves
//! the same data, recording the choice in `plan.meta`.
//!
//! Deterministic: a fixed evaluation order in f64, ties to the earlier candidate in
//! `CANDIDATES`, so every rank with the same matrix, cluster and constants agrees.
pub mod backend;
pub mod loads;
pub mod model;

pub use backend::{Backend, Calibration};
pub use loads::{plan_nic_loads, Loads};

use crate::algo::{self, RankTimes, Workspace};
use crate::error::Result;
use crate::invalid;
use crate::plan::rank_plan::RankPlan;
use crate::plan::{Options, Plan};
use crate::topology::Cluster;
use crate::traffic::Traffic;

/// Candidates in tie-breaking order (`native` first: with equal predictions, no plan).
pub const CANDIDATES: &[&str] = &["native", "fanout", "spreadout", "hierarchical", "balanced_direct", "fast", "sabre_skewed", "sabre_light"];
/// The candidates that are planned (all but `native`).
pub const PLANNED: &[&str] = &["fanout", "spreadout", "hierarchical", "balanced_direct", "fast", "sabre_skewed", "sabre_light"];

/// One candidate's prediction (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Predicted {
    pub name: &'static str,
    /// transfer + overhead: what `choose` minimises.
    pub total_s: f64,
    pub transfer_s: f64,
    pub overhead_s: f64,
    pub shape: model::Shape,
}

/// What `choose` decided, with every candidate's prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub algorithm: &'static str,
    pub predicted_s: f64,
    pub backend: String,
    /// In `CANDIDATES` order (only those considered).
    pub candidates: Vec<Predicted>,
}

/// Parse a comma-separated candidate list into a mask over `CANDIDATES`.
pub fn candidate_mask(list: Option<&str>) -> Result<Vec<bool>> {
    let Some(list) = list else { return Ok(vec![true; CANDIDATES.len()]) };
    let mut mask = vec![false; CANDIDATES.len()];
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match CANDIDATES.iter().position(|&c| c == name) {
            Some(i) => mask[i] = true,
            None => return invalid!("auto: unknown candidate '{name}' (known: {})", CANDIDATES.join(", ")),
        }
    }
    if !mask.contains(&true) {
        return invalid!("auto: the candidate list names no candidate");
    }
    Ok(mask)
}

/// Choose for the row-major `n × n` matrix `data` (bytes, row = sender) on `cluster`,
/// with backend `backend` of `calibration`, among the candidates in `mask`.
pub fn choose(data: &[u64], n: usize, cluster: &Cluster, calibration: &Calibration, backend: &str, mask: &[bool]) -> Result<Choice> {
    check(data.len(), n, cluster, mask)?;
    let b = calibration.backend(backend)?;
    decide(&Loads::new(data, n, cluster)?, cluster, calibration, b, backend, mask)
}

/// `choose` for a matrix given as little-endian bytes (8 per entry), as Python hands it over.
pub fn choose_le_bytes(bytes: &[u8], n: usize, cluster: &Cluster, calibration: &Calibration, backend: &str, mask: &[bool]) -> Result<Choice> {
    if !bytes.len().is_multiple_of(8) {
        return invalid!("traffic matrix bytes must be a multiple of 8 (u64 entries), got {}", bytes.len());
    }
    check(bytes.len() / 8, n, cluster, mask)?;
    let b = calibration.backend(backend)?;
    decide(&Loads::from_le_bytes(bytes, n, cluster)?, cluster, calibration, b, backend, mask)
}

fn check(entries: usize, n: usize, cluster: &Cluster, mask: &[bool]) -> Result<()> {
    cluster.validate()?;
    if n == 0 || entries != n * n {
        return invalid!("traffic matrix must be square with at least one rank (got {entries} entries for {n} ranks)");
    }
    if n != cluster.num_gpus() as usize {
        return invalid!("traffic matrix is {n}×{n} but cluster {} has {} GPUs", cluster.name, cluster.num_gpus());
    }
    if mask.len() != CANDIDATES.len() || !mask.contains(&true) {
        return invalid!("auto: the candidate mask must select at least one of {}", CANDIDATES.join(", "));
    }
    Ok(())
}

fn decide(l: &Loads, cluster: &Cluster, calibration: &Calibration, b: &Backend, backend: &str, mask: &[bool]) -> Result<Choice> {
    let mut candidates = Vec::with_capacity(CANDIDATES.len());
    let terms = model::Terms::new(l, cluster);
    for (&name, _) in CANDIDATES.iter().zip(mask).filter(|x| *x.1) {
        let shape = model::shape(name, l, cluster);
        // The fluid transfer time plus the hardware model's terms (0 when they are neutral).
        let transfer_s = terms.transfer_s(name, l, b.half_duplex) + terms.hardware_s(name, &shape, l);
        let planning = calibration.planning_ns_per_transfer.get(name).copied().unwrap_or(0.0);
        let overhead_s = model::overhead_s(name, &shape, b, planning);
        candidates.push(Predicted { name, total_s: transfer_s + overhead_s, transfer_s, overhead_s, shape });
    }
    // Strictly smaller wins: ties keep the earlier candidate.
    let best = candidates.iter().fold(&candidates[0], |best, c| if c.total_s < best.total_s { c } else { best });
    Ok(Choice { algorithm: best.name, predicted_s: best.total_s, backend: backend.to_string(), candidates })
}

/// auto's decision from its options: the choice, and the producer that plans it (fanout
/// for `native`, whose data movement is fanout's). Options: `backend` (`nccl`, the default,
/// or `gloo`, or any backend of the calibration), `candidates` (comma-separated subset of
/// `CANDIDATES`), `calibration` (JSON text in the format of `calibration.json`; default: the
/// built-in constants, or `calibration` when given: the runtime passes the parsed table).
/// `plan` plans that producer whole; `plan_rank` expands its rank part only.
pub fn choose_from_options(data: &[u64], n: usize, cluster: &Cluster, opts: &Options, calibration: Option<&Calibration>) -> Result<(Choice, &'static str)> {
    for k in opts.keys() {
        if !["backend", "candidates", "calibration"].contains(&k.as_str()) {
            return invalid!("auto: unknown option '{k}' (known: backend, candidates, calibration)");
        }
    }
    let parsed;
    let calibration = match (opts.get("calibration"), calibration) {
        (Some(_), Some(_)) => return invalid!("auto: the calibration is given twice (as the option 'calibration' and as a table)"),
        (Some(text), None) => {
            parsed = Calibration::from_json(text)?;
            &parsed
        }
        (None, Some(c)) => c,
        (None, None) => Calibration::defaults(),
    };
    let backend = opts.get("backend").map_or("nccl", String::as_str);
    let mask = candidate_mask(opts.get("candidates").map(String::as_str))?;
    let choice = choose(data, n, cluster, calibration, backend, &mask)?;
    let planned = if choice.algorithm == "native" { "fanout" } else { choice.algorithm };
    Ok((choice, planned))
}

/// auto's part for one rank, from one matrix: the choice and the winner's rank plan.
#[derive(Debug, Clone)]
pub struct RankChoice {
    pub choice: Choice,
    /// The winner's rank part (fanout's for `native`), or None when `native` won and the
    /// caller runs torch's own call (`expand_native` false).
    pub plan: Option<RankPlan>,
    /// Of `times.decide_ns`: choosing.
    pub choose_ns: u64,
    pub times: RankTimes,
}

/// Choose, then expand the winner's rank part (`algo::plan_for_rank(.., "auto")`, and the
/// runtime's one path: the choice and the expansion both read `data` in place). The rank
/// plan is named after the choice; its digest is the winner's with auto's inputs (`opts`)
/// mixed in, as the whole `auto` plan records it.
/// `calibration`: the parsed table to use instead of `opts`' (see `choose_from_options`).
///
/// `data` (row-major `n × n`) is what `choose` reads; `traffic`, when the caller holds it,
/// is the same matrix as a `Traffic`, else one borrowing `data` is made (and checked) only
/// if a plan is expanded. `count_pairs`: as `algo::plan_for_rank_in`.
#[allow(clippy::too_many_arguments)]
pub fn plan_rank(ws: &mut Workspace, data: &[u64], n: usize, traffic: Option<&Traffic>, cluster: &Cluster, rank: u32, opts: &Options, calibration: Option<&Calibration>, expand_native: bool, count_pairs: bool) -> Result<RankChoice> {
    if rank as usize >= n {
        return invalid!("rank {rank} is outside the {n} ranks of the traffic matrix");
    }
    let t0 = std::time::Instant::now();
    let (choice, planned) = choose_from_options(data, n, cluster, opts, calibration)?;
    let choose_ns = t0.elapsed().as_nanos() as u64;
    if choice.algorithm == "native" && !expand_native {
        let times = RankTimes { decide_ns: choose_ns, expand_ns: 0 };
        return Ok(RankChoice { choice, plan: None, choose_ns, times });
    }
    let borrowed;
    let traffic = match traffic {
        Some(t) => t,
        None => {
            // Checking the sums hashes the matrix too (for the digest): timed as deciding.
            borrowed = Traffic::borrowed(n, data)?;
            &borrowed
        }
    };
    let check_ns = (t0.elapsed().as_nanos() as u64).saturating_sub(choose_ns);
    let (mut rp, times) = algo::plan_for_rank_in(ws, traffic, cluster, rank, planned, &Options::new(), count_pairs)?;
    rp.algorithm = choice.algorithm.to_string();
    rp.digest = algo::decisions_digest(algo::input_hash(traffic, cluster, "auto", opts), rp.digest);
    let times = RankTimes { decide_ns: choose_ns + check_ns + times.decide_ns, expand_ns: times.expand_ns };
    Ok(RankChoice { choice, plan: Some(rp), choose_ns, times })
}

/// `plan_all_to_all(.., "auto")`: choose, then plan the winner whole (fanout for `native`).
pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    let (choice, planned) = choose_from_options(traffic.data(), traffic.n(), cluster, opts, None)?;
    let backend = choice.backend.as_str();
    let mut plan = algo::plan_all_to_all(traffic, cluster, planned, &Options::new())?;
    let mut own = std::mem::take(&mut plan.meta);
    own.remove(algo::SETTING_HASH); // the winner's own; auto's is set by plan_all_to_all
    for (k, v) in own {
        plan.meta.insert(format!("{planned}.{k}"), v);
    }
    plan.algorithm = "auto".into();
    plan.meta.insert("choice".into(), choice.algorithm.into());
    plan.meta.insert("planned".into(), planned.into());
    plan.meta.insert("backend".into(), backend.into());
    plan.meta.insert("predicted_ns".into(), format!("{:.0}", choice.predicted_s * 1e9));
    for c in &choice.candidates {
        plan.meta.insert(format!("predicted_{}_ns", c.name), format!("{:.0}", c.total_s * 1e9));
    }
    if choice.algorithm == "native" {
        plan.meta.insert("reason".into(), "native predicted fastest: torch's all_to_all_single moves the same data as fanout, so this plan is fanout's; the runtime calls torch instead".into());
    } else {
        plan.meta.insert("reason".into(), "smallest predicted time (closed form: transfer + backend overhead)".into());
    }
    Ok(plan)
}
