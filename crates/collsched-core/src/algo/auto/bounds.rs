//! Lower bounds on the cost model's prediction (`cost::predict_ns`), cheap enough to
//! prune candidates before they are predicted: from the NIC loads of a plan or of the
//! matrix alone, and along a plan's dependency chains. Property-tested never to exceed
//! the prediction (tests/auto.rs).
use super::cost::{drain_ns, Drain};
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
    // A per-rank table: `global_nic_of` divides twice per call.
    let nic: Vec<u32> = (0..cluster.num_gpus()).map(|r| cluster.global_nic_of(r)).collect();
    let nic_of = |r: u32| nic.get(r as usize).copied().unwrap_or_else(|| cluster.global_nic_of(r)) as usize;
    for t in &plan.transfers {
        if t.tier == Tier::ScaleOut {
            let b = plan.transfer_bytes(t);
            up[nic_of(t.src)] += b;
            down[nic_of(t.dst)] += b;
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
    let mut cp = vec![0u64; plan.transfers.len()];
    let mut most = 0;
    // Per tier (`Tier as usize`): alpha, the fastest link's divider, and whether a ring
    // halves the bytes (`min_run_ns` without a hardware division per transfer).
    let per_tier = [Tier::Local, Tier::ScaleUp, Tier::ScaleOut].map(|tier| {
        let (bw, halve) = fastest_link(cluster, tier);
        (cluster.alpha_ns(tier), Drain::new(bw), halve)
    });
    for (id, t) in plan.transfers.iter().enumerate() {
        let ready = plan.deps_of(t).iter().filter(|&&d| (d as usize) < id).map(|&d| cp[d as usize]).max().unwrap_or(0);
        let (alpha, bw, halve) = per_tier[t.tier as usize];
        let bytes = plan.transfer_bytes(t);
        cp[id] = ready.saturating_add(alpha).saturating_add(bw.ns(if halve { bytes.div_ceil(2) } else { bytes }));
        most = most.max(cp[id]);
    }
    most
}

/// The fastest link a transfer of `tier` uses, and whether only half of its bytes must
/// cross it (a ring, where an antipodal transfer splits over both directions).
fn fastest_link(cluster: &Cluster, tier: Tier) -> (u64, bool) {
    match tier {
        Tier::Local => (cluster.local_copy_bw, false),
        Tier::ScaleOut => (cluster.nic_bw, false),
        Tier::ScaleUp => match cluster.scaleup {
            ScaleUp::Switch { port_bw } => (port_bw, false),
            ScaleUp::Ring { link_bw } => (link_bw, true),
            ScaleUp::FullMesh { link_bw } | ScaleUp::HybridCubeMesh { link_bw } => (link_bw, false),
        },
    }
}

/// The least time the model lets a transfer of `bytes` on `tier` run after its release:
/// its bytes over the fastest link of the tier (half of them on a ring, where an
/// antipodal transfer splits over both directions). Both the processor-sharing and the
/// drain terms of the model include the transfer's own bytes on every link it uses.
fn min_run_ns(cluster: &Cluster, tier: Tier, bytes: u64) -> u64 {
    let (bw, halve) = fastest_link(cluster, tier);
    drain_ns(if halve { bytes.div_ceil(2) } else { bytes }, bw)
}

/// A lower bound on `predict_ns` of `sabre_skewed`'s plan (default options) from the matrix,
/// without planning it: its NIC bound raised by the phases around each NIC link. On a link,
/// every message T of the last dependency level present with the most bytes (its level's
/// total is then T's processor-sharing bytes) finishes no earlier than
/// * alpha + the link's whole load / bandwidth (the model's "behind" term: lower levels'
///   bytes go first and T shares with all of its level: the NIC bound), and
/// * the level's earliest release + the level's bytes / bandwidth (the drain term and T's
///   processor-sharing term both reach it). A message carrying gathered pieces (level 1)
///   is released a scale-out alpha after its largest gather message, which finishes no
///   earlier than its scale-up alpha plus its bytes over the fastest scale-up link;
///   messages carrying only the proxy's own pieces have no dependency (level 0);
///
/// and every distribution message waiting for T starts a scale-up alpha after T and runs
/// for its bytes at the least. Property-tested ≤ the prediction (tests/auto.rs).
pub fn sabre_skewed_lower_bound_ns(traffic: &crate::traffic::Traffic, cluster: &Cluster) -> u64 {
    let messages = crate::algo::sabre::skewed_scaleout_messages(traffic, cluster);
    let nics = (cluster.servers * cluster.nics_per_server) as usize;
    let (alpha_up, alpha_out) = (cluster.alpha_ns(Tier::ScaleUp), cluster.alpha_ns(Tier::ScaleOut));
    // Per (NIC, direction): all bytes, and of the last level present (1 = with gathered
    // pieces, else 0) its bytes, earliest release bound, largest message and the longest
    // tail after a message of that size (every one of them bounds the prediction).
    #[derive(Clone, Copy)]
    struct Link {
        load: u64,
        level: u8,
        level_bytes: u64,
        release: u64,
        largest: u64,
        tail: u64,
    }
    let mut links = vec![Link { load: 0, level: 0, level_bytes: 0, release: u64::MAX, largest: 0, tail: 0 }; 2 * nics];
    for m in &messages {
        let level = u8::from(m.gather_max > 0);
        let release = if level == 1 { alpha_up.saturating_add(min_run_ns(cluster, Tier::ScaleUp, m.gather_max)) } else { 0 }.saturating_add(alpha_out);
        let tail = if m.distribution_max == 0 { 0 } else { alpha_up.saturating_add(min_run_ns(cluster, Tier::ScaleUp, m.distribution_max)) };
        for at in [2 * cluster.global_nic_of(m.src) as usize, 2 * cluster.global_nic_of(m.dst) as usize + 1] {
            let l = &mut links[at];
            l.load = l.load.saturating_add(m.bytes);
            if level > l.level || l.release == u64::MAX {
                *l = Link { load: l.load, level, level_bytes: 0, release: u64::MAX, largest: 0, tail: 0 };
            }
            if level < l.level {
                continue;
            }
            l.level_bytes = l.level_bytes.saturating_add(m.bytes);
            l.release = l.release.min(release);
            if m.bytes > l.largest {
                (l.largest, l.tail) = (m.bytes, tail);
            } else if m.bytes == l.largest {
                l.tail = l.tail.max(tail);
            }
        }
    }
    let mut most = 0u64;
    for l in &links {
        if l.release == u64::MAX {
            continue; // no message on this link
        }
        let last = alpha_out.saturating_add(drain_ns(l.load, cluster.nic_bw)).max(l.release.saturating_add(drain_ns(l.level_bytes, cluster.nic_bw)));
        most = most.max(last.saturating_add(l.tail));
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

/// Lower bounds on `predict_ns` of FAST's plan from its scale-out transfers before it is
/// assembled (`fast::plan_unless`): `(chain, nic)`. `nic` is `nic_lower_bound_ns` of the plan
/// (its scale-out bytes per NIC are the transfers' bytes). `chain` follows the per-NIC round
/// order alone: a transfer depends on every transfer of its sending NIC's previous sending
/// round and of its receiving NIC's previous receiving round, so
/// `cp(t) = max(those cp) + alpha + bytes / nic_bw` is the plan's critical path restricted to
/// those dependencies (balancing and redistribution left out), hence ≤
/// `critical_path_lower_bound_ns` of the plan ≤ the prediction. Each round adds a scale-out
/// alpha on every NIC's chain: FAST's many stages cost latency that one-round plans do not.
pub fn fast_preview_bounds_ns(preview: &crate::algo::fast::ScaleoutPreview, cluster: &Cluster) -> (u64, u64) {
    let nics = (cluster.servers * cluster.nics_per_server) as usize;
    let (alpha, bw) = (cluster.alpha_scaleout_ns, Drain::new(cluster.nic_bw));
    // Per NIC and side (sends at 2·nic, receives at 2·nic + 1): the latest finish over the
    // last round it was active in before the current one (`last`), over its latest round
    // (`cur`), and that round's number (`round`; usize::MAX: none yet).
    let (mut last, mut cur, mut round) = (vec![0u64; 2 * nics], vec![0u64; 2 * nics], vec![usize::MAX; 2 * nics]);
    let (mut up, mut down) = (vec![0u64; nics], vec![0u64; nics]);
    let mut most = 0u64;
    preview.for_each_transfer(|k, snic, rnic, bytes| {
        let (a, b) = (2 * snic, 2 * rnic + 1);
        let before = |x: usize| if round[x] == k { last[x] } else { cur[x] };
        let cp = before(a).max(before(b)).saturating_add(alpha).saturating_add(bw.ns(bytes));
        most = most.max(cp);
        for x in [a, b] {
            if round[x] == k {
                cur[x] = cur[x].max(cp);
            } else {
                last[x] = cur[x];
                cur[x] = cp;
                round[x] = k;
            }
        }
        up[snic] += bytes;
        down[rnic] += bytes;
    });
    (most, nic_bound(cluster, &up, &down))
}
