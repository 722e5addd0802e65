//! Lower bounds on the cost model's prediction (`cost::predict_ns`), cheap enough to
//! prune candidates before they are predicted: from the NIC loads of a plan or of the
//! matrix alone, and along a plan's dependency chains. Property-tested never to exceed
//! the prediction (tests/auto.rs).
use super::cost::drain_ns;
use crate::plan::Plan;
use crate::topology::{Cluster, ScaleUp, Tier};

/// A lower bound on `predict_ns(plan, cluster)` from the NICs alone, in O(transfers):
/// the model finishes the last transfer on a link no earlier than its alpha plus the
/// link's whole load over its bandwidth (the "behind" term counts every lower level's
/// bytes and the largest transfer of a level shares with all of its level), so the
/// prediction is at least `alpha_scaleout + max NIC load / nic_bw` (0 without scale-out).
pub fn nic_lower_bound_ns(plan: &Plan, cluster: &Cluster) -> u64 {
    let (up, down) = plan_nic_loads(plan, cluster);
    nic_bound(cluster, &up, &down)
}

/// Scale-out bytes a plan sends and receives per global NIC: (up, down).
pub fn plan_nic_loads(plan: &Plan, cluster: &Cluster) -> (Vec<u64>, Vec<u64>) {
    let nics = (cluster.servers * cluster.nics_per_server) as usize;
    let (mut up, mut down) = (vec![0u64; nics], vec![0u64; nics]);
    for t in &plan.transfers {
        if t.tier == Tier::ScaleOut {
            let b = plan.transfer_bytes(t);
            up[cluster.global_nic_of(t.src) as usize] += b;
            down[cluster.global_nic_of(t.dst) as usize] += b;
        }
    }
    (up, down)
}

/// A lower bound on `predict_ns(plan, cluster)` along dependency chains, in
/// O(transfers + deps): the model releases a transfer alpha after its dependencies finish
/// and finishes it no earlier than its release plus its bytes over each link it uses
/// (both the processor-sharing and the drain terms include its own bytes), so
/// `cp(t) = max(cp(deps)) + alpha + bytes / (fastest link of its tier)` never exceeds
/// the model's finish (ring transfers may split over two directions: half the bytes).
/// Catches plans that serialize many small rounds (spreadout), which the NIC bound misses.
pub fn critical_path_lower_bound_ns(plan: &Plan, cluster: &Cluster) -> u64 {
    let fastest = |tier: Tier| match tier {
        Tier::Local => cluster.local_copy_bw,
        Tier::ScaleOut => cluster.nic_bw,
        Tier::ScaleUp => match cluster.scaleup {
            ScaleUp::Switch { port_bw } => port_bw,
            ScaleUp::FullMesh { link_bw } | ScaleUp::Ring { link_bw } | ScaleUp::HybridCubeMesh { link_bw } => link_bw,
        },
    };
    let ring = matches!(cluster.scaleup, ScaleUp::Ring { .. });
    let mut cp = vec![0u64; plan.transfers.len()];
    let mut most = 0;
    for (id, t) in plan.transfers.iter().enumerate() {
        let ready = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| cp[d as usize]).max().unwrap_or(0);
        let bytes = plan.transfer_bytes(t);
        let bytes = if ring && t.tier == Tier::ScaleUp { bytes.div_ceil(2) } else { bytes };
        cp[id] = ready.saturating_add(cluster.alpha_ns(t.tier)).saturating_add(drain_ns(bytes, fastest(t.tier)));
        most = most.max(cp[id]);
    }
    most
}

/// How an algorithm routes scale-out bytes, for `matrix_nic_lower_bound_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Every remote block goes straight from its sender's NIC to its receiver's (fanout, spreadout).
    Direct,
    /// Rail-aligned: block (s,l)→(s',l') leaves through server s's NIC of local index l'
    /// (hierarchical; also sabre_light, whose direct blocks already share that NIC).
    Rail,
    /// Through the proxies SABRE's Algorithm 1 assigns (sabre_skewed).
    SabreProxies,
}

/// `nic_lower_bound_ns` of the plan an algorithm routing by `route` makes, computed from
/// the matrix in O(P²) without planning (tested equal to the plan's bound).
pub fn matrix_nic_lower_bound_ns(traffic: &crate::traffic::Traffic, cluster: &Cluster, route: Route) -> u64 {
    let rail = match route {
        Route::Direct => false,
        Route::Rail => true,
        Route::SabreProxies => {
            let (up, down) = crate::algo::sabre::skewed_nic_loads(traffic, cluster);
            return nic_bound(cluster, &up, &down);
        }
    };
    let nics = (cluster.servers * cluster.nics_per_server) as usize;
    let (mut up, mut down) = (vec![0u64; nics], vec![0u64; nics]);
    let n = traffic.n();
    let g = cluster.gpus_per_server as usize;
    let nic: Vec<usize> = (0..n as u32).map(|r| cluster.global_nic_of(r) as usize).collect();
    for (i, row) in traffic.data().chunks_exact(n.max(1)).enumerate() {
        let server = i / g;
        // Only remote receivers: every block outside the sender's own server.
        for (j, &b) in row.iter().enumerate() {
            if b == 0 || j / g == server {
                continue;
            }
            let via = if rail { server * g + j % g } else { i };
            up[nic[via]] += b;
            down[nic[j]] += b;
        }
    }
    nic_bound(cluster, &up, &down)
}

fn nic_bound(cluster: &Cluster, up: &[u64], down: &[u64]) -> u64 {
    let most = up.iter().chain(down).copied().max().unwrap_or(0);
    if most == 0 {
        return 0;
    }
    cluster.alpha_scaleout_ns.saturating_add(drain_ns(most, cluster.nic_bw))
}
