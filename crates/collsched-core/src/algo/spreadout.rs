//! Spread-out all-to-all (MPI's pairwise exchange): P rounds; in round r rank i
//! sends its block to rank (i + r) mod P, so each round is a permutation and no
//! receiver sees more than one sender at a time. Round 0 is the local copy of
//! the self block. Blocks go straight from Input to Output at the torch offsets.
use crate::error::Result;
use crate::invalid;
use crate::plan::{Buf, Collective, Op, Options, Plan, PlanBuilder, Segment};
use crate::topology::Cluster;
use crate::traffic::Traffic;

pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    reject_options("spreadout", opts)?;
    let n = traffic.n();
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    let mut b = PlanBuilder::new("spreadout", Collective::AllToAll { traffic: traffic.clone() }, cluster.gpus_per_server);
    b.reserve(n * n, n * n);
    // Latest non-empty send and receive of each rank: MPI posts round r's pair only
    // after round r-1's send and receive completed on that rank.
    let mut last_send: Vec<Option<u32>> = vec![None; n];
    let mut last_recv: Vec<Option<u32>> = vec![None; n];
    let mut busy_rounds = 0u32;
    for r in 0..n {
        let mut any = false;
        // Ids of this round, applied after the round so that deps point to earlier rounds only.
        let mut sent: Vec<(usize, usize, u32)> = Vec::new();
        for i in 0..n {
            let j = (i + r) % n;
            let len = traffic.get(i, j);
            if len == 0 {
                continue;
            }
            let seg = Segment { src_buf: Buf::Input, src_off: send[i * n + j], dst_buf: Buf::Output, dst_off: recv[i * n + j], len };
            let mut deps: Vec<u32> = last_send[i].into_iter().chain(last_recv[i]).collect();
            deps.dedup();
            let id = b.transfer(i as u32, j as u32, Op::Copy, cluster.tier(i as u32, j as u32), r as u32, &[seg], &deps);
            sent.push((i, j, id));
            any = true;
        }
        for (i, j, id) in sent {
            last_send[i] = Some(id);
            last_recv[j] = Some(id);
        }
        busy_rounds += any as u32;
    }
    b.set_meta("rounds", n);
    b.set_meta("nonempty_rounds", busy_rounds);
    Ok(b.finish())
}

/// The baselines take no knobs; a typo must not pass silently.
pub(crate) fn reject_options(algorithm: &str, opts: &Options) -> Result<()> {
    match opts.keys().next() {
        None => Ok(()),
        Some(k) => invalid!("{algorithm} takes no options, got '{k}'"),
    }
}
