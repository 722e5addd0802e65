//! ForestColl core: paper numbers, brute-force agreement, schedule invariants, plans.
use collsched_core::forest::optimal::brute_force_inv_x;
use collsched_core::forest::{self, fixed_k_scale, optimal, schedule, schedule_with, ForestOptions, ForestSchedule, Growth, KChoice, Ratio};
use collsched_core::plan::{Buf, Collective, Op, Plan};
use collsched_core::topology::graph::{Graph, GraphBuilder, NodeKind};
use proptest::prelude::*;

const GB: u128 = 1_000_000_000;

#[test]
fn table1_mi250_fixed_k_and_optimum() {
    // ForestColl Table 1: algbw of the 2-box MI250 at fixed k = 1..5 and the optimum at k = 83.
    let g = Graph::parse_preset("mi250:2").unwrap();
    let unit = 2 * GB; // gcd of 50, 100, 200 and 16 GB/s
    let expect = [(1u64, Ratio::new(320 * GB, 1)), (2, Ratio::new(1024 * GB, 3)), (3, Ratio::new(2400 * GB, 7)), (4, Ratio::new(1024 * GB, 3)), (5, Ratio::new(8000 * GB, 23))];
    let paper_gbs = [320, 341, 343, 341, 348];
    for (&(k, ref want), paper) in expect.iter().zip(paper_gbs) {
        let u = fixed_k_scale(&g, k).unwrap();
        let algbw = Ratio::int(32 * k as u128 * unit).div(&u);
        assert_eq!(&algbw, want, "k = {k}");
        assert_eq!((algbw.to_f64() / 1e9).round() as i64, paper);
    }
    let opt = optimal(&g).unwrap();
    assert_eq!(opt.k, 83);
    assert_eq!(opt.algbw, Ratio::new(5312 * GB, 15)); // 354.13 GB/s
    assert_eq!((opt.algbw.to_f64() / 1e9).round() as i64, 354);
    // The bottleneck is a package pair of GCDs (4 shared links) plus everything else cut off it.
    assert_eq!(opt.bottleneck.len(), g.num_nodes() - 2);
    let s = schedule(&g, KChoice::Fixed(3)).unwrap();
    s.check().unwrap();
    assert_eq!(s.algbw, Ratio::new(2400 * GB, 7));
}

#[test]
fn a100_and_h100_optima() {
    let a = optimal(&Graph::parse_preset("a100:2").unwrap()).unwrap();
    // Single-GPU cut: 15 GPUs feed one GPU over 300 + 25 GB/s.
    assert_eq!(a.x, Ratio::new(325 * GB, 15));
    assert_eq!(a.k, 13);
    let h = optimal(&Graph::parse_preset("h100:4").unwrap()).unwrap();
    // Single-GPU cut (31 / 500 GB/s) beats the box cut (24 / 400 GB/s) at 4 boxes.
    assert_eq!(h.x, Ratio::new(500 * GB, 31));
    let h16 = optimal(&Graph::parse_preset("h100:16").unwrap()).unwrap();
    assert_eq!(h16.x, Ratio::new(400 * GB, 120));
    let s = schedule(&Graph::parse_preset("a100:2").unwrap(), KChoice::Auto).unwrap();
    s.check().unwrap();
    assert!(s.k <= 9 && s.algbw <= a.algbw);
}

#[test]
fn interleaved_growth_packs_shallower_trees_at_the_same_optimum() {
    for (spec, seq_depth, int_depth) in [("h100:2", 6, 3), ("a100:2", 5, 3), ("mi250:2", 21, 11)] {
        let g = Graph::parse_preset(spec).unwrap();
        let base = ForestOptions::for_graph(&g);
        assert_eq!(base.growth, Growth::Interleaved, "{spec}: small graphs interleave by default");
        let seq = schedule_with(&g, KChoice::Auto, &ForestOptions { growth: Growth::Sequential, ..base }).unwrap();
        let int = schedule_with(&g, KChoice::Auto, &base).unwrap();
        for s in [&seq, &int] {
            s.check().unwrap();
            independent_checks(s).unwrap();
        }
        assert_eq!((seq.k, seq.algbw), (int.k, int.algbw), "{spec}");
        assert_eq!((seq.max_depth(), int.max_depth()), (seq_depth, int_depth), "{spec}");
    }
    assert_eq!(ForestOptions::for_graph(&Graph::parse_preset("a100:16").unwrap()).growth, Growth::Sequential);
}

#[test]
fn split_multiplicity_sends_one_stream_per_unit_of_multiplicity() {
    // h100:2's sequentially grown schedule has trees of multiplicity 2 beside unit trees.
    let g = Graph::parse_preset("h100:2").unwrap();
    let s = schedule_with(&g, KChoice::Auto, &ForestOptions { growth: Growth::Sequential, ..ForestOptions::for_graph(&g) }).unwrap();
    assert!(s.trees.iter().any(|t| t.multiplicity > 1));
    let (chunks, n) = (3u64, s.num_ranks() as u64);
    let network = |p: &Plan| p.transfers.iter().filter(|t| t.src != t.dst).count() as u64;
    let edges = |weight: &dyn Fn(u64) -> u64| s.trees.iter().map(|t| weight(t.multiplicity) * t.edges.len() as u64).sum::<u64>() * chunks;
    let unmerged = forest::PlanOptions { chunks: chunks as u32, merge: false, split_multiplicity: false };
    let split = forest::PlanOptions { split_multiplicity: true, ..unmerged };
    let (one, many) = (forest::plan_allgather_with(&s, 96 * n, &unmerged).unwrap(), forest::plan_allgather_with(&s, 96 * n, &split).unwrap());
    assert_eq!(network(&one), edges(&|_| 1));
    assert_eq!(network(&many), edges(&|m| m));
    assert_ne!(one.input_hash, many.input_hash);
    assert_eq!(many.meta.get("split_multiplicity").map(String::as_str), Some("true"));
    for p in [one, many] {
        execute_and_check(&p).unwrap();
    }
}

/// Random Eulerian graph: a cycle through every node (connectivity) plus random cycles.
fn random_graph(compute: usize, switches: usize, cycles: &[(Vec<usize>, u64)], bidirectional: bool, multicast: bool) -> Graph {
    let n = compute + switches;
    let mut b = GraphBuilder::new("random");
    for i in 0..n {
        let kind = if i < compute { NodeKind::Compute } else { NodeKind::Switch };
        b.node(&format!("n{i}"), kind, Some((i % 2) as u32), multicast && i >= compute).unwrap();
    }
    let mut all: Vec<(Vec<usize>, u64)> = vec![((0..n).collect(), 1)];
    all.extend(cycles.iter().cloned());
    for (cyc, c) in &all {
        let nodes: Vec<usize> = cyc.iter().map(|&x| x % n).fold(Vec::new(), |mut v, x| {
            if !v.contains(&x) {
                v.push(x);
            }
            v
        });
        if nodes.len() < 2 {
            continue;
        }
        for i in 0..nodes.len() {
            let (a, z) = (nodes[i] as u32, nodes[(i + 1) % nodes.len()] as u32);
            if bidirectional {
                b.duplex(a, z, *c).unwrap();
            } else {
                b.link(a, z, *c).unwrap();
            }
        }
    }
    b.finish().unwrap()
}

fn cycles_strategy() -> impl Strategy<Value = Vec<(Vec<usize>, u64)>> {
    prop::collection::vec((prop::collection::vec(0usize..12, 2..6), 1u64..6), 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn optimum_matches_brute_force_and_schedule_is_valid(
        compute in 2usize..6, switches in 0usize..4, cycles in cycles_strategy(), bidir in any::<bool>(), mc in any::<bool>(),
        interleave in any::<bool>()
    ) {
        let g = random_graph(compute, switches, &cycles, bidir, mc);
        let brute = brute_force_inv_x(&g).unwrap();
        let opt = optimal(&g).unwrap();
        prop_assert_eq!(opt.inv_x, brute);
        prop_assert_eq!(opt.x.mul(&brute), Ratio::int(1));
        // The reported bottleneck cut attains the bound.
        let inside: Vec<bool> = (0..g.num_nodes() as u32).map(|v| opt.bottleneck.contains(&v)).collect();
        let n_in = opt.bottleneck.iter().filter(|&&v| g.is_compute(v)).count() as u128;
        let out: u128 = g.links.iter().filter(|l| inside[l.src as usize] && !inside[l.dst as usize]).map(|l| l.bw as u128).sum();
        prop_assert_eq!(Ratio::new(n_in, out), brute);
        prop_assert_eq!(opt.tree_bw.mul_int(opt.k as u128), opt.x);
        let s = schedule_with(&g, KChoice::Optimal, &ForestOptions { spread_fan: if bidir { 1 } else { 8 }, growth: if interleave { Growth::Interleaved } else { Growth::Sequential } }).unwrap();
        s.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(s.k, opt.k);
        independent_checks(&s).map_err(TestCaseError::fail)?;
        // Throughput equals the brute-force bottleneck bound: N / (1/x*).
        prop_assert_eq!(s.algbw, Ratio::int(g.num_compute() as u128).div(&brute));
        // Auto (k < 10 when possible) never fails, also on one-way links where rounding breaks balance.
        let auto = schedule(&g, KChoice::Auto).unwrap();
        independent_checks(&auto).map_err(TestCaseError::fail)?;
        prop_assert!(auto.algbw <= opt.algbw && (auto.k <= 9 || auto.k == opt.k));
        let unmerged = forest::PlanOptions { chunks: 2, merge: false, split_multiplicity: false };
        let split = forest::PlanOptions { split_multiplicity: true, ..unmerged };
        for p in [forest::plan_allgather(&s, 24, 3).unwrap(), forest::plan_reduce_scatter(&s, 24, 4, 2).unwrap(), forest::plan_allreduce(&s, 8 * 13, 8, 3).unwrap(),
                  forest::plan_allgather_with(&s, 7, &unmerged).unwrap(), forest::plan_reduce_scatter_with(&s, 8, 2, &unmerged).unwrap(), forest::plan_allreduce_with(&s, 40, 4, &unmerged).unwrap(),
                  forest::plan_allgather_with(&s, 11, &split).unwrap(), forest::plan_reduce_scatter_with(&s, 12, 2, &split).unwrap(), forest::plan_allreduce_with(&s, 44, 4, &split).unwrap()] {
            execute_and_check(&p).map_err(TestCaseError::fail)?;
        }
    }

    #[test]
    fn fixed_k_is_feasible_and_within_theorem13(compute in 2usize..6, switches in 0usize..3, cycles in cycles_strategy(), k in 1u64..4) {
        let g = random_graph(compute, switches, &cycles, true, false);
        let opt = optimal(&g).unwrap();
        let s = schedule(&g, KChoice::Fixed(k)).unwrap();
        s.check().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(s.k, k);
        prop_assert!(s.algbw <= opt.algbw);
        // Theorem 13: T_k <= T* + (M/(N k)) / min b_e, i.e. 1/(k y) <= 1/x* + 1/(k min b).
        let min_b = g.links.iter().map(|l| l.bw).min().unwrap() as u128;
        let lhs = s.tree_bw.mul_int(k as u128).recip();
        let rhs = opt.inv_x.add(&Ratio::new(1, k as u128 * min_b));
        prop_assert!(lhs <= rhs);
        if k == opt.k { prop_assert_eq!(s.algbw, opt.algbw); }
    }
}

/// The schedule invariants, recomputed here without `ForestSchedule::check`: every tree is an
/// arborescence spanning all ranks along existing links through switches only, each root has
/// k trees counted with multiplicity, and (without multicast) no link carries more than its
/// capacity when each tree runs at `tree_bw`.
fn independent_checks(s: &ForestSchedule) -> Result<(), String> {
    let n = s.ranks.len();
    let mut per_root = vec![0u64; n];
    let mut load: std::collections::BTreeMap<(u32, u32), u128> = Default::default();
    for t in &s.trees {
        per_root[t.root as usize] += t.multiplicity;
        let mut parent = vec![None; n];
        for e in &t.edges {
            if e.dst == t.root || parent[e.dst as usize].is_some() {
                return Err(format!("rank {} entered twice in a tree of root {}", e.dst, t.root));
            }
            parent[e.dst as usize] = Some(e.src);
            if e.path[0] != s.ranks[e.src as usize] || *e.path.last().unwrap() != s.ranks[e.dst as usize] {
                return Err("route endpoints".into());
            }
            for (i, w) in e.path.windows(2).enumerate() {
                if s.graph.capacity(w[0], w[1]) == 0 || (i > 0 && s.graph.is_compute(w[0])) {
                    return Err("route uses a missing link or forwards through a GPU".into());
                }
                *load.entry((w[0], w[1])).or_default() += t.multiplicity as u128;
            }
        }
        // Every rank reaches the root by parent pointers (spanning, acyclic).
        for v in 0..n as u32 {
            let (mut x, mut hops) = (v, 0);
            while x != t.root {
                x = parent[x as usize].ok_or(format!("rank {x} not in the tree of root {}", t.root))?;
                hops += 1;
                if hops > n {
                    return Err("cycle".into());
                }
            }
        }
    }
    if per_root.iter().any(|&c| c != s.k) {
        return Err(format!("trees per root {per_root:?}, expected {}", s.k));
    }
    let multicast = s.graph.nodes.iter().any(|nd| nd.multicast);
    for (&(a, b), &m) in &load {
        if !multicast && s.tree_bw.mul_int(m) > Ratio::int(s.graph.capacity(a, b) as u128) {
            return Err(format!("link {a}->{b} over capacity"));
        }
    }
    Ok(())
}

#[test]
fn multicast_switch_removes_redundant_copies() {
    // Two boxes of 3 GPUs on a box switch each, joined by a multicast-capable core switch.
    let mut b = GraphBuilder::new("mc");
    let gpus: Vec<u32> = (0..6).map(|i| b.node(&format!("g{i}"), NodeKind::Compute, Some(i / 3), false).unwrap()).collect();
    let sw0 = b.node("sw0", NodeKind::Switch, Some(0), false).unwrap();
    let sw1 = b.node("sw1", NodeKind::Switch, Some(1), false).unwrap();
    let core = b.node("core", NodeKind::Switch, None, true).unwrap();
    for (i, &g) in gpus.iter().enumerate() {
        b.duplex(g, if i < 3 { sw0 } else { sw1 }, 10).unwrap();
        b.duplex(g, core, 1).unwrap();
    }
    let g = b.finish().unwrap();
    let s = schedule(&g, KChoice::Optimal).unwrap();
    s.check().unwrap();
    let mut plain = g.clone();
    plain.nodes[core as usize].multicast = false;
    let s_plain = ForestSchedule { graph: plain, ..s.clone() };
    let total = |s: &ForestSchedule| s.trees.iter().map(|t| s.physical_links(t).len() as u64 * t.multiplicity).sum::<u64>();
    assert!(total(&s) <= total(&s_plain));
    for t in &s.trees {
        // With multicast, the core switch receives each tree's data at most once.
        let into_core = s.physical_links(t).iter().filter(|l| l.1 == core).count();
        assert!(into_core <= 1, "{into_core}");
    }
}

#[test]
fn auto_chunks_follow_the_square_root_rule() {
    // ⌊√(T / latency)⌋ in 1..=64 with T = output / algbw: grows with the size, never 0.
    for preset in ["h100:2", "a100:2", "mi250:2"] {
        let s = schedule(&Graph::parse_preset(preset).unwrap(), KChoice::Auto).unwrap();
        let mut last = 0;
        for shift in 0..40u32 {
            let bytes = 1u64 << shift;
            let p = forest::auto_chunks(&s, bytes, 6_000);
            assert!((1..=forest::plan::MAX_AUTO_CHUNKS).contains(&p), "{preset} {bytes}: {p}");
            assert!(p >= last, "{preset}: {bytes} bytes get {p} chunks, fewer than {last} for half as many");
            last = p;
            // The rule, checked in floating point away from integer boundaries.
            let t_ns = bytes as f64 / s.algbw.to_f64() * 1e9;
            let want = (t_ns / 6_000.0).sqrt().clamp(1.0, 64.0);
            assert!((p as f64 - want).abs() < 1.0, "{preset} {bytes}: {p} vs {want}");
        }
        assert_eq!(forest::auto_chunks(&s, 0, 6_000), 1);
        assert_eq!(forest::auto_chunks(&s, u64::MAX, 6_000), forest::plan::MAX_AUTO_CHUNKS);
        assert_eq!(forest::auto_chunks(&s, 1 << 30, 0), forest::plan::MAX_AUTO_CHUNKS, "zero latency: most chunks");
        assert_eq!(forest::default_piece_latency_ns(&s), forest::plan::DEFAULT_PIECE_LATENCY_NS, "{preset} has two boxes");
    }
    let one_box = schedule(&Graph::parse_preset("h100:1").unwrap(), KChoice::Auto).unwrap();
    assert_eq!(forest::default_piece_latency_ns(&one_box), forest::plan::DEFAULT_PIECE_LATENCY_ONE_BOX_NS);
}

#[test]
fn graph_errors_are_clear() {
    let e = Graph::parse_preset("a100:0").unwrap_err().to_string();
    assert!(e.contains("box count"), "{e}");
    let one = Graph::from_json(r#"{"nodes":[{"name":"a","kind":"compute"},{"name":"s","kind":"switch"}],"links":[{"src":"a","dst":"s","bw":1},{"src":"s","dst":"a","bw":1}]}"#).unwrap();
    assert!(optimal(&one).unwrap_err().to_string().contains("at least two compute"));
    let g = Graph::parse_preset("a100:2").unwrap();
    let s = schedule(&g, KChoice::Optimal).unwrap();
    assert!(forest::plan_allgather(&s, 64, 0).is_err());
    assert!(forest::plan_reduce_scatter(&s, 63, 4, 1).unwrap_err().to_string().contains("multiple of elem_bytes"));
}

#[test]
fn preset_plans_execute() {
    for spec in ["a100:2", "mi250:1", "h100:2"] {
        let g = Graph::parse_preset(spec).unwrap();
        let s = schedule(&g, KChoice::Auto).unwrap();
        s.check().unwrap();
        let ag = forest::plan_allgather(&s, 4096, 4).unwrap();
        assert_eq!(ag.gpus_per_server, if spec == "mi250:1" { 16 } else { 8 });
        execute_and_check(&ag).unwrap();
        execute_and_check(&forest::plan_reduce_scatter(&s, 4096, 4, 4).unwrap()).unwrap();
        execute_and_check(&forest::plan_allreduce(&s, 4 * 1000, 4, 2).unwrap()).unwrap();
        assert!(forest::predicted_time(&s, 1 << 30) >= (1u64 << 30) as f64 / s.algbw.to_f64());
    }
}

/// Verify a plan, then execute it on symbolic bytes (each byte a u64 cell; ReduceSum adds) in transfer order,
/// checking step/dependency order and that nothing reads an unwritten byte, then compare the
/// outputs with the collective's definition.
fn execute_and_check(p: &Plan) -> Result<(), String> {
    collsched_core::plan::verify::verify(p).map_err(|e| format!("verifier: {e}"))?;
    let n = p.num_ranks() as usize;
    let val = |r: usize, i: u64| (r as u64 + 1) * 1_000_003 + i * 7919;
    let mut bufs: Vec<[Vec<Option<u64>>; 3]> = (0..n)
        .map(|r| {
            let inp = (0..p.collective.input_size(r as u32)).map(|i| Some(val(r, i))).collect();
            [inp, vec![None; p.collective.output_size(r as u32) as usize], vec![None; p.scratch_bytes[r] as usize]]
        })
        .collect();
    for (id, t) in p.transfers.iter().enumerate() {
        for &d in p.deps_of(t) {
            if d as usize >= id || p.transfers[d as usize].step >= t.step {
                return Err(format!("transfer {id}: dependency {d} is not earlier"));
            }
        }
        for sg in p.segments_of(t) {
            for i in 0..sg.len {
                let v = bufs[t.src as usize][sg.src_buf as usize]
                    .get((sg.src_off + i) as usize)
                    .copied()
                    .flatten()
                    .ok_or_else(|| format!("transfer {id} reads unwritten {:?}[{}] of rank {}", sg.src_buf, sg.src_off + i, t.src))?;
                let cell = bufs[t.dst as usize][sg.dst_buf as usize]
                    .get_mut((sg.dst_off + i) as usize)
                    .ok_or_else(|| format!("transfer {id} writes out of bounds"))?;
                *cell = match (t.op, *cell) {
                    (Op::Copy, _) => Some(v),
                    (Op::ReduceSum, Some(old)) => Some(old.wrapping_add(v)),
                    (Op::ReduceSum, None) => return Err(format!("transfer {id} reduces into an unwritten byte")),
                };
            }
        }
    }
    for (r, b) in bufs.iter().enumerate() {
        let out = &b[Buf::Output as usize];
        for (i, cell) in out.iter().enumerate() {
            let i = i as u64;
            let want = match &p.collective {
                Collective::AllGather { shard_bytes, .. } => val((i / shard_bytes) as usize, i % shard_bytes),
                Collective::ReduceScatter { shard_bytes, .. } => (0..n).fold(0u64, |a, q| a.wrapping_add(val(q, r as u64 * shard_bytes + i))),
                Collective::AllReduce { .. } => (0..n).fold(0u64, |a, q| a.wrapping_add(val(q, i))),
                Collective::AllToAll { .. } => unreachable!(),
            };
            if *cell != Some(want) {
                return Err(format!("rank {r} output byte {i}: got {cell:?}, want {want}"));
            }
        }
    }
    Ok(())
}

/// Generation time trend (run with `--ignored --nocapture`; FOREST_SPECS="a100:64,..." to choose).
#[test]
#[ignore]
fn generation_trend() {
    let specs = std::env::var("FOREST_SPECS").unwrap_or_else(|_| "a100:2,mi250:2,a100:8,a100:16".into());
    for spec in specs.split(',') {
        let t = std::time::Instant::now();
        let g = Graph::parse_preset(spec).unwrap();
        let fan = std::env::var("FOREST_FAN").ok().and_then(|v| v.parse().ok()).unwrap_or(ForestOptions::for_graph(&g).spread_fan);
        let growth = match std::env::var("FOREST_GROWTH").as_deref() {
            Ok("sequential") => Growth::Sequential,
            Ok("interleaved") => Growth::Interleaved,
            _ => ForestOptions::for_graph(&g).growth,
        };
        let s = schedule_with(&g, KChoice::Auto, &ForestOptions { spread_fan: fan, growth }).unwrap();
        let el = t.elapsed().as_secs_f64();
        s.check().unwrap();
        eprintln!("{spec}: {el:.3}s k={} trees={} depth={} algbw={:.2} opt={:.2} {:?}", s.k, s.trees.len(), s.max_depth(), s.algbw.to_f64() / 1e9, s.optimum.algbw.to_f64() / 1e9, s.stats);
    }
}
