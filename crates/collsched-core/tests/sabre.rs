//! SABRE's algorithms and selector: every plan is executed byte by byte (in step
//! order and in a random order that respects only the dependencies) and checked by
//! the verifier; balancing and selection properties are asserted on top.
mod sabre_common;
use collsched_core::algo::auto::plan_nic_loads as nic_loads;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::{Options, Plan};
use collsched_core::traffic::generators;
use collsched_core::traffic::stats;
use collsched_core::{Cluster, Tier, Traffic};
use sabre_common::{check, cluster, opts, sparse_matrix};
use proptest::prelude::*;

/// SABRE's dependent transfers read what their deps delivered: strictly later steps.
fn assert_strict_steps(p: &Plan) {
    for (id, t) in p.transfers.iter().enumerate() {
        for &d in p.deps_of(t) {
            assert!(p.transfers[d as usize].step < t.step, "transfer {id} shares a step with its dependency {d}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn sabre_plans_deliver_every_byte(servers in 1u32..5, gpus in 1u32..7, nic_div in 1u32..4, density in 10u64..101, seed in 0u64..1_000_000) {
        // nics = gpus (G = m) or fewer (G > m GPUs share a NIC).
        let nics = (gpus / nic_div).max(1);
        let c = cluster(servers, gpus, nics);
        let t = sparse_matrix(c.num_gpus() as usize, 60, density, seed);
        for alg in ["sabre_skewed", "sabre_light", "sabre"] {
            let p = plan_all_to_all(&t, &c, alg, &Options::new()).unwrap();
            check(&p, &t, &c, seed);
            assert_strict_steps(&p);
            prop_assert_eq!(&p, &plan_all_to_all(&t, &c, alg, &Options::new()).unwrap());
        }
        let tight = plan_all_to_all(&t, &c, "sabre_skewed", &opts(&[("alpha_permille", "1000")])).unwrap();
        check(&tight, &t, &c, seed + 1);
    }
}

#[test]
fn skewed_balances_every_nic_within_alpha() {
    // A hot sender and a hot receiver: the skewed plan spreads each node's scale-out
    // volume over its NICs within α of the node's mean (plus one block of rounding).
    for (servers, gpus, nics) in [(4u32, 4u32, 4u32), (3, 8, 4), (2, 6, 4), (3, 8, 8)] {
        let c = cluster(servers, gpus, nics);
        let n = c.num_gpus() as usize;
        let mut t = sparse_matrix(n, 1000, 100, 7);
        for j in 0..n {
            t.set(1, j, 200_000);
            t.set(j, n - 1, 150_000);
        }
        let p = plan_all_to_all(&t, &c, "sabre_skewed", &Options::new()).unwrap();
        check(&p, &t, &c, 3);
        let (up, down) = nic_loads(&p, &c);
        let g = gpus as usize;
        let m = nics as usize;
        for node in 0..servers as usize {
            let node_send: u64 = (0..g).map(|s| (0..n).filter(|&j| j / g != node).map(|j| t.get(node * g + s, j)).sum::<u64>()).sum();
            let node_recv: u64 = (0..g).map(|d| (0..n).filter(|&i| i / g != node).map(|i| t.get(i, node * g + d)).sum::<u64>()).sum();
            for k in 0..m {
                let slack = (servers as u64) * (g as u64); // ceil() of each subproblem's limits
                assert!(up[node * m + k] * 1000 <= 1050 * node_send / m as u64 + slack * 1000, "send NIC {k} of node {node}: {} vs mean {}", up[node * m + k], node_send / m as u64);
                assert!(down[node * m + k] * 1000 <= 1050 * node_recv / m as u64 + slack * 1000, "recv NIC {k} of node {node}: {} vs mean {}", down[node * m + k], node_recv / m as u64);
            }
        }
        // Fanout on the same matrix is far from balanced.
        let f = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        let (fup, _) = nic_loads(&f, &c);
        assert!(fup.iter().max() > up.iter().max());
    }
}

#[test]
fn skewed_messages_are_batched_per_proxy_pair() {
    let c = cluster(4, 4, 4);
    let t = generators::uniform(16, 10_000, 5).unwrap();
    let p = plan_all_to_all(&t, &c, "sabre_skewed", &Options::new()).unwrap();
    check(&p, &t, &c, 1);
    let mut pairs = std::collections::BTreeSet::new();
    for x in p.transfers.iter().filter(|x| x.tier == Tier::ScaleOut) {
        assert_eq!(c.local_index(x.src), c.local_index(x.dst), "scale-out stays inside a communication group");
        assert!(pairs.insert((x.src, x.dst)), "one message per proxy pair");
    }
    // At most G × N × (N-1) scale-out messages instead of P × (P - G).
    assert!(pairs.len() <= 4 * 4 * 3);
    assert_eq!(p.num_steps(), 3);
}

#[test]
fn light_forwards_through_the_destination_index_and_overlaps() {
    let c = cluster(3, 4, 2);
    let t = generators::uniform(12, 10_000, 9).unwrap();
    let p = plan_all_to_all(&t, &c, "sabre_light", &Options::new()).unwrap();
    check(&p, &t, &c, 2);
    for x in p.transfers.iter().filter(|x| x.tier == Tier::ScaleOut) {
        assert_eq!(c.nic_of(x.src), c.nic_of(x.dst), "scale-out stays inside a communication group");
        if x.step == 1 {
            assert_eq!(c.local_index(x.src), c.local_index(x.dst), "forwarding is rail-aligned");
            assert!(x.dep_end > x.dep_begin);
        }
    }
    // Phase 1 has both direct scale-out and forwarding scale-up; phase 2 has both too.
    for step in 0..2 {
        for tier in [Tier::ScaleOut, Tier::ScaleUp] {
            assert!(p.transfers.iter().any(|x| x.step == step && x.tier == tier), "step {step} lacks {tier:?}");
        }
    }
}

#[test]
fn selector_follows_the_mtm_threshold() {
    let c = Cluster::parse("perlmutter:4").unwrap();
    let balanced = generators::balanced(16, 1 << 16).unwrap();
    let p = plan_all_to_all(&balanced, &c, "sabre", &Options::new()).unwrap();
    assert_eq!(p.meta["choice"], "sabre_light");
    assert_eq!(p.meta["mtm"], "1.000");
    let mut hot = balanced.clone();
    for i in 4..16 {
        hot.set(i, 0, 1 << 20);
    }
    let m = stats::mtm(&hot, &c).unwrap().overall();
    assert!(m.to_f64() > 2.2);
    let p = plan_all_to_all(&hot, &c, "sabre", &Options::new()).unwrap();
    assert_eq!(p.meta["choice"], "sabre_skewed");
    assert!(p.meta["reason"].contains("threshold 2.200"));
    check(&p, &hot, &c, 4);
    // A threshold above the MTM flips the choice; the plan equals the named algorithm's steps.
    let high = opts(&[("mtm_threshold_milli", &(m.milli() as u64 + 1).to_string())]);
    let q = plan_all_to_all(&hot, &c, "sabre", &high).unwrap();
    assert_eq!(q.meta["choice"], "sabre_light");
    let light = plan_all_to_all(&hot, &c, "sabre_light", &Options::new()).unwrap();
    assert_eq!(q.transfers, light.transfers);
    assert_eq!(q.segments, light.segments);
    // Exactly at the threshold stays light ("exceeds" selects skewed).
    let eq = MtmAt::threshold(&hot, &c);
    let r = plan_all_to_all(&hot, &c, "sabre", &opts(&[("mtm_threshold_milli", &eq.to_string())])).unwrap();
    assert_eq!(r.meta["choice"], if m.cmp_milli(eq as u32) == std::cmp::Ordering::Greater { "sabre_skewed" } else { "sabre_light" });
}

struct MtmAt;
impl MtmAt {
    fn threshold(t: &Traffic, c: &Cluster) -> u64 {
        stats::mtm(t, c).unwrap().overall().milli() as u64
    }
}

#[test]
fn bad_options_are_rejected() {
    let c = cluster(2, 4, 4);
    let t = generators::uniform(8, 100, 1).unwrap();
    let e = plan_all_to_all(&t, &c, "sabre_skewed", &opts(&[("alpha_permille", "999")])).unwrap_err();
    assert!(e.to_string().contains("alpha_permille"));
    let e = plan_all_to_all(&t, &c, "sabre_light", &opts(&[("alpha_permille", "1050")])).unwrap_err();
    assert!(e.to_string().contains("unknown option 'alpha_permille'"));
    let e = plan_all_to_all(&t, &c, "sabre", &opts(&[("mtm_threshold", "2")])).unwrap_err();
    assert!(e.to_string().contains("unknown option"));
    assert!(plan_all_to_all(&t, &c, "sabre", &opts(&[("mtm_threshold_milli", "x")])).is_err());
}

#[test]
fn zero_matrix_and_single_server() {
    for (s, g, m) in [(1u32, 4u32, 4u32), (3, 2, 1), (1, 1, 1)] {
        let c = cluster(s, g, m);
        let n = c.num_gpus() as usize;
        for t in [Traffic::zeros(n), generators::uniform(n, 100, 3).unwrap()] {
            for alg in ["sabre_skewed", "sabre_light", "sabre"] {
                let p = plan_all_to_all(&t, &c, alg, &Options::new()).unwrap();
                check(&p, &t, &c, 5);
            }
        }
    }
}
