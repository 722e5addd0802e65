//! What a simulation reports: time, bandwidths in the papers' and nccl-tests'
//! conventions, the lower bound beside it, per-transfer and per-step times,
//! and per-link-class utilisation.
use super::engine::{Flows, Timeline};
use super::links::{LinkClass, Links};
use crate::bound::{lower_bound, Bound};
use crate::error::Result;
use crate::plan::{Collective, Plan};
use crate::topology::{Cluster, Tier};

/// First start and last end of one step's transfers (NaN for an empty step).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTime {
    pub first_start: f64,
    pub last_end: f64,
    pub transfers: u32,
}

/// Utilisation of one link class over the whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkClassUse {
    pub class: LinkClass,
    pub links: usize,
    /// Bytes carried, summed over the links of the class (a two-hop byte counts twice).
    pub bytes: f64,
    /// bytes / (total capacity of the class × completion time).
    pub utilisation: f64,
    pub busiest_link: String,
    pub busiest_utilisation: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimReport {
    /// Completion time of the last transfer, seconds.
    pub time_s: f64,
    pub transfers: usize,
    /// Bytes moved by the plan's transfers (relays counted each time they move).
    /// 128-bit: relayed bytes count each time they move, which can pass 2^64.
    pub bytes_moved: u128,
    /// The collective's size per rank in nccl-tests' convention (see `collective_bytes_per_rank`).
    pub bytes_per_rank: f64,
    /// bytes_per_rank / time: for all-to-all the papers' total bytes / GPUs / time.
    pub algbw: f64,
    /// nccl-tests bus bandwidth: algbw × (n-1)/n (× 2 for allreduce).
    pub busbw: f64,
    /// Lower bound (all-to-all only) and time / bound.
    pub lower_bound: Option<Bound>,
    pub ratio_to_bound: Option<f64>,
    pub transfer_start: Vec<f64>,
    pub transfer_end: Vec<f64>,
    pub steps: Vec<StepTime>,
    /// One entry per class in the order nic_up, nic_down, scaleup, local (classes without links omitted).
    pub links: Vec<LinkClassUse>,
    pub scaleout_bytes: u128,
    /// Event windows processed and max-min recomputations (cost of the run).
    pub windows: usize,
    pub recomputations: usize,
}

/// nccl-tests' size S per rank: all-to-all: the mean send buffer (matrix total / n,
/// the papers' total bytes / GPUs); allgather: the output of one rank (n × shard);
/// reduce-scatter: the input of one rank (n × shard); allreduce: the buffer.
pub fn collective_bytes_per_rank(c: &Collective) -> f64 {
    let n = c.num_ranks() as f64;
    match c {
        Collective::AllToAll { traffic } => traffic.total() as f64 / n,
        Collective::AllGather { shard_bytes, .. } | Collective::ReduceScatter { shard_bytes, .. } => n * *shard_bytes as f64,
        Collective::AllReduce { bytes, .. } => *bytes as f64,
    }
}

/// nccl-tests' busbw factor.
pub fn busbw_factor(c: &Collective) -> f64 {
    let n = c.num_ranks() as f64;
    let f = (n - 1.0) / n;
    match c {
        Collective::AllReduce { .. } => 2.0 * f,
        _ => f,
    }
}

pub fn build(plan: &Plan, cluster: &Cluster, links: &Links, flows: &Flows, tl: Timeline) -> Result<SimReport> {
    let time_s = tl.end.iter().copied().fold(0.0, f64::max);
    let bytes_moved: u128 = plan.transfers.iter().map(|t| u128::from(plan.transfer_bytes(t))).sum();
    let scaleout_bytes: u128 = plan.transfers.iter().filter(|t| t.tier == Tier::ScaleOut).map(|t| u128::from(plan.transfer_bytes(t))).sum();
    let bytes_per_rank = collective_bytes_per_rank(&plan.collective);
    let algbw = if time_s > 0.0 { bytes_per_rank / time_s } else { 0.0 };
    let busbw = algbw * busbw_factor(&plan.collective);
    let lower = match &plan.collective {
        Collective::AllToAll { traffic } => Some(lower_bound(traffic, cluster)?),
        _ => None,
    };
    let ratio_to_bound = lower.as_ref().filter(|b| b.seconds > 0.0).map(|b| time_s / b.seconds);

    let mut steps = vec![StepTime { first_start: f64::NAN, last_end: f64::NAN, transfers: 0 }; plan.num_steps() as usize];
    for (i, t) in plan.transfers.iter().enumerate() {
        let s = &mut steps[t.step as usize];
        s.transfers += 1;
        s.first_start = if s.first_start.is_nan() { tl.start[i] } else { s.first_start.min(tl.start[i]) };
        s.last_end = if s.last_end.is_nan() { tl.end[i] } else { s.last_end.max(tl.end[i]) };
    }

    let mut carried = vec![0f64; links.len()];
    for f in 0..flows.transfer.len() {
        for &l in flows.links_of(f) {
            carried[l as usize] += flows.bytes[f];
        }
    }
    let mut classes = Vec::new();
    for class in LinkClass::ALL {
        let ids: Vec<usize> = (0..links.len()).filter(|&l| links.class[l] == class).collect();
        if ids.is_empty() {
            continue;
        }
        let use_of = |l: usize| if time_s > 0.0 { carried[l] / (links.capacity[l] * time_s) } else { 0.0 };
        let bytes: f64 = ids.iter().map(|&l| carried[l]).sum();
        let cap: f64 = ids.iter().map(|&l| links.capacity[l]).sum();
        // Busiest: highest utilisation, lowest id on ties.
        let busiest = ids.iter().copied().fold(ids[0], |b, l| if use_of(l) > use_of(b) { l } else { b });
        classes.push(LinkClassUse {
            class,
            links: ids.len(),
            bytes,
            utilisation: if time_s > 0.0 { bytes / (cap * time_s) } else { 0.0 },
            busiest_link: links.name(busiest as u32),
            busiest_utilisation: use_of(busiest),
        });
    }
    Ok(SimReport {
        time_s,
        transfers: plan.transfers.len(),
        bytes_moved,
        bytes_per_rank,
        algbw,
        busbw,
        lower_bound: lower,
        ratio_to_bound,
        transfer_start: tl.start,
        transfer_end: tl.end,
        steps,
        links: classes,
        scaleout_bytes,
        windows: tl.windows,
        recomputations: tl.recomputations,
    })
}
