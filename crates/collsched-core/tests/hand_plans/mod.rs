//! Hand-written test plans shared by `sim.rs` and `hardware_model.rs`.
#![allow(dead_code)]
use collsched_core::plan::verify::verify;
use collsched_core::plan::{Buf, Collective, Op, Plan, PlanBuilder, Segment};
use collsched_core::{Cluster, Traffic};

/// A plan of hand-written transfers `(src, dst, bytes, step, deps)`; the
/// collective is the all-to-all of exactly those bytes.
pub fn plan_of(cluster: &Cluster, xfers: &[(u32, u32, u64, u32, &[u32])]) -> Plan {
    let plan = unverified_plan_of(cluster, xfers);
    verify(&plan).expect("test plan verifies");
    plan
}

/// The same without the verifier, for plans that are deliberately malformed.
pub fn unverified_plan_of(cluster: &Cluster, xfers: &[(u32, u32, u64, u32, &[u32])]) -> Plan {
    let n = cluster.num_gpus() as usize;
    let mut t = Traffic::zeros(n);
    for &(s, d, b, _, _) in xfers {
        t.set(s as usize, d as usize, t.get(s as usize, d as usize) + b);
    }
    // Real offsets (a pair listed twice gets consecutive pieces of its block), so every
    // test plan is a valid all-to-all the verifier accepts.
    let (send, recv) = (t.send_offsets(), t.recv_offsets());
    let mut used = vec![0u64; n * n];
    let mut pb = PlanBuilder::new("test", Collective::AllToAll { traffic: t }, cluster.gpus_per_server);
    for &(s, d, b, step, deps) in xfers {
        let k = s as usize * n + d as usize;
        let seg = Segment { src_buf: Buf::Input, src_off: send[k] + used[k], dst_buf: Buf::Output, dst_off: recv[k] + used[k], len: b };
        used[k] += b;
        pb.transfer(s, d, Op::Copy, cluster.tier(s, d), step, &[seg], deps);
    }
    pb.finish()
}

