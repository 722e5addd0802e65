//! `auto` and `choose`: the matrix loads equal the loads of the plans whose routes they
//! model, the choice is the minimum of the predictions (ties to the fixed order), native
//! is always a candidate, the plan is the winner's, and bad input is a clear error.
//! (Decision quality against the simulator is in `auto_sim.rs`.)
mod sabre_common;
use collsched_core::algo::auto::{self, candidate_mask, choose, plan_nic_loads, Calibration, Loads, CANDIDATES};
use collsched_core::algo::plan_all_to_all;
use collsched_core::bound::lower_bound;
use collsched_core::plan::verify::verify;
use collsched_core::plan::Options;
use collsched_core::traffic::generators::{self, Rng};
use collsched_core::{Cluster, Traffic};
use proptest::prelude::*;
use sabre_common::{opts, sparse_matrix};

fn random_cluster(preset: usize, servers: u32, gpus: u32, nics_div: u32) -> Cluster {
    let name = ["h200", "mi300x", "perlmutter", "mi250", "v100"][preset];
    let gpus = if name == "v100" { 8 } else { [1u32, 2, 4, 8][gpus as usize] };
    let nics = (gpus / nics_div).max(1);
    Cluster::parse(&format!("{name}:{servers},gpus={gpus},nics={nics}")).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The one-pass loads are the plans' own: fanout's NIC loads (direct routes) and
    /// hierarchical's (rail-aligned sends), for any cluster and matrix.
    #[test]
    fn loads_equal_the_plans_nic_loads(preset in 0usize..3, servers in 1u32..5, gpus in 0u32..4, nics_div in 1u32..3, density in 0u64..101, seed in 0u64..10_000) {
        let c = random_cluster(preset, servers, gpus, nics_div);
        let n = c.num_gpus() as usize;
        let t = sparse_matrix(n, 1 << 20, density, seed);
        let l = Loads::new(t.data(), n, &c).unwrap();
        let fanout = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        let (up, down) = plan_nic_loads(&fanout, &c);
        prop_assert_eq!(&l.nic_up, &up);
        prop_assert_eq!(&l.nic_down, &down);
        let hier = plan_all_to_all(&t, &c, "hierarchical", &Options::new()).unwrap();
        let (rail, rail_down) = plan_nic_loads(&hier, &c);
        prop_assert_eq!(&l.rail_up, &rail);
        prop_assert_eq!(&l.nic_down, &rail_down);
        // Every byte is counted once: remote + same-server + self = total, both ways.
        let sent: u64 = (0..n).map(|i| l.so_out[i] + l.su_out[i] + l.diag[i]).sum();
        let received: u64 = (0..n).map(|j| l.so_in[j] + l.su_in[j] + l.diag[j]).sum();
        prop_assert_eq!(sent, t.total());
        prop_assert_eq!(received, t.total());
        prop_assert_eq!(l.up_first.iter().zip(&l.up_second).map(|(a, b)| a + b).collect::<Vec<_>>(), up);
        prop_assert_eq!(l.nonzero, t.nonzero_blocks() as u64);
    }

    /// `choose`: deterministic, every candidate present with total = transfer + overhead,
    /// all finite and ≥ 0, the winner the first minimum, native present, and no transfer
    /// time below the lower bound's scale-out term.
    #[test]
    fn choose_is_the_minimum_of_its_predictions(preset in 0usize..5, servers in 1u32..5, gpus in 0u32..4, nics_div in 1u32..3, density in 0u64..101, seed in 0u64..10_000, gloo in any::<bool>()) {
        let c = random_cluster(preset, servers, gpus, nics_div);
        let n = c.num_gpus() as usize;
        let t = sparse_matrix(n, 4 << 20, density, seed);
        let backend = if gloo { "gloo" } else { "nccl" };
        let cal = Calibration::defaults();
        let a = choose(t.data(), n, &c, cal, backend, &[true; 8]).unwrap();
        prop_assert_eq!(&a, &choose(t.data(), n, &c, cal, backend, &[true; 8]).unwrap());
        let names: Vec<&str> = a.candidates.iter().map(|p| p.name).collect();
        prop_assert_eq!(names, CANDIDATES.to_vec());
        let best = a.candidates.iter().map(|p| p.total_s).fold(f64::INFINITY, f64::min);
        prop_assert_eq!(a.predicted_s, best);
        prop_assert_eq!(a.algorithm, a.candidates.iter().find(|p| p.total_s == best).unwrap().name);
        let scaleout = lower_bound(&t, &c).unwrap().terms.iter().filter(|(k, _)| k.starts_with("scale-out")).map(|x| x.1).fold(0.0, f64::max);
        for p in &a.candidates {
            prop_assert!(p.transfer_s.is_finite() && p.transfer_s >= 0.0 && p.overhead_s >= 0.0, "{:?}", p);
            prop_assert!((p.total_s - (p.transfer_s + p.overhead_s)).abs() <= 1e-12 * p.total_s.max(1.0));
            prop_assert!(p.transfer_s >= scaleout * (1.0 - 1e-9), "{} predicted {} below the scale-out bound {}", p.name, p.transfer_s, scaleout);
        }
    }
}

/// `Loads` from its definitions, entry by entry (the oracle for the vectorised pass).
#[allow(clippy::needless_range_loop)]
fn loads_by_definition(m: &[u64], n: usize, c: &Cluster) -> Loads {
    let (g, servers) = (c.gpus_per_server as usize, c.servers as usize);
    let nics = servers * c.nics_per_server as usize;
    let nic = |r: usize| c.global_nic_of(r as u32) as usize;
    let at = |i: usize, j: usize| m[i * n + j];
    let v = |len: usize| vec![0u64; len];
    let mut l = Loads { n, g, servers, so_out: v(n), so_in: v(n), su_out: v(n), su_in: v(n), diag: v(n), nic_up: v(nics), nic_down: v(nics), rail_up: v(nics), group_direct: v(nics), fwd_msg_max: v(nics), fwd_in_max: v(nics), up_first: v(nics), up_second: v(nics), down_first: v(nics), down_second: v(nics), server_out: v(servers), server_in: v(servers), bal_out: v(n), bal_in: v(n), gather_out: v(n), gather_in: v(n), ..Loads::default() };
    let mut col = v(n);
    let mut row_nz_max = 0;
    for i in 0..n {
        let (s, a) = (i / g, i % g);
        let mut nz_off = 0;
        for j in 0..n {
            let (b, t) = (at(i, j), j / g);
            col[j] += b;
            l.nonzero += u64::from(b != 0);
            nz_off += u64::from(b != 0 && j != i);
            if j == i {
                l.diag[i] = b;
            } else if t == s {
                l.su_out[i] += b;
                l.su_in[j] += b;
                l.su_block_max = l.su_block_max.max(b);
            } else {
                l.so_out[i] += b;
                l.so_in[j] += b;
                l.nic_up[nic(i)] += b;
                l.nic_down[nic(j)] += b;
                l.server_out[s] += b;
                l.server_in[t] += b;
                // The pair's lower rank sends first.
                if t > s {
                    l.up_first[nic(i)] += b;
                    l.down_first[nic(j)] += b;
                } else {
                    l.up_second[nic(i)] += b;
                    l.down_second[nic(j)] += b;
                }
                l.rail_up[nic(s * g + j % g)] += b;
            }
        }
        // sabre_light: remote bytes to local index k leave on the NIC of GPU (s, k), straight
        // when that is i's own NIC, else forwarded to that proxy first.
        for k in 0..g {
            let (q, remote) = (nic(s * g + k), (0..servers).filter(|&d| d != s).map(|d| at(i, d * g + k)).sum::<u64>());
            if q == nic(i) {
                l.group_direct[q] += remote;
            } else {
                l.fwd_msg_max[q] = l.fwd_msg_max[q].max(remote);
            }
        }
        row_nz_max = row_nz_max.max(nz_off);
        for k in (0..g).filter(|&k| k != a) {
            let to_index: u64 = (0..servers).map(|d| at(i, d * g + k)).sum();
            l.gather_out[i] += to_index;
            l.gather_in[s * g + k] += to_index;
            l.gather_max = l.gather_max.max(to_index);
        }
    }
    for p in 0..n {
        let (s, k) = (p / g, p % g);
        let forwarded = (0..g).filter(|&a| nic(s * g + a) != nic(p)).map(|a| (0..servers).filter(|&d| d != s).map(|d| at(s * g + a, d * g + k)).sum::<u64>()).sum::<u64>();
        l.fwd_in_max[nic(p)] = l.fwd_in_max[nic(p)].max(forwarded);
    }
    let tile = |i: usize, d: usize| (0..g).map(|k| at(i, d * g + k)).sum::<u64>();
    for s in 0..servers {
        for d in (0..servers).filter(|&d| d != s) {
            let mean = (0..g).map(|a| tile(s * g + a, d)).sum::<u64>() / g as u64;
            for i in s * g..(s + 1) * g {
                l.bal_out[i] += tile(i, d).saturating_sub(mean);
                l.bal_in[i] += mean.saturating_sub(tile(i, d));
            }
        }
    }
    for j in 0..n {
        l.so_max = l.so_max.max(l.so_out[j] + l.so_in[j]);
        l.su_max = l.su_max.max(l.su_out[j] + l.su_in[j]);
        l.rank_bytes_max = l.rank_bytes_max.max(l.so_out[j] + l.su_out[j] + col[j]);
    }
    l.degree = 2 * row_nz_max;
    l
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The one pass over the matrix (per server, g × g tiles, a non-zero count that is exact
    /// for entries below 2^32 and recounted above) equals the definitions, for any server
    /// size (the vectorised 1, 2, 4, 8 and the row-by-row others) and entries up to 2^40.
    #[test]
    fn loads_equal_their_definitions(servers in 1u32..5, gpus in 1u32..9, shared in any::<bool>(), zeros in 0u64..101, big in 0u64..3, seed in 0u64..10_000) {
        let nics = if shared { 1 } else { gpus };
        let c = Cluster::parse(&format!("h200:{servers},gpus={gpus},nics={nics}")).unwrap();
        let n = c.num_gpus() as usize;
        let mut rng = Rng::new(seed);
        // `big` = 2: now and then an entry past 2^32 (the recounted non-zeros).
        let m: Vec<u64> = (0..n * n)
            .map(|_| if rng.below(100) < zeros { 0 } else if big == 2 && rng.below(20) == 0 { (1 << 32) + rng.below(1 << 40) } else { rng.below(1 << 24) })
            .collect();
        prop_assert_eq!(Loads::new(&m, n, &c).unwrap(), loads_by_definition(&m, n, &c));
    }
}

#[test]
fn auto_plans_the_winner_and_records_the_choice() {
    for (spec, kind) in [("h200:2,gpus=4", 0), ("perlmutter:3", 1), ("mi300x:2,gpus=4,nics=2", 2), ("h200:4", 1), ("h200:1", 0)] {
        let c = Cluster::parse(spec).unwrap();
        let n = c.num_gpus() as usize;
        for (mib, backend) in [(1u64, "gloo"), (64, "nccl"), (256, "nccl")] {
            let per = (mib << 20) / n as u64;
            let t = match kind {
                0 => generators::uniform(n, per, 3).unwrap(),
                1 => generators::zipf(n, 0.99, per, 3).unwrap(),
                _ => generators::balanced(n, per).unwrap(),
            };
            let p = plan_all_to_all(&t, &c, "auto", &opts(&[("backend", backend)])).unwrap();
            verify(&p).unwrap();
            let choice = choose(t.data(), n, &c, Calibration::defaults(), backend, &[true; 8]).unwrap();
            assert_eq!(p.algorithm, "auto");
            assert_eq!(p.meta["choice"], choice.algorithm);
            assert_eq!(p.meta["backend"], backend);
            let planned = if choice.algorithm == "native" { "fanout" } else { choice.algorithm };
            assert_eq!(p.meta["planned"], planned);
            let direct = plan_all_to_all(&t, &c, planned, &Options::new()).unwrap();
            assert_eq!((&p.transfers, &p.segments, &p.deps), (&direct.transfers, &direct.segments, &direct.deps), "{spec} {mib} MiB");
            for name in CANDIDATES {
                assert!(p.meta.contains_key(&format!("predicted_{name}_ns")), "{name} missing from meta");
            }
        }
    }
}

#[test]
fn backends_and_sizes_move_the_choice() {
    // Tiny transfers: overheads dominate, so nothing beats torch's own call on NCCL.
    let c = Cluster::parse("h200:4").unwrap();
    let small = generators::uniform(32, 64, 1).unwrap();
    assert_eq!(choose(small.data(), 32, &c, Calibration::defaults(), "nccl", &[true; 8]).unwrap().algorithm, "native");
    // Large skewed transfers: a balancing planner beats fanout and native.
    let big = generators::zipf(32, 1.2, 8 << 20, 2).unwrap();
    let choice = choose(big.data(), 32, &c, Calibration::defaults(), "nccl", &[true; 8]).unwrap();
    assert!(["balanced_direct", "fast", "sabre_skewed"].contains(&choice.algorithm), "{choice:?}");
    // A candidate subset is respected; the fixed order still breaks ties.
    let mask = candidate_mask(Some("fanout, spreadout")).unwrap();
    let sub = choose(big.data(), 32, &c, Calibration::defaults(), "nccl", &mask).unwrap();
    assert_eq!(sub.candidates.len(), 2);
    assert_eq!(sub.algorithm, "fanout");
    // Zeros: every candidate still has a finite prediction (its overheads).
    let z = Traffic::zeros(32);
    let zc = choose(z.data(), 32, &c, Calibration::defaults(), "gloo", &[true; 8]).unwrap();
    // torch's call posts a message to every peer; a plan of nothing posts none.
    assert_eq!(zc.algorithm, "fanout");
    assert!(zc.candidates.iter().all(|p| p.transfer_s == 0.0));
}

#[test]
fn bad_input_is_a_clear_error() {
    let c = Cluster::parse("h200:1").unwrap();
    let t = generators::uniform(8, 100, 1).unwrap();
    let cal = Calibration::defaults();
    let e = choose(t.data(), 8, &c, cal, "mpi", &[true; 8]).unwrap_err().to_string();
    assert!(e.contains("unknown backend 'mpi'") && e.contains("gloo") && e.contains("nccl"), "{e}");
    let e = choose(t.data(), 4, &c, cal, "gloo", &[true; 8]).unwrap_err().to_string();
    assert!(e.contains("square"), "{e}");
    let e = choose(&t.data()[..16], 4, &c, cal, "gloo", &[true; 8]).unwrap_err().to_string();
    assert!(e.contains("4×4") && e.contains("8 GPUs"), "{e}");
    assert!(candidate_mask(Some("nccl")).unwrap_err().to_string().contains("unknown candidate 'nccl'"));
    assert!(candidate_mask(Some(" , ")).unwrap_err().to_string().contains("names no candidate"));
    let mut huge = vec![0u64; 64];
    huge[1] = u64::MAX;
    huge[2] = 1;
    let e = choose(&huge, 8, &c, cal, "gloo", &[true; 8]).unwrap_err().to_string();
    assert!(e.contains("row 0 sums past 2^64"), "{e}");
    let e = plan_all_to_all(&t, &c, "auto", &opts(&[("speed", "max")])).unwrap_err().to_string();
    assert!(e.contains("unknown option 'speed'"), "{e}");
    let e = plan_all_to_all(&t, &c, "auto", &opts(&[("backend", "mpi")])).unwrap_err().to_string();
    assert!(e.contains("unknown backend 'mpi'"), "{e}");
}

#[test]
fn calibration_round_trips_and_rejects_bad_constants() {
    let d = Calibration::defaults();
    assert_eq!(&Calibration::from_json(&d.to_json()).unwrap(), d);
    assert_eq!(d.digest(), Calibration::from_json(auto::Calibration::defaults_json()).unwrap().digest());
    for name in auto::PLANNED {
        assert!(d.planning_ns_per_transfer.contains_key(*name));
    }
    let bad = d.to_json().replace("\"half_duplex\": 1.0", "\"half_duplex\": 3.0");
    assert!(Calibration::from_json(&bad).unwrap_err().to_string().contains("half_duplex must be in [0, 1]"));
    let neg = d.to_json().replacen("\"step_us\": ", "\"step_us\": -", 1);
    assert!(Calibration::from_json(&neg).unwrap_err().to_string().contains("step_us must be a finite number"));
    assert!(Calibration::from_json("{").unwrap_err().to_string().contains("not a valid calibration JSON"));
    let unknown = d.to_json().replacen("\"call_us\"", "\"speed\": 1, \"call_us\"", 1);
    assert!(Calibration::from_json(&unknown).is_err());
    // A user calibration travels as an option and changes what auto charges.
    let slow = d.to_json().replace("\"step_us\": 6.0", "\"step_us\": 60000.0");
    let c = Cluster::parse("h200:4").unwrap();
    let t = generators::zipf(32, 1.2, 8 << 20, 2).unwrap();
    let p = plan_all_to_all(&t, &c, "auto", &opts(&[("calibration", &slow)])).unwrap();
    assert_eq!(p.meta["choice"], "native", "with 60 ms per step only the one-call candidate makes sense");
}

/// Timing (ignored; the reported numbers come from benchmarks/auto_cost.py, this is for
/// profiling the core alone): `cargo test --release --test auto -- --ignored --nocapture choose_cost`
#[test]
#[ignore]
fn choose_cost() {
    for servers in [8u32, 128] {
        let c = Cluster::parse(&format!("h200:{servers}")).unwrap();
        let n = c.num_gpus() as usize;
        let t = generators::zipf(n, 0.8, (16 << 20) / n as u64, 1).unwrap();
        let bytes = t.to_le_bytes();
        let reps = if n > 100 { 11 } else { 201 };
        let time = |f: &dyn Fn()| {
            let mut v: Vec<f64> = (0..reps)
                .map(|_| {
                    let s = std::time::Instant::now();
                    f();
                    s.elapsed().as_secs_f64()
                })
                .collect();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[reps / 2] * 1e6
        };
        let loads = time(&|| {
            std::hint::black_box(Loads::from_le_bytes(&bytes, n, &c).unwrap());
        });
        let words = time(&|| {
            std::hint::black_box(Loads::new(t.data(), n, &c).unwrap());
        });
        let whole = time(&|| {
            std::hint::black_box(auto::choose(t.data(), n, &c, Calibration::defaults(), "nccl", &[true; 8]).unwrap());
        });
        let sum = time(&|| {
            std::hint::black_box(t.data().iter().fold(0u64, |a, &b| a.wrapping_add(b)));
        });
        eprintln!("{n} GPUs: loads {loads:.1} µs from bytes, {words:.1} µs in place; choose {whole:.1} µs in place, one summing pass {sum:.1} µs");
    }
}
