//! Plan producers. Each all-to-all algorithm is one module with
//! `pub fn plan(traffic, cluster, opts) -> Result<Plan>`; `plan_all_to_all` dispatches by name.
use crate::error::Result;
use crate::invalid;
use crate::plan::rank_plan::RankPlan;
use crate::plan::{Options, Plan};
use crate::topology::Cluster;
use crate::traffic::Traffic;

pub mod auto;
pub mod collective;
pub mod balanced_direct;
pub mod fanout;
pub mod fast;
pub mod hierarchical;
pub mod sabre;
pub mod spreadout;

/// Every all-to-all algorithm name `plan_all_to_all` accepts, with one line each.
pub const ALL_TO_ALL_ALGORITHMS: &[(&str, &str)] = &[
    ("fanout", "all pairs at once (NCCL/RCCL/torch all_to_all_single)"),
    ("spreadout", "P-1 shifted one-to-one rounds (MPI)"),
    ("hierarchical", "aggregate to the destination's local index, rail-aligned scale-out, local delivery (2DH/PXN)"),
    ("balanced_direct", "FAST's intra-server balancing, then all server pairs at once (FLASH-A)"),
    ("fast", "FAST: balancing, Birkhoff-von Neumann one-to-one scale-out stages, pipelined redistribution"),
    ("sabre_skewed", "SABRE three-phase greedy NIC balancing for heavy skew"),
    ("sabre_light", "SABRE two-phase pipelined 2D algorithm for light skew"),
    ("sabre", "SABRE's selector: MTM threshold between sabre_skewed and sabre_light"),
    ("auto", "collsched's selector: choose from the matrix (closed form, backend-aware; native = torch's own call), then plan the winner"),
];

/// The matrix must be P×P for the cluster's P GPUs.
fn check_inputs(traffic: &Traffic, cluster: &Cluster) -> Result<()> {
    cluster.validate()?;
    if traffic.n() != cluster.num_gpus() as usize {
        return invalid!(
            "traffic matrix is {0}×{0} but cluster {1} has {2} GPUs ({3} servers × {4})",
            traffic.n(),
            cluster.name,
            cluster.num_gpus(),
            cluster.servers,
            cluster.gpus_per_server
        );
    }
    Ok(())
}

/// Producers whose plan the matrix alone fixes (no decisions) and that expand one rank on
/// their own (`plan_for_rank`).
const PER_RANK: &[&str] = &["fanout", "spreadout", "hierarchical"];

/// Producers split into decisions and an assembly that a builder can restrict to one rank
/// (`PlanBuilder::for_rank`). fast and balanced_direct run their assembly over the rank's
/// part only, from the tile totals, the schedule and their server's tiles
/// (`fast::pipeline::assemble_rank`);
/// the SABRE variants still walk every transfer, skipping only the writing of the others'.
const DECIDE_THEN_EXPAND: &[&str] = &["fast", "balanced_direct", "sabre", "sabre_skewed", "sabre_light"];

/// Working memory a caller that plans repeatedly keeps across calls (`plan_all_to_all_in`,
/// `plan_for_rank_in`): FAST's and balanced_direct's balancing and assembly arrays.
pub use fast::Workspace;

/// Plan an all-to-all(v) of `traffic` on `cluster` with the named algorithm.
pub fn plan_all_to_all(traffic: &Traffic, cluster: &Cluster, algorithm: &str, opts: &Options) -> Result<Plan> {
    plan_all_to_all_in(&mut Workspace::default(), traffic, cluster, algorithm, opts)
}

/// `plan_all_to_all` in the caller's workspace (the same plan).
pub fn plan_all_to_all_in(ws: &mut Workspace, traffic: &Traffic, cluster: &Cluster, algorithm: &str, opts: &Options) -> Result<Plan> {
    check_inputs(traffic, cluster)?;
    let mut plan = match algorithm {
        "fanout" => fanout::plan(traffic, cluster, opts),
        "spreadout" => spreadout::plan(traffic, cluster, opts),
        "hierarchical" => hierarchical::plan(traffic, cluster, opts),
        "balanced_direct" => balanced_direct::plan_in(ws, traffic, cluster, opts),
        "fast" => fast::plan_in(ws, traffic, cluster, opts),
        "sabre" => sabre::plan(traffic, cluster, opts),
        "sabre_skewed" => sabre::plan_skewed(traffic, cluster, opts),
        "sabre_light" => sabre::plan_light(traffic, cluster, opts),
        "auto" => auto::plan(traffic, cluster, opts),
        _ => return unknown(algorithm),
    }?;
    plan.input_hash = input_hash(traffic, cluster, algorithm, opts);
    // The decisions: none beyond the inputs for the per-rank producers; what the producer
    // recorded (FAST and balanced_direct: balancing amounts and rounds; SABRE: Algorithm 1's
    // assignment); otherwise the whole plan, which holds them (auto).
    let decided = if PER_RANK.contains(&algorithm) {
        0
    } else if plan.decisions_digest != 0 {
        plan.decisions_digest
    } else {
        plan.hash()
    };
    plan.decisions_digest = decisions_digest(plan.input_hash, decided);
    // After the digest (the decisions, not this record of the inputs): lets `verify` check input_hash.
    plan.meta.insert(SETTING_HASH.into(), format!("{:016x}", setting_hash(cluster, algorithm, opts)));
    Ok(plan)
}

fn unknown<T>(algorithm: &str) -> Result<T> {
    let names: Vec<&str> = ALL_TO_ALL_ALGORITHMS.iter().map(|a| a.0).collect();
    invalid!("unknown all-to-all algorithm '{algorithm}' (known: {})", names.join(", "))
}

/// The digest ranks compare: the inputs' hash and the producer's decisions, never 0.
pub fn decisions_digest(input_hash: u64, decided: u64) -> u64 {
    let mut h = crate::plan::hash::Fnv64::new();
    h.write_u64s(&[input_hash, decided]);
    h.finish().max(1)
}

/// Time `plan_for_rank_timed` spent deciding (everything every rank computes alike) and
/// expanding this rank's transfers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RankTimes {
    pub decide_ns: u64,
    pub expand_ns: u64,
}

/// `rank`'s part of the all-to-all plan: equal to `plan_all_to_all(..).rank_plan(rank)`
/// (without the moving pairs; see `plan_for_rank_in`). fanout, spreadout and hierarchical
/// expand the rank alone; fast and balanced_direct decide, then run their assembly over the
/// rank's part only; the SABRE variants decide, then run their assembly keeping only the
/// rank's transfers; auto chooses, then expands the winner's rank part.
pub fn plan_for_rank(traffic: &Traffic, cluster: &Cluster, rank: u32, algorithm: &str, opts: &Options) -> Result<RankPlan> {
    plan_for_rank_timed(traffic, cluster, rank, algorithm, opts).map(|(rp, _)| rp)
}

/// `plan_for_rank`, with the time spent deciding and expanding.
pub fn plan_for_rank_timed(traffic: &Traffic, cluster: &Cluster, rank: u32, algorithm: &str, opts: &Options) -> Result<(RankPlan, RankTimes)> {
    plan_for_rank_in(&mut Workspace::default(), traffic, cluster, rank, algorithm, opts, false)
}

/// `plan_for_rank_timed` in the caller's workspace (the same rank plan). With
/// `count_pairs`, the rank plan also holds the whole plan's moving pairs
/// (`plan_all_to_all(..).rank_plan_with(rank, true)`), which only the collective transports
/// need: fanout, spreadout and hierarchical count them in one pass over the matrix, the
/// others cut them from their whole plan.
pub fn plan_for_rank_in(ws: &mut Workspace, traffic: &Traffic, cluster: &Cluster, rank: u32, algorithm: &str, opts: &Options, count_pairs: bool) -> Result<(RankPlan, RankTimes)> {
    check_inputs(traffic, cluster)?;
    let n = traffic.n();
    if rank as usize >= n {
        return invalid!("rank {rank} is outside the {n} ranks of the traffic matrix");
    }
    let t0 = std::time::Instant::now();
    let ns = |t: std::time::Instant| t.elapsed().as_nanos() as u64;
    if DECIDE_THEN_EXPAND.contains(&algorithm) {
        if count_pairs {
            // Every rank's transfers are needed to count the pairs: the whole plan, cut.
            let rp = plan_all_to_all_in(ws, traffic, cluster, algorithm, opts)?.rank_plan_with(rank, true)?;
            return Ok((rp, RankTimes { decide_ns: ns(t0), expand_ns: 0 }));
        }
        // The producer's own decisions and assembly, into a builder that keeps only this
        // rank's transfers (the whole plan is every rank's expansion by the same code).
        let (mut rp, decided, decide_ns) = match algorithm {
            "fast" => fast::plan_rank(ws, traffic, cluster, opts, rank)?,
            "balanced_direct" => balanced_direct::plan_rank(ws, traffic, cluster, opts, rank)?,
            _ => sabre::plan_rank(traffic, cluster, opts, rank, algorithm)?,
        };
        rp.moving_pairs = None;
        rp.digest = decisions_digest(input_hash(traffic, cluster, algorithm, opts), decided);
        let total = ns(t0);
        return Ok((rp, RankTimes { decide_ns, expand_ns: total.saturating_sub(decide_ns) }));
    }
    if algorithm == "auto" {
        // Choose, then expand the winner's rank part (`auto::plan_rank`; fanout's for native).
        let auto::RankChoice { plan, times, .. } = auto::plan_rank(ws, traffic.data(), traffic.n(), Some(traffic), cluster, rank, opts, None, true, count_pairs)?;
        return match plan {
            Some(rp) => Ok((rp, times)),
            None => invalid!("auto: no rank plan for native (internal)"),
        };
    }
    if !PER_RANK.contains(&algorithm) {
        return unknown(algorithm);
    }
    spreadout::reject_options(algorithm, opts).or_else(|e| if algorithm == "fanout" { Ok(()) } else { Err(e) })?;
    let digest = decisions_digest(input_hash(traffic, cluster, algorithm, opts), 0);
    let decide_ns = ns(t0);
    let t1 = std::time::Instant::now();
    let r = rank as usize;
    let rp = match algorithm {
        "fanout" => fanout::plan_rank(traffic, cluster, r, digest, count_pairs),
        "spreadout" => spreadout::plan_rank(traffic, cluster, r, digest, count_pairs),
        _ => hierarchical::plan_rank(traffic, cluster, r, digest, count_pairs),
    };
    Ok((rp, RankTimes { decide_ns, expand_ns: ns(t1) }))
}

/// Hash of everything a plan is computed from; equal inputs give equal plans.
///
/// Composed of the matrix's hash and `setting_hash` (what else the plan was computed from),
/// which the plan records in `meta[SETTING_HASH]`: the verifier recomputes this from the plan's
/// own traffic and so rejects a plan whose `input_hash` does not belong to its matrix.
pub fn input_hash(traffic: &Traffic, cluster: &Cluster, algorithm: &str, opts: &Options) -> u64 {
    compose_input_hash(traffic.hash(), setting_hash(cluster, algorithm, opts))
}

/// Meta key of an all-to-all plan's `setting_hash` (16 hex digits).
pub const SETTING_HASH: &str = "setting_hash";

/// Hash of the cluster, algorithm and options a plan is computed from (all but the matrix).
pub fn setting_hash(cluster: &Cluster, algorithm: &str, opts: &Options) -> u64 {
    let mut h = crate::plan::hash::Fnv64::new();
    h.write(cluster.spec().as_bytes());
    h.write(b";");
    h.write(algorithm.as_bytes());
    h.write(b";");
    for (k, v) in opts {
        h.write(k.as_bytes());
        h.write(b"=");
        h.write(v.as_bytes());
        h.write(b";");
    }
    h.finish()
}

/// `input_hash` from the matrix's hash (`Traffic::hash`) and the `setting_hash`.
pub fn compose_input_hash(traffic_hash: u64, setting: u64) -> u64 {
    let mut h = crate::plan::hash::Fnv64::new();
    h.write_u64s(&[traffic_hash, setting]);
    h.finish()
}
