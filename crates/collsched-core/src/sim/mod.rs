//! Event-driven simulator over a Plan's dependency DAG.
//!
//! A transfer becomes ready when its dependencies have completed (and, with
//! `barrier_steps`, when every transfer of an earlier step has), pays its
//! tier's alpha (with `warm_connections`, overlapped with the previous piece of its
//! stream), then its bytes flow over every link of its route, sharing
//! bandwidth max-min fairly with every other flowing transfer. It predicts; it
//! does not plan, so it uses floating point, but it is single-threaded with
//! fixed iteration orders and therefore deterministic. See docs/simulator.md.
pub mod engine;
pub mod fairshare;
pub mod links;
pub mod protocol;
pub mod report;

use crate::error::Result;
use crate::invalid;
use crate::plan::Plan;
use crate::topology::hardware::PPM;
use crate::topology::Cluster;

pub use links::LinkClass;
pub use engine::startup_extra;
pub use report::{LinkClassUse, SimReport, StepTime};

/// Optional incast model: a NIC downlink receiving more than `threshold`
/// concurrent flows delivers only `goodput` × its bandwidth (PFC pauses,
/// drops and retransmissions on real fabrics). Off by default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Incast {
    pub threshold: u32,
    pub goodput: f64,
}

/// Which model times the plan (docs/simulator.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Model {
    /// The ideal fluid model: links at their peaks, per-tier alpha, max-min fair sharing.
    /// The cluster's hardware terms are ignored. The papers' own comparisons use it.
    Fluid,
    /// The fluid model plus the cluster's hardware terms (`Cluster::hw`: efficiency per
    /// tier, pipeline chunk, per-stage and per-peer costs, incast; for collective-kernel plans
    /// their own efficiencies and step cost and the low-latency protocol). With neutral terms
    /// (a `custom:` cluster, a preset without fitted constants) it is the fluid model exactly.
    #[default]
    Hardware,
}

impl Model {
    pub fn parse(name: &str) -> Result<Model> {
        match name {
            "fluid" => Ok(Model::Fluid),
            "hardware" => Ok(Model::Hardware),
            _ => invalid!("simulator model must be 'fluid' or 'hardware', got '{name}'"),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Model::Fluid => "fluid",
            Model::Hardware => "hardware",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimOptions {
    /// Fluid or hardware model (default: hardware, which is fluid on clusters with neutral terms).
    pub model: Model,
    /// Also order steps: a transfer of step s starts only after every transfer of
    /// steps < s completed (the runtime's synchronous step executor).
    pub barrier_steps: bool,
    /// Event coalescing tolerance (see `engine`): events within `tolerance`
    /// relative time of the earliest are merged, as long as no link is left more
    /// than `tolerance` idle. Merging only delays events. 0 = exact.
    pub tolerance: f64,
    pub incast: Option<Incast>,
    /// Warm connections: a transfer that depends on an earlier transfer between the same
    /// two ranks (the previous piece of its stream, e.g. an MSCCL threadblock's previous
    /// step) pays its alpha from its other dependencies, overlapped with that predecessor:
    /// it starts at max(predecessor's end, other dependencies' end + alpha). NCCL's
    /// connections run ahead of the receiver (8 FIFO slots), so a stream pays its start-up
    /// latency once, not once per piece. Off by default: every transfer pays alpha after
    /// all its dependencies (a runtime that posts each piece only when the last one is done).
    pub warm_connections: bool,
    /// Optional shared core link (bytes/s) that every scale-out flow crosses besides its
    /// NIC uplink and downlink: an oversubscribed core, or the aggregate rate at which an
    /// emulating host can push shaped traffic (the namespace testbed's CPU, docs/testbed.md).
    /// It shares max-min fairly like any link and only ever removes capacity. Off by default.
    pub core_bw: Option<f64>,
}

/// Default coalescing tolerance: 0.1% (measured cost and error in docs/simulator.md).
pub const DEFAULT_TOLERANCE: f64 = 1e-3;

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { model: Model::Hardware, barrier_steps: false, tolerance: DEFAULT_TOLERANCE, incast: None, warm_connections: false, core_bw: None }
    }
}

fn check(plan: &Plan, cluster: &Cluster, opts: &SimOptions) -> Result<()> {
    cluster.validate()?;
    plan.check_shape()?;
    if plan.num_ranks() != cluster.num_gpus() {
        return invalid!("plan is for {} ranks but cluster {} has {} GPUs", plan.num_ranks(), cluster.name, cluster.num_gpus());
    }
    if plan.gpus_per_server != cluster.gpus_per_server {
        return invalid!("plan was made for {} GPUs per server but cluster {} has {}", plan.gpus_per_server, cluster.name, cluster.gpus_per_server);
    }
    if !(opts.tolerance >= 0.0 && opts.tolerance < 1.0) {
        return invalid!("simulator tolerance must be in [0, 1), got {}", opts.tolerance);
    }
    if let Some(m) = opts.incast {
        if !(m.goodput > 0.0 && m.goodput <= 1.0) {
            return invalid!("incast goodput must be in (0, 1], got {}", m.goodput);
        }
    }
    if let Some(bw) = opts.core_bw {
        if !(bw.is_finite() && bw > 0.0) {
            return invalid!("core bandwidth must be a positive number of bytes/s, got {bw}");
        }
    }
    for (i, t) in plan.transfers.iter().enumerate() {
        let want = cluster.tier(t.src, t.dst);
        if t.tier != want {
            return invalid!("transfer {i}: {}→{} is tagged {} but on cluster {} it is {}", t.src, t.dst, t.tier.name(), cluster.name, want.name());
        }
        for &d in plan.deps_of(t) {
            if d as usize >= i {
                return invalid!("transfer {i}: depends on transfer {d}, which does not come before it");
            }
            if opts.barrier_steps && plan.transfers[d as usize].step > t.step {
                return invalid!("transfer {i} (step {}) depends on transfer {d} of later step {}: deadlock under barrier_steps", t.step, plan.transfers[d as usize].step);
            }
        }
    }
    Ok(())
}

/// Simulate `plan` on `cluster`.
pub fn simulate(plan: &Plan, cluster: &Cluster, opts: &SimOptions) -> Result<SimReport> {
    check(plan, cluster, opts)?;
    let fluid;
    let cluster = if opts.model == Model::Fluid && !cluster.hw.is_neutral() {
        fluid = Cluster { hw: Default::default(), ..cluster.clone() };
        &fluid
    } else {
        cluster
    };
    // A collective-kernel plan runs at the collective kernels' efficiencies (`coll_eff_*`).
    let coll;
    let cluster = if plan.is_collective_kernel() && cluster.hw.for_collective_kernels() != cluster.hw {
        coll = Cluster { hw: cluster.hw.for_collective_kernels(), ..cluster.clone() };
        &coll
    } else {
        cluster
    };
    // The cluster's incast term, unless the caller set one explicitly.
    let hw = cluster.hw;
    let incast = opts.incast.or((hw.incast_flows > 0).then(|| Incast { threshold: hw.incast_flows, goodput: hw.incast_goodput() }));
    let opts = &SimOptions { incast, ..*opts };
    let mut links = links::Links::new(cluster).with_core(opts.core_bw);
    let ll = protocol::low_latency(plan, cluster, opts.barrier_steps);
    // Each low-latency transfer's own rate cap, in wire bytes (data rate ll_bw).
    let capped = ll.iter().filter(|&&x| x).count();
    let ll_caps = (hw.ll_bw > 0 && capped > 0).then(|| links.add_private(capped, hw.ll_bw as f64 * PPM as f64 / hw.ll_payload_ppm as f64));
    let flows = engine::Flows::build(plan, &links, &ll, hw.ll_payload_ppm, ll_caps);
    let timeline = engine::Engine::new(plan, cluster, &links, &flows, opts, &ll).run().map_err(crate::error::Error::InvalidInput)?;
    report::build(plan, cluster, &links, &flows, timeline)
}
