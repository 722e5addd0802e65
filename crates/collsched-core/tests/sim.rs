//! Simulator and lower bound: analytic cases, validation, determinism, and the
//! property that no simulated plan beats the lower bound.
use collsched_core::algo::plan_all_to_all;
use collsched_core::bound::lower_bound;
use collsched_core::plan::verify::verify;
use collsched_core::plan::{Collective, Options};
use collsched_core::sim::{simulate, Incast, Model, SimOptions};
use collsched_core::traffic::generators;
use collsched_core::{Cluster, Tier};
use proptest::prelude::*;

mod hand_plans;
use hand_plans::{plan_of, unverified_plan_of};

fn exact() -> SimOptions {
    SimOptions { tolerance: 0.0, ..SimOptions::default() }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-12)
}

const MB: u64 = 1_000_000;

#[test]
fn one_transfer_is_alpha_plus_bytes_over_bandwidth() {
    let c = Cluster::parse("h200:2").unwrap();
    for (src, dst, bw, alpha) in [(0, 8, 50e9, 6e-6), (0, 3, 450e9, 3e-6), (5, 5, 1500e9, 2e-6)] {
        let p = plan_of(&c, &[(src, dst, 64 * MB, 0, &[])]);
        for opts in [exact(), SimOptions::default()] {
            let r = simulate(&p, &c, &opts).unwrap();
            assert!(close(r.time_s, alpha + 64e6 / bw), "{src}->{dst}: {} vs {}", r.time_s, alpha + 64e6 / bw);
            assert!(close(r.transfer_start[0], alpha));
        }
    }
}

#[test]
fn zero_byte_transfer_pays_alpha_only() {
    let c = Cluster::parse("h200:2").unwrap();
    let p = plan_of(&c, &[(0, 8, 0, 0, &[]), (1, 2, 45 * MB, 1, &[0])]);
    let r = simulate(&p, &c, &exact()).unwrap();
    assert!(close(r.transfer_end[0], 6e-6));
    assert!(close(r.time_s, 6e-6 + 3e-6 + 45e6 / 450e9));
}

#[test]
fn shared_uplink_takes_twice_as_long() {
    let shared = Cluster::parse("h200:2,nics=1").unwrap();
    let own = Cluster::parse("h200:2").unwrap();
    let x: &[(u32, u32, u64, u32, &[u32])] = &[(0, 8, 50 * MB, 0, &[]), (1, 9, 50 * MB, 0, &[])];
    let t_shared = simulate(&plan_of(&shared, x), &shared, &exact()).unwrap().time_s;
    let t_own = simulate(&plan_of(&own, x), &own, &exact()).unwrap().time_s;
    assert!(close(t_own, 6e-6 + 1e-3), "{t_own}");
    assert!(close(t_shared, 6e-6 + 2e-3), "{t_shared}");
}

#[test]
fn max_min_gives_the_rest_to_flows_bottlenecked_elsewhere() {
    // Four single-GPU servers, 50 GB/s NICs. B, C, D share server 3's downlink (1/3 each);
    // A shares server 0's uplink with B and gets the 2/3 that B cannot use.
    let c = Cluster::parse("h200:4,gpus=1,nic=400Gbps").unwrap();
    let s = 30 * MB;
    let p = plan_of(&c, &[(0, 1, s, 0, &[]), (0, 3, s / 2, 0, &[]), (1, 3, s / 2, 0, &[]), (2, 3, s / 2, 0, &[])]);
    let r = simulate(&p, &c, &exact()).unwrap();
    let want = 6e-6 + 1.5 * s as f64 / 50e9;
    for i in 0..4 {
        assert!(close(r.transfer_end[i], want), "transfer {i}: {} vs {want}", r.transfer_end[i]);
    }
}

#[test]
fn dependencies_serialise() {
    let c = Cluster::parse("h200:2").unwrap();
    let p = plan_of(&c, &[(0, 8, 50 * MB, 0, &[]), (1, 9, 50 * MB, 1, &[0])]);
    let r = simulate(&p, &c, &exact()).unwrap();
    assert!(close(r.transfer_start[1], r.transfer_end[0] + 6e-6));
    assert!(close(r.time_s, 2.0 * (6e-6 + 1e-3)));
    assert_eq!(r.steps.len(), 2);
    assert!(close(r.steps[1].first_start, r.transfer_start[1]));
}

#[test]
fn warm_connections_pay_alpha_once_per_stream() {
    let c = Cluster::parse("h200:2").unwrap();
    // Three pieces of one stream 0→8 (each waits for the previous), 50 MB each at 50 GB/s.
    let p = plan_of(&c, &[(0, 8, 50 * MB, 0, &[]), (0, 8, 50 * MB, 1, &[0]), (0, 8, 50 * MB, 2, &[1])]);
    let cold = simulate(&p, &c, &exact()).unwrap();
    let warm = simulate(&p, &c, &SimOptions { warm_connections: true, ..exact() }).unwrap();
    assert!(close(cold.time_s, 3.0 * (6e-6 + 1e-3)), "{}", cold.time_s);
    assert!(close(warm.time_s, 6e-6 + 3e-3), "{}", warm.time_s);
    assert!(close(warm.transfer_start[0], 6e-6));
    assert!(close(warm.transfer_start[1], warm.transfer_end[0]));
}

#[test]
fn warm_connections_still_pay_alpha_after_data_from_elsewhere() {
    let c = Cluster::parse("h200:2").unwrap();
    // 8 relays to 9 what 0 sent it (10 MB: arrives at 6 µs + 0.2 ms). Transfer 1 is the
    // previous piece of the 8→9 stream (50 MB at 450 GB/s: ends at 3 µs + 0.111 ms, first),
    // so the relay's alpha still runs from the arrival: 0.209 ms.
    let p = plan_of(&c, &[(0, 8, 10 * MB, 0, &[]), (8, 9, 50 * MB, 0, &[]), (8, 9, 10 * MB, 1, &[0, 1])]);
    let warm = simulate(&p, &c, &SimOptions { warm_connections: true, ..exact() }).unwrap();
    let relay_ready = warm.transfer_end[0];
    assert!(warm.transfer_end[1] < relay_ready, "the stream's previous piece ends first here");
    assert!(close(warm.transfer_start[2], relay_ready + 3e-6), "{} vs {}", warm.transfer_start[2], relay_ready + 3e-6);
    // A previous piece of 100 MB (ends at 0.225 ms) hides the alpha: the relay starts when it ends.
    let p = plan_of(&c, &[(0, 8, 10 * MB, 0, &[]), (8, 9, 100 * MB, 0, &[]), (8, 9, 10 * MB, 1, &[0, 1])]);
    let warm = simulate(&p, &c, &SimOptions { warm_connections: true, ..exact() }).unwrap();
    assert!(warm.transfer_end[1] > warm.transfer_end[0] + 3e-6);
    assert!(close(warm.transfer_start[2], warm.transfer_end[1]));
}

#[test]
fn barrier_steps_orders_independent_steps() {
    let c = Cluster::parse("h200:2").unwrap();
    // No deps: steps overlap unless the barrier holds step 1 back.
    let p = plan_of(&c, &[(0, 8, 50 * MB, 0, &[]), (1, 9, 10 * MB, 1, &[])]);
    let free = simulate(&p, &c, &exact()).unwrap();
    let barrier = simulate(&p, &c, &SimOptions { barrier_steps: true, ..exact() }).unwrap();
    assert!(close(free.time_s, 6e-6 + 1e-3));
    assert!(close(barrier.time_s, 6e-6 + 1e-3 + 6e-6 + 2e-4), "{}", barrier.time_s);
    // A dependency on a later step deadlocks under the barrier: rejected up front.
    let bad = unverified_plan_of(&c, &[(0, 8, MB, 1, &[]), (1, 9, MB, 0, &[0])]);
    assert!(simulate(&bad, &c, &exact()).is_ok());
    let e = simulate(&bad, &c, &SimOptions { barrier_steps: true, ..exact() }).unwrap_err().to_string();
    assert!(e.contains("later step"), "{e}");
}

#[test]
fn ring_antipodal_transfer_splits_both_ways() {
    let c = Cluster::parse("mi250:1,gpus=4,nics=1").unwrap(); // ring of 4, 50 GB/s links
    let r = simulate(&plan_of(&c, &[(0, 2, 100 * MB, 0, &[])]), &c, &exact()).unwrap();
    assert!(close(r.time_s, 3e-6 + 50e6 / 50e9), "{}", r.time_s);
    // Adjacent: one link. Two hops on a ring of 5: one direction only.
    let r = simulate(&plan_of(&c, &[(0, 1, 100 * MB, 0, &[])]), &c, &exact()).unwrap();
    assert!(close(r.time_s, 3e-6 + 100e6 / 50e9));
    let c5 = Cluster::parse("mi250:1,gpus=5,nics=1").unwrap();
    let p = plan_of(&c5, &[(0, 2, 100 * MB, 0, &[]), (1, 2, 100 * MB, 0, &[])]);
    // Both cross link 1→2: they share it.
    let r = simulate(&p, &c5, &exact()).unwrap();
    assert!(close(r.time_s, 3e-6 + 200e6 / 50e9), "{}", r.time_s);
}

#[test]
fn cube_mesh_routes_non_neighbours_over_two_hops() {
    let c = Cluster::parse("v100:1").unwrap(); // 25 GB/s links; 0 and 5 are not adjacent (via 1)
    let p = plan_of(&c, &[(0, 5, 50 * MB, 0, &[]), (1, 5, 50 * MB, 0, &[])]);
    // 0→5 goes 0→1→5 and shares link 1→5 with the direct transfer 1→5.
    let r = simulate(&p, &c, &exact()).unwrap();
    assert!(close(r.time_s, 3e-6 + 100e6 / 25e9), "{}", r.time_s);
}

#[test]
fn incast_model_slows_a_crowded_downlink_only() {
    let c = Cluster::parse("h200:4,gpus=1").unwrap();
    let p = plan_of(&c, &[(0, 3, 10 * MB, 0, &[]), (1, 3, 10 * MB, 0, &[]), (2, 3, 10 * MB, 0, &[])]);
    let clean = simulate(&p, &c, &exact()).unwrap().time_s;
    let lossy = simulate(&p, &c, &SimOptions { incast: Some(Incast { threshold: 2, goodput: 0.5 }), ..exact() }).unwrap().time_s;
    assert!(close(clean, 6e-6 + 30e6 / 50e9));
    assert!(close(lossy, 6e-6 + 60e6 / 50e9), "{lossy}");
    let calm = simulate(&p, &c, &SimOptions { incast: Some(Incast { threshold: 3, goodput: 0.5 }), ..exact() }).unwrap().time_s;
    assert!(close(calm, clean));
}

#[test]
fn core_link_caps_only_scale_out_in_aggregate() {
    // Two servers of 2 GPUs, NIC 50 GB/s: two disjoint scale-out pairs of 10 MB run at the NIC
    // rate alone; a 60 GB/s core shares 30 GB/s to each; a scale-up transfer never crosses it.
    let c = Cluster::parse("h200:2,gpus=2").unwrap();
    let p = plan_of(&c, &[(0, 2, 10 * MB, 0, &[]), (1, 3, 10 * MB, 0, &[]), (2, 3, 10 * MB, 0, &[])]);
    let clean = simulate(&p, &c, &exact()).unwrap();
    let capped = simulate(&p, &c, &SimOptions { core_bw: Some(60e9), ..exact() }).unwrap();
    assert!(close(clean.transfer_end[0], 6e-6 + 10e6 / 50e9), "{}", clean.transfer_end[0]);
    assert!(close(capped.transfer_end[0], 6e-6 + 10e6 / 30e9), "{}", capped.transfer_end[0]);
    assert!(close(capped.transfer_end[2], clean.transfer_end[2]));
    let wide = simulate(&p, &c, &SimOptions { core_bw: Some(1e12), ..exact() }).unwrap();
    assert!(close(wide.time_s, clean.time_s));
    assert_eq!(capped.links.len(), clean.links.len(), "the core link stays out of the per-class report");
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = simulate(&p, &c, &SimOptions { core_bw: Some(bad), ..exact() }).unwrap_err().to_string();
        assert!(e.contains("core bandwidth"), "{e}");
    }
}

#[test]
fn report_fields() {
    let c = Cluster::parse("h200:2").unwrap();
    let t = generators::balanced(16, MB).unwrap();
    let p = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
    verify(&p).unwrap();
    let r = simulate(&p, &c, &SimOptions::default()).unwrap();
    assert_eq!(r.transfers, 256);
    assert_eq!(r.bytes_moved, u128::from(256 * MB));
    assert_eq!(r.scaleout_bytes, u128::from(128 * MB));
    assert!(close(r.algbw, 16e6 / r.time_s));
    assert!(close(r.busbw, r.algbw * 15.0 / 16.0));
    let b = r.lower_bound.as_ref().unwrap();
    assert!(close(r.ratio_to_bound.unwrap(), r.time_s / b.seconds));
    // Balanced fanout on rail-matched NICs reaches the scale-out bound.
    assert!(r.ratio_to_bound.unwrap() < 1.01, "{}", r.ratio_to_bound.unwrap());
    let names: Vec<&str> = r.links.iter().map(|l| l.class.name()).collect();
    assert_eq!(names, ["nic_up", "nic_down", "scaleup", "local"]);
    let up = &r.links[0];
    assert_eq!(up.links, 16);
    assert!(close(up.bytes, 128e6));
    assert!(up.utilisation > 0.95 && up.utilisation <= 1.0 + 1e-9, "{}", up.utilisation);
    assert!(up.busiest_link.starts_with("NIC uplink"), "{}", up.busiest_link);
    assert!(r.transfer_end.iter().zip(&r.transfer_start).all(|(e, s)| e >= s));
}

#[test]
fn rejects_mismatched_input() {
    let c = Cluster::parse("h200:2").unwrap();
    let p = plan_of(&c, &[(0, 8, MB, 0, &[])]);
    let other = Cluster::parse("h200:1").unwrap();
    assert!(simulate(&p, &other, &exact()).unwrap_err().to_string().contains("GPUs"));
    let regrouped = Cluster::parse("h200:4,gpus=4").unwrap();
    assert!(simulate(&p, &regrouped, &exact()).unwrap_err().to_string().contains("GPUs per server"));
    let mut wrong_tier = p.clone();
    wrong_tier.transfers[0].tier = Tier::ScaleUp;
    assert!(simulate(&wrong_tier, &c, &exact()).unwrap_err().to_string().contains("tagged"));
    let forward = unverified_plan_of(&c, &[(0, 8, MB, 0, &[1]), (1, 9, MB, 0, &[])]);
    assert!(simulate(&forward, &c, &exact()).unwrap_err().to_string().contains("does not come before"));
    assert!(simulate(&p, &c, &SimOptions { tolerance: -1.0, ..exact() }).is_err());
    assert!(simulate(&p, &c, &SimOptions { incast: Some(Incast { threshold: 1, goodput: 0.0 }), ..exact() }).is_err());
}

#[test]
fn deterministic_and_close_to_exact() {
    let c = Cluster::parse("h200:4").unwrap();
    let t = generators::zipf(32, 1.1, 256 * 1024, 7).unwrap();
    let p = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
    let a = simulate(&p, &c, &SimOptions::default()).unwrap();
    let b = simulate(&p, &c, &SimOptions::default()).unwrap();
    assert_eq!(a, b);
    let e = simulate(&p, &c, &exact()).unwrap();
    assert!(a.time_s >= e.time_s * (1.0 - 1e-3) && a.time_s <= e.time_s * 1.01, "{} vs exact {}", a.time_s, e.time_s);
    assert!(e.windows >= a.windows);
}

/// Balanced single-server fanout against the scale-up bound, per fabric.
fn single_server_ratio(spec: &str) -> f64 {
    let c = Cluster::parse(spec).unwrap();
    let n = c.num_gpus() as usize;
    let t = generators::balanced(n, 8 * MB).unwrap();
    let p = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
    // A property of the fluid model (links at their peaks): the presets' fitted hardware
    // terms (tests/hardware_model.rs) would add their efficiency to the ratio.
    simulate(&p, &c, &SimOptions { model: Model::Fluid, ..SimOptions::default() }).unwrap().ratio_to_bound.unwrap()
}

#[test]
fn balanced_single_server_fanout_reaches_the_scaleup_bound() {
    // Cube-mesh: the binding term is the cut between the two quads (four cross links),
    // which two-hop routing through the lowest common neighbour saturates exactly.
    for spec in ["h200:1", "mi300x:1", "perlmutter:1", "mi250:1,nics=8", "mi250:1,gpus=5,nics=1", "v100:1"] {
        let r = single_server_ratio(spec);
        println!("{spec}: fanout / bound = {r:.4}");
        assert!((1.0 - 1e-9..=1.02).contains(&r), "{spec}: ratio {r}");
    }
}

fn arb_cluster() -> impl Strategy<Value = Cluster> {
    (1u32..=6, 1u32..=8, 0usize..4, 1u32..=8, 1u64..=8, 0u64..=5).prop_map(|(servers, gpus, fabric, nics, bw, alpha)| {
        let (fabric, gpus) = match fabric {
            0 => ("switch", gpus),
            1 => ("mesh", gpus),
            2 => ("ring", gpus),
            _ => ("cubemesh", 8),
        };
        let spec = format!(
            "custom:{servers},gpus={gpus},fabric={fabric},nics={},nic={}GB/s,scaleup={}GB/s,alpha_scaleout={alpha}us",
            nics.min(gpus),
            25 * bw,
            20 * (9 - bw)
        );
        Cluster::parse(&spec).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn fanout_never_beats_the_lower_bound(c in arb_cluster(), seed in 0u64..1000, kind in 0usize..3, barrier in any::<bool>()) {
        let n = c.num_gpus() as usize;
        let t = match kind {
            0 => generators::uniform(n, 1 << 20, seed).unwrap(),
            1 => generators::zipf(n, 1.3, 1 << 20, seed).unwrap(),
            _ => generators::balanced(n, 1 << 18).unwrap(),
        };
        let p = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        verify(&p).unwrap();
        let b = lower_bound(&t, &c).unwrap();
        for opts in [SimOptions { barrier_steps: barrier, ..SimOptions::default() }, SimOptions { incast: Some(Incast { threshold: 2, goodput: 0.7 }), ..SimOptions::default() }, SimOptions { core_bw: Some(c.nic_bw as f64), ..SimOptions::default() }] {
            let r = simulate(&p, &c, &opts).unwrap();
            prop_assert!(r.time_s >= b.seconds * (1.0 - 1e-9), "{}: sim {} < bound {} ({})", c.spec(), r.time_s, b.seconds, b.term);
        }
    }

    /// Random DAG plans: dependencies and (with barrier_steps) step order are respected, and
    /// no schedule beats the bound. (A barrier can make a max-min schedule faster: holding
    /// a transfer back can speed up the critical path, so "barrier >= free" is not a property.)
    #[test]
    fn random_dags_respect_order_and_bound(c in arb_cluster(), seed in 0u64..1000, count in 1usize..40) {
        let n = c.num_gpus() as u64;
        let mut rng = generators::Rng::new(seed);
        let mut xf: Vec<(u32, u32, u64, u32, Vec<u32>)> = Vec::new();
        for i in 0..count {
            let (s, d) = (rng.below(n) as u32, rng.below(n) as u32);
            let deps: Vec<u32> = if i > 0 && rng.below(2) == 0 { vec![rng.below(i as u64) as u32] } else { vec![] };
            let step = deps.iter().map(|&d| xf[d as usize].3 + 1).max().unwrap_or(rng.below(3) as u32);
            xf.push((s, d, rng.below(4 << 20), step, deps));
        }
        let refs: Vec<(u32, u32, u64, u32, &[u32])> = xf.iter().map(|(s, d, b, st, deps)| (*s, *d, *b, *st, deps.as_slice())).collect();
        let p = plan_of(&c, &refs);
        let free = simulate(&p, &c, &exact()).unwrap();
        let bar = simulate(&p, &c, &SimOptions { barrier_steps: true, ..exact() }).unwrap();
        let warm = simulate(&p, &c, &SimOptions { warm_connections: true, ..exact() }).unwrap();
        let warm_bar = simulate(&p, &c, &SimOptions { warm_connections: true, barrier_steps: true, ..exact() }).unwrap();
        for r in [&free, &bar, &warm, &warm_bar] {
            for (i, t) in p.transfers.iter().enumerate() {
                prop_assert!(r.transfer_end[i] >= r.transfer_start[i]);
                for &d in p.deps_of(t) {
                    prop_assert!(r.transfer_start[i] >= r.transfer_end[d as usize]);
                }
            }
        }
        for (i, t) in p.transfers.iter().enumerate() {
            for (j, u) in p.transfers.iter().enumerate() {
                if u.step < t.step {
                    prop_assert!(bar.transfer_start[i] >= bar.transfer_end[j], "barrier: {i} started before {j} ended");
                    prop_assert!(warm_bar.transfer_start[i] >= warm_bar.transfer_end[j], "warm barrier: {i} started before {j} ended");
                }
            }
        }
        let traffic = match &p.collective { Collective::AllToAll { traffic } => traffic.clone(), _ => unreachable!() };
        let b = lower_bound(&traffic, &c).unwrap();
        prop_assert!(free.time_s >= b.seconds * (1.0 - 1e-9));
        prop_assert!(bar.time_s >= b.seconds * (1.0 - 1e-9));
        // Warm connections only hide alpha behind a stream's earlier piece; every transfer
        // still starts at or after its alpha, so the bound (bytes plus one alpha) holds.
        prop_assert!(warm.time_s >= b.seconds * (1.0 - 1e-9));
        prop_assert!(warm_bar.time_s >= b.seconds * (1.0 - 1e-9));
    }
}

/// A dependency entry that no transfer's range covers (the plan is still valid) neither
/// adds a phantom dependent nor changes the result: the same times as the plan without it.
#[test]
fn dependency_entries_outside_every_range_are_ignored() {
    let c = Cluster::parse("h200:2,gpus=2").unwrap();
    let plan = plan_of(&c, &[(0, 1, MB, 0, &[]), (1, 2, MB, 0, &[]), (2, 3, MB, 1, &[0])]);
    let mut orphaned = plan.clone();
    orphaned.transfers[2].dep_end = orphaned.transfers[2].dep_begin; // deps[0] now belongs to no transfer
    let mut stripped = orphaned.clone();
    stripped.deps.clear();
    stripped.transfers[2].dep_begin = 0;
    stripped.transfers[2].dep_end = 0;
    let (a, b) = (simulate(&orphaned, &c, &exact()).unwrap(), simulate(&stripped, &c, &exact()).unwrap());
    assert_eq!(a.time_s, b.time_s);
    assert_eq!(a.transfer_end, b.transfer_end);
}

/// A transfer whose segments add up past 2^64 (a corrupt plan; the verifier rejects it too)
/// is an error naming it. Bytes moved by the whole plan may pass 2^64 (relays count each
/// hop): the report keeps them in 128 bits.
#[test]
fn byte_sums_past_64_bits_are_an_error_per_transfer_and_exact_per_plan() {
    let c = Cluster::parse("h200:2,gpus=2").unwrap();
    let mut plan = plan_of(&c, &[(0, 1, MB, 0, &[]), (0, 1, MB, 0, &[])]);
    plan.transfers[1].seg_begin = 0; // transfer 1 now carries both segments
    plan.segments[1].len = u64::MAX - 3;
    let e = simulate(&plan, &c, &exact()).unwrap_err().to_string();
    assert!(e.contains("transfer 1: its segments' bytes overflow 64 bits"), "{e}");
    plan.transfers[1].seg_begin = 1; // each alone fits; together they pass 2^64
    let r = simulate(&plan, &c, &SimOptions { tolerance: 0.01, ..SimOptions::default() }).unwrap();
    assert_eq!(r.bytes_moved, u128::from(MB) + u128::from(u64::MAX - 3));
}
