//! `auto`: the choice is the candidate with the smallest predicted time, ties go to
//! the fixed candidate order, the plan is the winner's plan, and caching never changes
//! a plan. (Accuracy against the simulator is in `auto_sim.rs`.)
mod sabre_common;
use collsched_core::algo::auto::{self, cost, CANDIDATES};
use collsched_core::algo::plan_all_to_all;
use collsched_core::algo::fast;
use collsched_core::plan::Options;
use collsched_core::traffic::generators;
use collsched_core::Cluster;
use sabre_common::{check, cluster, opts, sparse_matrix};

fn predicted(p: &collsched_core::Plan, alg: &str) -> Option<u64> {
    p.meta.get(&format!("predicted_{alg}_ns")).map(|v| v.parse().unwrap())
}

#[test]
fn picks_the_smallest_prediction_and_returns_that_plan() {
    let no_cache = opts(&[("cache", "0"), ("refine", "never")]);
    for (spec, seed) in [("h200:2,gpus=4", 1u64), ("perlmutter:3", 2), ("mi300x:2,gpus=4,nics=2", 3)] {
        let c = Cluster::parse(spec).unwrap();
        let n = c.num_gpus() as usize;
        for t in [generators::uniform(n, 1 << 16, seed).unwrap(), generators::zipf(n, 0.99, 1 << 16, seed).unwrap(), sparse_matrix(n, 1 << 20, 30, seed)] {
            let p = plan_all_to_all(&t, &c, "auto", &no_cache).unwrap();
            check(&p, &t, &c, seed);
            let choice = p.meta["choice"].clone();
            assert!(p.meta["reason"].contains("predicted"));
            let best = predicted(&p, &choice).expect("the winner has a prediction");
            let mut seen = 0;
            for (i, alg) in CANDIDATES.iter().enumerate() {
                if let Some(ns) = predicted(&p, alg) {
                    seen += 1;
                    let pos = CANDIDATES.iter().position(|a| *a == choice).unwrap();
                    assert!(best < ns || (best == ns && pos <= i), "{choice} ({best} ns) beaten by {alg} ({ns} ns)");
                    // The prediction is the cost model applied to that candidate's own plan.
                    let own = plan_all_to_all(&t, &c, alg, &Options::new()).unwrap();
                    assert_eq!(cost::predict_ns(&own, &c), ns);
                    if *alg == choice {
                        assert_eq!(own.transfers, p.transfers);
                        assert_eq!(own.segments, p.segments);
                        assert_eq!(own.deps, p.deps);
                    }
                }
            }
            // A pruned candidate's bound is valid and puts it above the winner's prediction.
            for alg in CANDIDATES {
                if let Some(b) = p.meta.get(&format!("pruned_{alg}_bound_ns")) {
                    seen += 1;
                    let b: u64 = b.parse().unwrap();
                    assert!(b > best, "{alg} pruned at {b} ns vs best {best} ns");
                    let own = plan_all_to_all(&t, &c, alg, &Options::new()).unwrap();
                    assert!(cost::predict_ns(&own, &c) >= b, "{alg}: bound {b} above its prediction");
                }
            }
            assert!(seen >= 3, "fanout and both SABRE algorithms always predict or are pruned");
        }
    }
}

#[test]
fn cache_hits_give_byte_identical_plans() {
    let c = cluster(2, 4, 4);
    let t = generators::zipf(8, 0.8, 1 << 18, 11).unwrap();
    // `cache` is an option, so it enters the input hash; everything else must be equal.
    let content = |mut p: collsched_core::Plan| {
        p.input_hash = 0;
        p.hash()
    };
    let cold = content(plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0")])).unwrap());
    let first = plan_all_to_all(&t, &c, "auto", &Options::new()).unwrap();
    let second = plan_all_to_all(&t, &c, "auto", &Options::new()).unwrap();
    assert_eq!(cold, content(first.clone()));
    assert_eq!(first.hash(), second.hash());
    assert!(!auto::decision_cache().is_empty());
    // A different cluster is a different key.
    let c2 = Cluster::parse("h200:2,gpus=4,nic=25Gbps").unwrap();
    let other = plan_all_to_all(&t, &c2, "auto", &Options::new()).unwrap();
    let other_cold = plan_all_to_all(&t, &c2, "auto", &opts(&[("cache", "0")])).unwrap();
    assert_eq!(content(other), content(other_cold));
}

#[test]
fn candidate_subset_and_bad_options() {
    let c = cluster(2, 4, 2);
    let t = generators::uniform(8, 1000, 4).unwrap();
    let p = plan_all_to_all(&t, &c, "auto", &opts(&[("candidates", "sabre_light, fanout"), ("cache", "0")])).unwrap();
    assert!(["sabre_light", "fanout"].contains(&p.meta["choice"].as_str()));
    assert!(predicted(&p, "sabre_skewed").is_none());
    assert!(plan_all_to_all(&t, &c, "auto", &opts(&[("candidates", "warp")])).unwrap_err().to_string().contains("unknown candidate"));
    assert!(plan_all_to_all(&t, &c, "auto", &opts(&[("candidates", "")])).is_err());
    assert!(plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "2")])).is_err());
    assert!(plan_all_to_all(&t, &c, "auto", &opts(&[("alpha", "1")])).unwrap_err().to_string().contains("unknown option"));
}

#[test]
fn skew_moves_the_choice_away_from_fanout() {
    // One hot receiver on 4 nodes: fanout is bottlenecked on one NIC; auto must not pick it.
    let c = Cluster::parse("perlmutter:4").unwrap();
    let mut t = generators::balanced(16, 1 << 20).unwrap();
    for i in 4..16 {
        t.set(i, 1, 16 << 20);
    }
    let p = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0")])).unwrap();
    assert_ne!(p.meta["choice"], "fanout");
    // Fanout is either predicted slower or pruned by its NIC bound before planning.
    let best = predicted(&p, &p.meta["choice"]).unwrap();
    match predicted(&p, "fanout") {
        Some(ns) => assert!(ns > best),
        None => assert!(p.meta["pruned_fanout_bound_ns"].parse::<u64>().unwrap() > best),
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// Every fabric (ring and cube-mesh routes included), shared NICs, one server,
        /// empty and sparse matrices: auto plans, the plan verifies, predictions are
        /// positive whenever bytes move, and the decision is the fixed-order argmin.
        #[test]
        fn auto_plans_verify_on_any_cluster(preset in 0usize..4, servers in 1u32..4, nic_div in 1u32..3, density in 0u64..101, seed in 0u64..10_000) {
            let (name, gpus) = [("h200", 4u32), ("mi300x", 4), ("mi250", 8), ("v100", 8)][preset];
            let nics = (gpus / nic_div).max(1);
            let c = Cluster::parse(&format!("{name}:{servers},gpus={gpus},nics={nics}")).unwrap();
            let t = sparse_matrix(c.num_gpus() as usize, 1 << 16, density, seed);
            let p = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0")])).unwrap();
            check(&p, &t, &c, seed);
            let preds: Vec<(usize, u64)> = CANDIDATES.iter().enumerate().filter_map(|(i, a)| predicted(&p, a).map(|v| (i, v))).collect();
            let best = preds.iter().min_by_key(|&&(i, v)| (v, i)).unwrap();
            // Pruning and the lazy completion of close calls decide as predicting every
            // candidate would: the same model winner, and on refinement exactly the close calls.
            let every: Vec<(usize, u64)> = CANDIDATES.iter().enumerate().filter_map(|(i, a)| plan_all_to_all(&t, &c, a, &Options::new()).ok().map(|own| (i, cost::predict_ns(&own, &c)))).collect();
            prop_assert_eq!(every.iter().min_by_key(|&&(i, v)| (v, i)), Some(best));
            let close: Vec<usize> = every.iter().filter(|x| x.1 as u128 * 100 <= best.1 as u128 * (100 + auto::REFINE_MARGIN_PERCENT) as u128).map(|x| x.0).collect();
            // Refined by the fluid model: the fixed-order argmin of the close calls' fluid
            // times, each the fluid model of that candidate's own plan; else the model's argmin.
            let fluid: Vec<(usize, u64)> = CANDIDATES.iter().enumerate().filter_map(|(i, a)| p.meta.get(&format!("fluid_{a}_ns")).map(|v| (i, v.parse().unwrap()))).collect();
            if p.meta["refined_with"] == "fluid" {
                prop_assert!(fluid.len() >= 2);
                prop_assert_eq!(fluid.iter().map(|x| x.0).collect::<Vec<_>>(), close.clone());
                for &(i, ns) in &fluid {
                    let own = plan_all_to_all(&t, &c, CANDIDATES[i], &Options::new()).unwrap();
                    prop_assert_eq!(cost::fluid_predict_ns(&own, &c, u64::MAX).unwrap().0, ns);
                    let pred = preds.iter().find(|x| x.0 == i).unwrap().1;
                    prop_assert!(pred as u128 * 100 <= best.1 as u128 * (100 + auto::REFINE_MARGIN_PERCENT) as u128, "only close calls are refined");
                }
                let won = fluid.iter().min_by_key(|&&(i, v)| (v, i)).unwrap();
                prop_assert_eq!(&p.meta["choice"], CANDIDATES[won.0]);
            } else {
                prop_assert!(fluid.is_empty());
                prop_assert_eq!(&p.meta["choice"], CANDIDATES[best.0]);
                if close.len() >= 2 {
                    prop_assert!(p.meta["reason"].contains("over its budget"), "{} close calls not refined: {}", close.len(), &p.meta["reason"]);
                }
            }
            if t.total() > t.data().iter().enumerate().filter(|(k, _)| k / t.n() == k % t.n()).map(|(_, v)| v).sum::<u64>() {
                prop_assert!(best.1 > 0);
            }
        }
    }
}

#[test]
fn threads_do_not_change_the_plan() {
    // Planning and the fluid refinement of close calls both run on threads when allowed.
    let mut refined = 0;
    for (spec, t) in [
        ("h200:3,gpus=4", generators::zipf(12, 0.9, 1 << 18, 21).unwrap()),
        ("h200:3,gpus=2", generators::zipf(6, 0.99, 8 << 20, 4).unwrap()),
        ("h200:3,gpus=2", generators::zipf(6, 0.99, 8 << 20, 5).unwrap()),
        ("perlmutter:4", generators::uniform(16, 1 << 20, 3).unwrap()),
        // 64 GPUs: threads by default (from 32 GPUs), candidates evaluated in pairs.
        ("h200:8", generators::zipf(64, 0.8, 4 << 20, 1).unwrap()),
        ("h200:8", generators::uniform(64, 256 << 10, 2).unwrap()),
    ] {
        let c = Cluster::parse(spec).unwrap();
        let serial = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0"), ("threads", "1")])).unwrap();
        refined += (serial.meta["refined_with"] == "fluid") as u32;
        for th in ["2", "3", "7", "0"] {
            let mut p = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0"), ("threads", th)])).unwrap();
            p.input_hash = serial.input_hash;
            p.decisions_digest = serial.decisions_digest; // mixes in the inputs (options too)
            assert_eq!(p, serial, "threads={th} on {spec}");
        }
    }
    assert!(refined >= 2, "only {refined} inputs were refined by the fluid model");
    assert!(plan_all_to_all(&generators::uniform(12, 1000, 1).unwrap(), &Cluster::parse("h200:3,gpus=4").unwrap(), "auto", &opts(&[("threads", "65")])).is_err());
}

#[test]
fn refinement_picks_the_smallest_simulated_close_call() {
    use collsched_core::sim::{simulate, SimOptions};
    let always = opts(&[("cache", "0"), ("refine", "always")]);
    let mut refined = 0;
    for (spec, seed) in [("h200:3,gpus=2", 4u64), ("perlmutter:2,gpus=4", 5), ("mi300x:2,gpus=4,nics=2", 6)] {
        let c = Cluster::parse(spec).unwrap();
        let n = c.num_gpus() as usize;
        for t in [generators::zipf(n, 0.99, 8 << 20, seed).unwrap(), sparse_matrix(n, 8 << 20, 40, seed)] {
            let p = plan_all_to_all(&t, &c, "auto", &always).unwrap();
            // Large blocks: the symbolic verifier, not `check`'s byte-level execution.
            collsched_core::plan::verify::verify(&p).unwrap();
            let choice = p.meta["choice"].clone();
            let best_pred = CANDIDATES.iter().filter_map(|a| predicted(&p, a)).min().unwrap();
            let sims: Vec<(usize, u64)> = CANDIDATES
                .iter()
                .enumerate()
                .filter_map(|(i, a)| p.meta.get(&format!("simulated_{a}_ns")).map(|v| (i, v.parse().unwrap())))
                .collect();
            if sims.len() < 2 {
                assert_eq!(p.meta["refined"], "false");
                assert_eq!(predicted(&p, &choice), Some(best_pred));
                continue;
            }
            assert_eq!(p.meta["refined"], "true");
            refined += 1;
            // Exactly the candidates predicted within the margin were simulated.
            for a in CANDIDATES {
                let close = predicted(&p, a).is_some_and(|ns| ns as u128 * 100 <= best_pred as u128 * (100 + auto::REFINE_MARGIN_PERCENT) as u128);
                assert_eq!(close, p.meta.contains_key(&format!("simulated_{a}_ns")), "{a}");
            }
            // The smallest simulated time wins, ties to the earlier candidate; the value is the simulator's.
            let (wi, wns) = *sims.iter().min_by_key(|&&(i, ns)| (ns, i)).unwrap();
            assert_eq!(CANDIDATES[wi], choice);
            let own = plan_all_to_all(&t, &c, &choice, &Options::new()).unwrap();
            assert_eq!((simulate(&own, &c, &SimOptions::default()).unwrap().time_s * 1e9).round() as u64, wns);
            assert!(p.meta["reason"].contains("simulated"));
            // The cache returns the same decision.
            let cached = plan_all_to_all(&t, &c, "auto", &opts(&[("refine", "always")])).unwrap();
            let again = plan_all_to_all(&t, &c, "auto", &opts(&[("refine", "always")])).unwrap();
            assert_eq!(cached.meta, again.meta);
            assert_eq!(cached.meta["choice"], choice);
        }
    }
    assert!(refined >= 2, "only {refined} of 6 inputs had close calls");
}

#[test]
fn rejects_a_bad_refine_option() {
    let c = cluster(2, 2, 2);
    let t = generators::uniform(4, 1 << 10, 1).unwrap();
    let e = plan_all_to_all(&t, &c, "auto", &opts(&[("refine", "sometimes")])).unwrap_err();
    assert!(e.to_string().contains("refine"), "{e}");
}

#[test]
fn every_refine_mode_plans_and_records_how() {
    // 3 servers of 2 GPUs, skewed 8 MiB per GPU: close calls, cheap to simulate.
    let c = Cluster::parse("h200:3,gpus=2").unwrap();
    let t = generators::zipf(6, 0.99, 8 << 20, 4).unwrap();
    let argmin = |p: &collsched_core::Plan, key: &str| {
        let v: Vec<(u64, usize)> = CANDIDATES.iter().enumerate().filter_map(|(i, a)| p.meta.get(&format!("{key}_{a}_ns")).map(|x| (x.parse().unwrap(), i))).collect();
        CANDIDATES[v.iter().min().expect("some candidate").1]
    };
    for (mode, with, key) in [("fluid", "fluid", "fluid"), ("never", "none", "predicted"), ("always", "simulator", "simulated"), ("budget", "", "")] {
        let p = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0"), ("refine", mode)])).unwrap();
        collsched_core::plan::verify::verify(&p).unwrap();
        let how = p.meta["refined_with"].as_str();
        match mode {
            // The budget mode simulates only when 2 µs per close-call transfer is ≤ 5% of the
            // predicted time (~1.2 ms here: ~30 transfers); either way it says what it did.
            "budget" => {
                assert!(["simulator", "none"].contains(&how), "{how}");
                let key = if how == "simulator" { "simulated" } else { "predicted" };
                assert_eq!(p.meta["choice"], argmin(&p, key));
            }
            _ => {
                assert_eq!(how, with, "refine={mode}");
                assert_eq!(p.meta["choice"], argmin(&p, key), "refine={mode}");
            }
        }
    }
}

/// Planning cost (ignored; a measurement, not an assertion): median wall time of `auto`
/// at 16, 32 and 64 GPUs, cache off and on, against its predicted transfer time.
/// `cargo test --release --test auto -- --ignored --nocapture planning_cost`
#[test]
#[ignore]
fn planning_cost() {
    use std::time::Instant;
    for servers in [2u32, 4, 8] {
        let c = Cluster::parse(&format!("h200:{servers}")).unwrap();
        let n = c.num_gpus() as usize;
        for per_gpu in [1u64 << 20, 256 << 20] {
            for refine in ["fluid", "never"] {
                let mut off = Vec::new();
                let mut on = Vec::new();
                let mut predicted_ns = Vec::new();
                let mut choices = std::collections::BTreeMap::new();
                let mut pruned = 0;
                for seed in 0..9u64 {
                    let t = match seed % 3 {
                        0 => generators::uniform(n, per_gpu / n as u64, seed).unwrap(),
                        1 => generators::zipf(n, 0.8, per_gpu / n as u64, seed).unwrap(),
                        _ => generators::zipf(n, 0.99, per_gpu / n as u64, seed).unwrap(),
                    };
                    let s = Instant::now();
                    let p = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0"), ("threads", "1"), ("refine", refine)])).unwrap();
                    off.push(s.elapsed().as_secs_f64() * 1e3);
                    let best: u64 = p.meta[&format!("predicted_{}_ns", p.meta["choice"])].parse().unwrap();
                    predicted_ns.push(best as f64);
                    *choices.entry(p.meta["choice"].clone()).or_insert(0) += 1;
                    pruned += p.meta.keys().filter(|k| k.starts_with("pruned_")).count();
                    let o = opts(&[("threads", "1"), ("refine", refine)]);
                    plan_all_to_all(&t, &c, "auto", &o).unwrap();
                    let s = Instant::now();
                    plan_all_to_all(&t, &c, "auto", &o).unwrap();
                    on.push(s.elapsed().as_secs_f64() * 1e3);
                }
                let med = |v: &mut Vec<f64>| {
                    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
                    v[v.len() / 2]
                };
                let (moff, mon, mpred) = (med(&mut off), med(&mut on), med(&mut predicted_ns));
                eprintln!(
                    "{n:>3} GPUs {:>4} MiB/GPU refine={refine:<6}: cache off {moff:.2} ms, on {mon:.2} ms; predicted transfer {:.2} ms; off = {:.1}% of it; pruned {pruned}/63; choices {choices:?}",
                    per_gpu >> 20,
                    mpred / 1e6,
                    moff * 1e6 / mpred * 100.0
                );
            }
        }
    }
}

/// Per-candidate planning and prediction cost at 64 GPUs (ignored measurement).
#[test]
#[ignore]
fn candidate_cost() {
    use std::time::Instant;
    let spec = std::env::var("CLUSTER").unwrap_or("h200:8".into());
    let c = Cluster::parse(&spec).unwrap();
    let n = c.num_gpus() as usize;
    let t = generators::zipf(n, 0.8, (256u64 << 20) / n as u64, 1).unwrap();
    let sim = collsched_core::sim::SimOptions::default();
    for alg in CANDIDATES {
        let mut best = [f64::INFINITY; 4];
        let (mut p_ns, mut f_ns, mut s_ns, mut events, mut transfers) = (0, 0, 0.0, 0, 0);
        for _ in 0..3 {
            let s = Instant::now();
            let p = plan_all_to_all(&t, &c, alg, &Options::new()).unwrap();
            let a = s.elapsed().as_secs_f64() * 1e3;
            let s = Instant::now();
            p_ns = cost::predict_ns(&p, &c);
            let b = s.elapsed().as_secs_f64() * 1e3;
            let s = Instant::now();
            (f_ns, events) = cost::fluid_predict_ns(&p, &c, u64::MAX).unwrap();
            let f = s.elapsed().as_secs_f64() * 1e3;
            let s = Instant::now();
            s_ns = collsched_core::sim::simulate(&p, &c, &sim).unwrap().time_s * 1e9;
            let d = s.elapsed().as_secs_f64() * 1e3;
            transfers = p.transfers.len();
            for (x, y) in best.iter_mut().zip([a, b, f, d]) {
                *x = x.min(y);
            }
        }
        eprintln!(
            "{alg:<16} {transfers:>6} transfers: plan {:.2} ms, closed form {:.2} ms, fluid {:.2} ms ({events} work units), sim {:.2} ms; predicted {p_ns} / fluid {f_ns} / sim {s_ns:.0} ns",
            best[0], best[1], best[2], best[3]
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// The pruning bounds: the matrix bound of fanout/spreadout (direct), hierarchical and
    /// sabre_light (rail) and sabre_skewed (Algorithm 1's proxies) equals their plan's NIC
    /// bound, every candidate's NIC bound and critical-path bound are at most its
    /// prediction, and so is sabre_skewed's phase bound (itself at least the NIC bound).
    #[test]
    fn pruning_bounds_hold(preset in 0usize..5, servers in 2u32..5, gpus in 0usize..3, nic_div in 1u32..3, density in 10u64..101, seed in 0u64..10_000) {
        use collsched_core::algo::auto::cost::{matrix_nic_lower_bound_ns, nic_lower_bound_ns, Route};
        // Every fabric: switch and mesh (h200, mi300x, perlmutter), ring (mi250), cube-mesh (v100, 8 GPUs).
        let g = if preset >= 3 { 8 } else { [2u32, 4, 8][gpus] };
        let spec = format!("{}:{servers},gpus={g},nics={}", ["h200", "mi300x", "perlmutter", "mi250", "v100"][preset], (g / nic_div).max(1));
        let c = Cluster::parse(&spec).unwrap();
        let n = c.num_gpus() as usize;
        let t = sparse_matrix(n, 1 << 20, density, seed);
        for alg in CANDIDATES {
            let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
            let b = nic_lower_bound_ns(&p, &c);
            let pred = cost::predict_ns(&p, &c);
            proptest::prop_assert!(b <= pred, "{alg} on {spec}");
            let chain = cost::critical_path_lower_bound_ns(&p, &c);
            proptest::prop_assert!(chain <= pred, "{alg} on {spec}: chain bound {chain} > prediction {pred}");
            let route = match *alg {
                "fanout" | "spreadout" => Some(Route::Direct),
                "hierarchical" | "sabre_light" => Some(Route::Rail),
                "sabre_skewed" => Some(Route::SabreProxies),
                _ => None,
            };
            if let Some(r) = route {
                proptest::prop_assert_eq!(matrix_nic_lower_bound_ns(&t, &c, r), b, "{} on {}", alg, spec);
            }
            if *alg == "sabre_skewed" {
                let phases = cost::sabre_skewed_lower_bound_ns(&t, &c);
                proptest::prop_assert!(b <= phases && phases <= pred, "sabre_skewed on {spec}: NIC bound {b}, phase bound {phases}, prediction {pred}");
            }
            if *alg == "fast" {
                // Before assembly: the same NIC bound, a chain bound below the plan's; and a
                // plan that goes on after the preview is the plan.
                let stopped = fast::plan_unless(&t, &c, &Options::new(), |pv| Some(cost::fast_preview_bounds_ns(pv, &c))).unwrap();
                let (pre_chain, pre_nic) = stopped.unwrap_err();
                proptest::prop_assert_eq!(pre_nic, b, "fast on {}", spec);
                proptest::prop_assert!(pre_chain <= chain, "fast on {spec}: preview chain {pre_chain} > plan's chain bound {chain}");
                let went_on = fast::plan_unless(&t, &c, &Options::new(), |pv| {
                    cost::fast_preview_bounds_ns(pv, &c);
                    None::<()>
                });
                proptest::prop_assert_eq!(went_on.unwrap().unwrap().hash(), fast::plan(&t, &c, &Options::new()).unwrap().hash(), "fast on {}", spec);
                // The preview shows exactly the plan's scale-out transfers, in plan order.
                let mut shown: Vec<(usize, usize, u64)> = Vec::new();
                fast::plan_unless(&t, &c, &Options::new(), |pv| {
                    pv.for_each_transfer(|_, s, r, bytes| shown.push((s, r, bytes)));
                    Some(())
                })
                .unwrap()
                .unwrap_err();
                let planned: Vec<(usize, usize, u64)> = p
                    .transfers
                    .iter()
                    .filter(|x| x.tier == collsched_core::topology::Tier::ScaleOut)
                    .map(|x| (c.global_nic_of(x.src) as usize, c.global_nic_of(x.dst) as usize, p.transfer_bytes(x)))
                    .collect();
                proptest::prop_assert_eq!(shown, planned, "fast on {}", spec);
            }
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// The integer fluid model is the simulator's physics: on every fabric (ring routes
    /// included, where it keeps an antipodal transfer as one flow over both directions) and
    /// every candidate's plan, it is within 5% of the simulated time and never below the
    /// NIC and critical-path bounds (both physical lower bounds too), and a run stopped by
    /// its budget reports None. Usually within 0.1%; but dependency-heavy plans (spreadout's
    /// rounds on cube-mesh fabrics) amplify the two models' different roundings along their
    /// chains: up to 3.2% on mi250:3 with shared NICs (600 matrices scanned), so a 1% bound
    /// failed on random seeds.
    #[test]
    fn fluid_model_matches_the_simulator(preset in 0usize..5, servers in 1u32..4, nic_div in 1u32..3, density in 10u64..101, seed in 0u64..10_000) {
        let (name, gpus) = [("h200", 4u32), ("mi300x", 4), ("perlmutter", 4), ("mi250", 8), ("v100", 8)][preset];
        let c = Cluster::parse(&format!("{name}:{servers},gpus={gpus},nics={}", (gpus / nic_div).max(1))).unwrap();
        let t = sparse_matrix(c.num_gpus() as usize, 1 << 18, density, seed);
        for alg in CANDIDATES {
            let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
            let (ns, work) = cost::fluid_predict_ns(&p, &c, u64::MAX).unwrap();
            let s = collsched_core::sim::simulate(&p, &c, &collsched_core::sim::SimOptions::default()).unwrap().time_s * 1e9;
            // A plan that moves nothing takes 0 in both (0/0 would compare NaN).
            if s == 0.0 {
                proptest::prop_assert_eq!(ns, 0, "{} on {}: fluid {} ns, simulated 0", alg, c.spec(), ns);
            } else {
                proptest::prop_assert!((ns as f64 / s - 1.0).abs() < 0.05, "{alg} on {}: fluid {ns} ns, simulated {s:.0} ns", c.spec());
            }
            proptest::prop_assert!(ns >= cost::nic_lower_bound_ns(&p, &c), "{alg}: below the NIC bound");
            proptest::prop_assert!(ns >= cost::critical_path_lower_bound_ns(&p, &c), "{alg}: below the critical-path bound");
            if work > 1 {
                proptest::prop_assert!(cost::fluid_predict_ns(&p, &c, work / 2).is_none());
            }
        }
    }
}

/// Profiling loop (ignored): predict fast's and balanced_direct's plans at 64 GPUs repeatedly.
#[test]
#[ignore]
fn predict_loop() {
    let c = Cluster::parse("h200:8").unwrap();
    let t = generators::zipf(64, 0.8, (256u64 << 20) / 64, 1).unwrap();
    let plans: Vec<_> = ["fast", "balanced_direct"].iter().map(|a| plan_all_to_all(&t, &c, a, &Options::new()).unwrap()).collect();
    for p in &plans {
        let mut level = vec![0u32; p.transfers.len()];
        for (i, t) in p.transfers.iter().enumerate() {
            level[i] = p.deps_of(t).iter().map(|&d| level[d as usize] + 1).max().unwrap_or(0);
        }
        eprintln!("{}: {} transfers, {} levels", p.algorithm, p.transfers.len(), level.iter().max().map_or(0, |m| m + 1));
    }
    let clock = std::time::Instant::now();
    let mut x = Vec::new();
    for _ in 0..200 {
        x = plans.iter().map(|p| cost::predict_ns(p, &c)).collect();
    }
    eprintln!("predictions {x:?}; {:.3} ms per pair", clock.elapsed().as_secs_f64() * 1e3 / 200.0);
}

