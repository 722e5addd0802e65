//! `auto`: the choice is the candidate with the smallest predicted time, ties go to
//! the fixed candidate order, the plan is the winner's plan, and caching never changes
//! a plan. (Accuracy against the simulator is in `auto_sim.rs`.)
mod sabre_common;
use collsched_core::algo::auto::{self, cost, CANDIDATES};
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::traffic::generators;
use collsched_core::Cluster;
use sabre_common::{check, cluster, opts, sparse_matrix};

fn predicted(p: &collsched_core::Plan, alg: &str) -> Option<u64> {
    p.meta.get(&format!("predicted_{alg}_ns")).map(|v| v.parse().unwrap())
}

#[test]
fn picks_the_smallest_prediction_and_returns_that_plan() {
    let no_cache = opts(&[("cache", "0")]);
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
            assert!(seen >= 3, "fanout and both SABRE algorithms always predict");
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
    assert!(predicted(&p, "fanout").unwrap() > predicted(&p, &p.meta["choice"]).unwrap());
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
            prop_assert_eq!(&p.meta["choice"], CANDIDATES[best.0]);
            if t.total() > t.data().iter().enumerate().filter(|(k, _)| k / t.n() == k % t.n()).map(|(_, v)| v).sum::<u64>() {
                prop_assert!(best.1 > 0);
            }
        }
    }
}

#[test]
fn threads_do_not_change_the_plan() {
    let c = Cluster::parse("h200:3,gpus=4").unwrap();
    let t = generators::zipf(12, 0.9, 1 << 18, 21).unwrap();
    let serial = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0"), ("threads", "1")])).unwrap();
    for th in ["2", "3", "7", "0"] {
        let mut p = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0"), ("threads", th)])).unwrap();
        p.input_hash = serial.input_hash;
        assert_eq!(p, serial, "threads={th}");
    }
    assert!(plan_all_to_all(&t, &c, "auto", &opts(&[("threads", "65")])).is_err());
}
