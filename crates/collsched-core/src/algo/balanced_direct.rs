//! balanced_direct (FLASH-A in FAST's terms): FAST's intra-server balancing,
//! then every merged peer transfer (s,c)→(d,c) for all d at once, then
//! redistribution. No stages: servers fan out to all peers together, so it is
//! incast-prone across servers but needs only three steps.
use crate::algo::fast::{balance, pipeline, predict_ns};
use crate::error::Result;
use crate::plan::{Options, Plan};
use crate::topology::Cluster;
use crate::traffic::Traffic;

pub fn plan(traffic: &Traffic, cluster: &Cluster, opts: &Options) -> Result<Plan> {
    if let Some(k) = opts.keys().next() {
        return crate::invalid!("unknown option '{k}' for balanced_direct (it takes none)");
    }
    Ok(balance::with_balanced(traffic, cluster, |bal| {
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
        let (mut b, loads) = pipeline::assemble("balanced_direct", traffic, cluster, bal, &rounds, false);
        b.set_meta("predicted_time_ns", predict_ns(cluster, &loads));
        b.set_decisions(crate::algo::fast::decisions_of(bal, &rounds));
        b.finish()
    }))
}
