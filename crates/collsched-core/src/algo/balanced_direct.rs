//! balanced_direct (FLASH-A in FAST's terms): FAST's intra-server balancing,
//! then every merged peer transfer (s,c)→(d,c) for all d at once, then
//! redistribution. No stages: servers fan out to all peers together, so it is
//! incast-prone across servers but needs only three steps.
use crate::algo::fast::{balance, decisions_of, pipeline, predict_ns, Workspace};
use crate::error::Result;
use crate::plan::rank_plan::RankPlan;
use crate::plan::{Collective, Options, Plan, PlanBuilder};
use crate::topology::Cluster;
use crate::traffic::Traffic;

fn reject_options(opts: &Options) -> Result<()> {
    if let Some(k) = opts.keys().next() {
        return crate::invalid!("unknown option '{k}' for balanced_direct (it takes none)");
    }
    Ok(())
}

pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    plan_in(&mut Workspace::default(), traffic, cluster, opts)
}

/// `plan` in the caller's workspace.
pub fn plan_in(ws: &mut Workspace, traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    reject_options(opts)?;
    let b = PlanBuilder::new("balanced_direct", Collective::AllToAll { traffic: traffic.owned() }, cluster.gpus_per_server);
    Ok(build(ws, traffic, cluster, b).0.finish())
}

/// `rank`'s part of the plan (see `fast::plan_rank`): the rank plan, the digest of the
/// decisions, and the nanoseconds spent deciding (the tile totals).
pub fn plan_rank(ws: &mut Workspace, traffic: &Traffic, cluster: &Cluster, opts: &Options, rank: u32) -> Result<(RankPlan, u64, u64)> {
    reject_options(opts)?;
    let r = rank as usize;
    let b = PlanBuilder::for_rank("balanced_direct", traffic.n() as u32, cluster.gpus_per_server, rank, traffic.row_sum(r), traffic.col_sum(r));
    let (b, decided, decide_ns) = build(ws, traffic, cluster, b);
    Ok((b.finish_rank().expect("a one-rank builder").0, decided, decide_ns))
}

/// Balance, then assemble the one round into `b` (only its rank's part for a one-rank
/// builder, from the tile totals and the rank's server's tiles alone): the builder, the
/// decisions' digest and the nanoseconds spent deciding (balancing the whole plan; the tile
/// totals for one rank).
fn build(ws: &mut Workspace, traffic: &Traffic, cluster: &Cluster, b: PlanBuilder) -> (PlanBuilder, u64, u64) {
    let t0 = std::time::Instant::now();
    let Workspace { bal, assemble } = ws;
    let rank = b.rank();
    match rank {
        Some(_) => balance::server_totals(traffic, cluster, bal),
        None => balance::balance_into(traffic, cluster, bal),
    }
    let decide_ns = t0.elapsed().as_nanos() as u64;
    let n = cluster.servers as usize;
    let mut pairs = Vec::new();
    for s in 0..n {
        for d in 0..n {
            let r = bal.server[s * n + d];
            if r > 0 {
                pairs.push((s as u32, d as u32, r));
            }
        }
    }
    let rounds = if pairs.is_empty() { vec![] } else { vec![pipeline::Round { pairs }] };
    let mut b = match rank {
        Some(r) => {
            balance::balance_rank(traffic, cluster, r as usize / cluster.gpus_per_server as usize, bal);
            // A rank plan has no meta: no prediction.
            pipeline::assemble_rank(assemble, b, cluster, bal, &rounds, false)
        }
        None => {
            let (mut b, loads) = pipeline::assemble_with(assemble, b, cluster, bal, &rounds, false);
            b.set_meta("predicted_time_ns", predict_ns(cluster, &loads));
            b
        }
    };
    let decided = decisions_of(&bal.server, &rounds);
    b.set_decisions(decided);
    (b, decided, decide_ns)
}
