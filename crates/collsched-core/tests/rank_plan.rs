//! Per-rank planning: for every all-to-all producer, `plan_for_rank` equals the whole plan's
//! `rank_plan` for every rank, and a rank plan is the whole plan restricted to the rank.
use collsched_core::algo::{plan_all_to_all, plan_all_to_all_in, plan_for_rank, plan_for_rank_in, Workspace, ALL_TO_ALL_ALGORITHMS};
use collsched_core::plan::rank_plan::RankPlan;
use collsched_core::plan::verify::verify;
use collsched_core::plan::{Buf, Options, Plan, Segment};
use collsched_core::traffic::generators;
use collsched_core::{Cluster, Traffic};
use proptest::prelude::*;

/// A matrix of one of five kinds: Zipf-skewed, uniform, empty, one hot pair, sparse.
fn matrix(p: usize, kind: usize, seed: u64) -> Traffic<'static> {
    match kind {
        0 => generators::zipf(p, 0.9, 1 << 16, seed).unwrap(),
        1 => generators::uniform(p, 1 << 14, seed).unwrap(),
        2 => Traffic::zeros(p),
        3 => {
            let mut t = Traffic::zeros(p);
            t.set(seed as usize % p, (seed as usize / 7) % p, 3 << 20);
            t
        }
        _ => {
            let mut t = Traffic::zeros(p);
            for k in 0..p as u64 {
                let (i, j) = (((seed + 7 * k) % p as u64) as usize, ((seed * 3 + 5 * k) % p as u64) as usize);
                t.set(i, j, (k + 1) * 1_000_003);
            }
            t
        }
    }
}

/// The definition of `rank_plan`: every transfer touching the rank in id order, tagged by
/// its count of earlier ones with the same (src, dst), its non-empty segments with the
/// peer's side cleared, its deps as rows of the transfers that also touch the rank.
fn restricted(plan: &Plan, rp: &RankPlan) {
    let rank = rp.rank;
    let touches = |id: u32| {
        let t = &plan.transfers[id as usize];
        t.src == rank || t.dst == rank
    };
    let mine: Vec<u32> = (0..plan.transfers.len() as u32).filter(|&i| touches(i)).collect();
    assert_eq!(rp.transfers.len(), mine.len());
    let mut tags = std::collections::HashMap::new();
    for (k, &id) in mine.iter().enumerate() {
        let (orig, got) = (&plan.transfers[id as usize], &rp.transfers[k]);
        assert_eq!((got.src, got.dst, got.op, got.tier, got.step), (orig.src, orig.dst, orig.op, orig.tier, orig.step));
        let tag = tags.entry((orig.src, orig.dst)).or_insert(0u32);
        assert_eq!(rp.tags[k], *tag);
        *tag += 1;
        let own_side: Vec<Segment> = plan.segments_of(orig).iter().filter(|s| s.len > 0).map(|&s| match (orig.src == orig.dst, orig.src == rank) {
            (true, _) => s,
            (false, true) => Segment { dst_buf: Buf::Input, dst_off: 0, ..s },
            (false, false) => Segment { src_buf: Buf::Input, src_off: 0, ..s },
        }).collect();
        assert_eq!(rp.segments_of(got), &own_side[..]);
        let deps: Vec<u32> = plan.deps_of(orig).iter().filter_map(|d| mine.binary_search(d).ok().map(|r| r as u32)).collect();
        assert_eq!(rp.deps_of(got), &deps[..]);
    }
    assert_eq!(rp.input_bytes, plan.collective.input_size(rank));
    assert_eq!(rp.output_bytes, plan.collective.output_size(rank));
    assert_eq!(rp.scratch_bytes, plan.scratch_bytes[rank as usize]);
}

fn check_all_ranks(cluster: &Cluster, t: &Traffic, algo: &str) -> Result<(), TestCaseError> {
    let opts = Options::new();
    let plan = match plan_all_to_all(t, cluster, algo, &opts) {
        Ok(p) => p,
        // A producer that does not support this input says so alike per rank.
        Err(e) => {
            prop_assert_eq!(plan_for_rank(t, cluster, 0, algo, &opts).unwrap_err().to_string(), e.to_string());
            return Ok(());
        }
    };
    verify(&plan).unwrap();
    for rank in 0..cluster.num_gpus() {
        let cut = plan.rank_plan(rank).unwrap();
        let own = plan_for_rank(t, cluster, rank, algo, &opts).unwrap();
        prop_assert!(own == cut, "{} on {} rank {}: plan_for_rank differs from rank_plan\nown {:?}\ncut {:?}", algo, cluster.spec(), rank, own, cut);
        restricted(&plan, &cut);
        prop_assert_eq!(cut.digest, plan.decisions_digest);
    }
    // With the moving pairs (the collective transports), for one rank: the distinct pairs
    // moving bytes in each step, counted by brute force; the rest as without them.
    let rank = (t.total() % u64::from(cluster.num_gpus())) as u32;
    let with = plan_for_rank_in(&mut Workspace::default(), t, cluster, rank, algo, &opts, true).unwrap().0;
    prop_assert!(with == plan.rank_plan_with(rank, true).unwrap(), "{} on {} rank {}: the moving pairs differ", algo, cluster.spec(), rank);
    let mut pairs: std::collections::BTreeMap<u32, std::collections::BTreeSet<(u32, u32)>> = Default::default();
    for tr in &plan.transfers {
        if tr.src != tr.dst && plan.transfer_bytes(tr) > 0 {
            pairs.entry(tr.step).or_default().insert((tr.src, tr.dst));
        }
    }
    let expected: Vec<(u32, u32)> = pairs.iter().map(|(&s, set)| (s, set.len() as u32)).collect();
    prop_assert_eq!(with.moving_pairs.as_ref(), Some(&expected));
    prop_assert_eq!(RankPlan { moving_pairs: None, ..with }, plan.rank_plan(rank).unwrap());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    /// Every producer, random clusters (shared NICs, one server, one GPU per server) and
    /// matrices (skewed, uniform, empty, one hot pair, sparse).
    #[test]
    fn plan_for_rank_is_the_whole_plans_rank_plan(servers in 1u32..5, gpus in 1u32..5, nics_pick in 0u32..4, kind in 0usize..5, seed in 0u64..1000) {
        let nics = 1 + nics_pick % gpus;
        let cluster = Cluster::parse(&format!("h200:{servers},gpus={gpus},nics={nics}")).unwrap();
        let t = matrix(cluster.num_gpus() as usize, kind, seed);
        for (algo, _) in ALL_TO_ALL_ALGORITHMS {
            check_all_ranks(&cluster, &t, algo)?;
        }
    }
}

/// The producers that expand one rank without the whole plan, on larger clusters (48 and 60 ranks).
#[test]
fn per_rank_producers_on_larger_clusters() {
    for (spec, kind) in [("h200:6", 0), ("h200:5,gpus=12,nics=4", 4), ("h200:6", 3)] {
        let c = Cluster::parse(spec).unwrap();
        let t = matrix(c.num_gpus() as usize, kind, 17);
        for algo in ["fanout", "spreadout", "hierarchical", "fast", "balanced_direct"] {
            check_all_ranks(&c, &t, algo).unwrap();
        }
    }
}

/// FAST's and balanced_direct's expansion of one rank balances and cuts only its server's
/// tiles, and of every other visit reads only whether its NIC index moves bytes: many
/// servers and rounds (the exact decomposition), shared NICs, skewed and sparse matrices,
/// and more than 64 GPUs per server.
#[test]
fn fast_expansion_skips_other_servers_visits_alike() {
    let exact: Options = [("exact".to_string(), "1".to_string())].into();
    for (spec, kind, opts) in [("h200:9,gpus=4,nics=2", 0, Options::new()), ("h200:7,gpus=3,nics=1", 4, exact.clone()), ("h200:8,gpus=2", 0, exact), ("h200:2,gpus=66,nics=3", 0, Options::new())] {
        let c = Cluster::parse(spec).unwrap();
        let t = matrix(c.num_gpus() as usize, kind, 23);
        for algo in ["fast", "balanced_direct"] {
            let opts = if algo == "fast" { opts.clone() } else { Options::new() };
            let plan = plan_all_to_all(&t, &c, algo, &opts).unwrap();
            verify(&plan).unwrap();
            for rank in 0..c.num_gpus() {
                let own = plan_for_rank(&t, &c, rank, algo, &opts).unwrap();
                assert!(own == plan.rank_plan(rank).unwrap(), "{algo} {opts:?} on {spec} rank {rank}");
            }
        }
    }
}

/// Producers' options reach the per-rank expansion as they reach the whole plan.
#[test]
fn options_are_planned_alike() {
    let c = Cluster::parse("h200:4,gpus=4,nics=2").unwrap();
    let t = matrix(16, 0, 8);
    let o = |kv: &[(&str, &str)]| -> Options { kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
    for (algo, opts) in [
        ("fast", o(&[("order", "asc")])),
        ("fast", o(&[("exact", "1")])),
        ("fast", o(&[("min_stage_bytes", "64KiB"), ("order", "desc")])),
        ("sabre", o(&[("alpha_permille", "1200"), ("mtm_threshold_milli", "1000")])),
        ("sabre_skewed", o(&[("alpha_permille", "1000")])),
        ("auto", o(&[("candidates", "fanout,fast")])),
        ("auto", o(&[("candidates", "native,balanced_direct"), ("backend", "gloo")])),
        ("auto", o(&[("candidates", "native")])),
    ] {
        let plan = match plan_all_to_all(&t, &c, algo, &opts) {
            Ok(p) => p,
            Err(e) => panic!("{algo} {opts:?}: {e}"),
        };
        verify(&plan).unwrap();
        for rank in 0..16 {
            let own = plan_for_rank(&t, &c, rank, algo, &opts).unwrap();
            assert!(own == plan.rank_plan(rank).unwrap(), "{algo} {opts:?} rank {rank}");
            // auto chooses, then expands the winner's part: named as chosen, digest as the whole plan's.
            if algo == "auto" {
                assert_eq!(&own.algorithm, &plan.meta["choice"]);
                assert_eq!(own.digest, plan.decisions_digest);
            }
        }
    }
}

/// A workspace reused across plans of other sizes and matrices changes no plan and no rank plan.
#[test]
fn a_reused_workspace_changes_nothing() {
    let mut ws = Workspace::default();
    let o = Options::new();
    for (k, (spec, kind)) in [("h200:3,nics=2", 0), ("h200:6", 1), ("h200:2,gpus=3", 3), ("h200:3,nics=2", 0), ("h200:5,gpus=4", 4)].into_iter().enumerate() {
        let c = Cluster::parse(spec).unwrap();
        let t = matrix(c.num_gpus() as usize, kind, 40 + k as u64 % 3);
        for algo in ["fast", "balanced_direct"] {
            let fresh = plan_all_to_all(&t, &c, algo, &o).unwrap();
            let reused = plan_all_to_all_in(&mut ws, &t, &c, algo, &o).unwrap();
            assert!(reused == fresh, "{algo} on {spec}: the plan changed in a reused workspace");
            for rank in [0, c.num_gpus() - 1] {
                assert!(plan_for_rank_in(&mut ws, &t, &c, rank, algo, &o, false).unwrap().0 == plan_for_rank(&t, &c, rank, algo, &o).unwrap(), "{algo} on {spec} rank {rank}");
            }
        }
    }
}

/// SABRE's presets with shared NICs, where its NIC assignment matters.
#[test]
fn sabre_with_shared_nics() {
    for spec in ["perlmutter:3", "h200:3,nics=2", "h200:2,gpus=4,nics=1"] {
        let c = Cluster::parse(spec).unwrap();
        let t = generators::zipf(c.num_gpus() as usize, 0.99, 1 << 18, 5).unwrap();
        for algo in ["sabre", "sabre_skewed", "sabre_light"] {
            check_all_ranks(&c, &t, algo).unwrap();
        }
    }
}

/// The digest covers the inputs and the decisions: a different matrix, algorithm or option
/// changes it; the same inputs planned on several threads at once give the same digest.
#[test]
fn digests_tell_decisions_apart_and_agree_across_threads() {
    let c = Cluster::parse("h200:3,gpus=4").unwrap();
    let a = generators::zipf(12, 0.8, 1 << 20, 1).unwrap();
    let b = generators::zipf(12, 0.8, 1 << 20, 2).unwrap();
    let o = Options::new();
    let d = |t: &Traffic, algo: &str, o: &Options| plan_for_rank(t, &c, 0, algo, o).unwrap().digest;
    assert_ne!(d(&a, "fast", &o), d(&b, "fast", &o));
    assert_ne!(d(&a, "fast", &o), d(&a, "fanout", &o));
    let asc: Options = [("order".to_string(), "asc".to_string())].into();
    assert_ne!(d(&a, "fast", &o), d(&a, "fast", &asc));
    for (algo, _) in ALL_TO_ALL_ALGORITHMS {
        let here = d(&a, algo, &o);
        let (a, c) = (&a, &c);
        let there: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3).map(|r| s.spawn(move || plan_for_rank(a, c, r, algo, &Options::new()).unwrap().digest)).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(there.iter().all(|&x| x == here), "{algo}: digests differ across threads");
    }
}

#[test]
fn bad_ranks_algorithms_and_options_are_errors() {
    let c = Cluster::parse("h200:2,gpus=2").unwrap();
    let t = generators::uniform(4, 1 << 10, 0).unwrap();
    let o = Options::new();
    for algo in ["fanout", "spreadout", "fast"] {
        let e = plan_for_rank(&t, &c, 4, algo, &o).unwrap_err().to_string();
        assert!(e.contains("rank 4 is outside the 4 ranks"), "{e}");
    }
    assert!(plan_for_rank(&t, &c, 0, "bogus", &o).unwrap_err().to_string().contains("unknown all-to-all algorithm 'bogus'"));
    let bad: Options = [("x".to_string(), "1".to_string())].into();
    for algo in ["spreadout", "fast"] {
        assert_eq!(plan_for_rank(&t, &c, 0, algo, &bad).unwrap_err().to_string(), plan_all_to_all(&t, &c, algo, &bad).unwrap_err().to_string());
    }
    // Bad SABRE options: the same error as the whole plan's, whichever variant is chosen.
    for (k, v) in [("alpha_permille", "5"), ("mtm_threshold_milli", "99999999999"), ("bogus", "1")] {
        let o: Options = [(k.to_string(), v.to_string())].into();
        for algo in ["sabre", "sabre_skewed", "sabre_light"] {
            assert_eq!(plan_for_rank(&t, &c, 1, algo, &o).unwrap_err().to_string(), plan_all_to_all(&t, &c, algo, &o).unwrap_err().to_string(), "{algo} {k}");
        }
    }
    let small = generators::uniform(3, 1 << 10, 0).unwrap();
    assert!(plan_for_rank(&small, &c, 0, "fanout", &o).unwrap_err().to_string().contains("3×3"));
    let plan = plan_all_to_all(&t, &c, "fanout", &o).unwrap();
    assert!(plan.rank_plan(4).unwrap_err().to_string().contains("rank 4 is outside the plan's 4 ranks"));
}
