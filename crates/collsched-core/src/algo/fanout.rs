//! Fan-out: every pair at once, straight from input to output. What NCCL, RCCL
//! and torch's `all_to_all_single` do; it suffers incast on skewed traffic.
use crate::error::Result;
use crate::plan::{Buf, Collective, Op, Options, Plan, PlanBuilder, Segment};
use crate::topology::Cluster;
use crate::traffic::Traffic;

pub fn plan(traffic: &Traffic, cluster: &Cluster, _opts: &Options) -> Result<Plan> {
    let n = traffic.n();
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    let mut b = PlanBuilder::new("fanout", Collective::AllToAll { traffic: traffic.clone() }, cluster.gpus_per_server);
    b.reserve(n * n, n * n);
    for i in 0..n {
        for j in 0..n {
            let len = traffic.get(i, j);
            if len == 0 {
                continue;
            }
            let seg = Segment { src_buf: Buf::Input, src_off: send[i * n + j], dst_buf: Buf::Output, dst_off: recv[i * n + j], len };
            b.transfer(i as u32, j as u32, Op::Copy, cluster.tier(i as u32, j as u32), 0, &[seg], &[]);
        }
    }
    Ok(b.finish())
}
