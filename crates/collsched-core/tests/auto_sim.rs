//! `auto`'s decision quality on the fixed, seeded set of 240 small random cases
//! (2–4 servers of 2–8 GPUs, switch and mesh fabrics, shared and dedicated NICs, uniform,
//! Zipf, hot-receiver and sparse matrices, 64 KiB–64 MiB per GPU), for both backends.
//!
//! Each candidate's true cost is its plan's simulated time plus its host overhead on the
//! backend, counted on its actual plan (transfers, steps, messages, staged bytes) with the
//! built-in constants; `native` is fanout's data movement, on Gloo with each pair's two
//! directions one after the other. Asserted: the candidate `choose` picks costs at most 1%
//! more than the best one on average, and at most 5% more in every one of the 240 cases.
mod auto_cases;
use auto_cases::{half_duplex_fanout, plan_shape, random_cluster, random_traffic};
use collsched_core::algo::auto::{choose, model, Calibration, CANDIDATES};
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::sim::{simulate, SimOptions};
use collsched_core::traffic::generators::Rng;

const CASES: u64 = 240;

/// Per backend: the ratio of the chosen candidate's true cost to the best, per case.
pub fn ratios(seed: u64, cases: u64) -> Vec<(String, Vec<f64>, Vec<String>)> {
    let cal = Calibration::defaults();
    let mut rng = Rng::new(seed);
    let sim = SimOptions::default();
    let backends = ["gloo", "nccl"];
    let mut out: Vec<(String, Vec<f64>, Vec<String>)> = backends.iter().map(|b| (b.to_string(), Vec::new(), Vec::new())).collect();
    for case in 0..cases {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        // Simulated time and actual shape of every planned candidate.
        let mut planned = Vec::new();
        let mut fanout = None;
        for &name in &CANDIDATES[1..] {
            let p = plan_all_to_all(&t, &c, name, &Options::new()).unwrap();
            planned.push((name, simulate(&p, &c, &sim).unwrap().time_s, plan_shape(&p)));
            if name == "fanout" {
                fanout = Some(p);
            }
        }
        let fanout = fanout.unwrap();
        let native_gloo = simulate(&half_duplex_fanout(&fanout), &c, &sim).unwrap().time_s;
        for (k, b) in backends.iter().enumerate() {
            let be = cal.backend(b).unwrap();
            let mut truth: Vec<(&str, f64)> = Vec::new();
            let native_shape = model::Shape { staged: planned[0].2.staged, ..model::Shape { transfers: 0.0, steps: 1.0, messages: 2.0 * (t.n() as f64 - 1.0), staged: 0.0 } };
            let native_sim = if be.half_duplex > 0.0 { native_gloo } else { planned[0].1 };
            truth.push(("native", native_sim + model::overhead_s("native", &native_shape, be, 0.0)));
            for (name, s, shape) in &planned {
                truth.push((name, s + model::overhead_s(name, shape, be, cal.planning_ns_per_transfer[*name])));
            }
            let best = truth.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
            let choice = choose(t.data(), t.n(), &c, cal, b, &[true; 8]).unwrap();
            let got = truth.iter().find(|x| x.0 == choice.algorithm).unwrap().1;
            out[k].1.push(got / best);
            if got > best * 1.05 {
                let (bn, _) = truth.iter().find(|x| x.1 == best).unwrap();
                out[k].2.push(format!("case {case} {}: chose {} ({:.1} µs, predicted {:.1}) best {bn} ({:.1} µs, predicted {:.1})", c.spec(), choice.algorithm, got * 1e6, choice.predicted_s * 1e6, best * 1e6, choice.candidates.iter().find(|p| p.name == *bn).unwrap().total_s * 1e6));
            }
        }
    }
    out
}

#[test]
fn auto_is_within_five_percent_of_the_best_candidate_and_one_percent_on_average() {
    let all = ratios(20_260_401, CASES);
    for (backend, r, over) in &all {
        let mean = r.iter().sum::<f64>() / r.len() as f64;
        let worst = r.iter().cloned().fold(0.0, f64::max);
        eprintln!("{backend}: mean {mean:.4}, worst {worst:.4}, beyond 5%: {}; listed: {over:#?}", r.iter().filter(|&&x| x > 1.05).count());
    }
    // The targets: every case within 5% of the best candidate, the mean within 1%.
    // Both hold on this seed for both backends (the held-out seeds 7 and 3 still have one
    // and two NCCL cases at 10%: docs/auto.md, Decision quality).
    for (backend, r, over) in &all {
        let mean = r.iter().sum::<f64>() / r.len() as f64;
        let worst = r.iter().cloned().fold(0.0, f64::max);
        assert!(over.is_empty() && worst <= 1.05, "{backend}: auto beyond 5% of the best candidate in {} cases (worst {worst:.3}): {over:#?}", over.len());
        assert!(mean <= 1.01, "{backend}: auto {mean:.4} of the best on average (> 1%)");
    }
}

/// Held-out seeds (ignored): `SEEDS=7,11 cargo test --release --test auto_sim -- --ignored --nocapture other_seeds`
#[test]
#[ignore]
fn other_seeds() {
    for seed in std::env::var("SEEDS").unwrap_or("7".into()).split(',').filter_map(|s| s.parse::<u64>().ok()) {
        for (backend, r, over) in ratios(seed, CASES) {
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            let worst = r.iter().cloned().fold(0.0, f64::max);
            eprintln!("seed {seed} {backend}: mean {mean:.4}, worst {worst:.4}, beyond 5%: {}; listed: {over:#?}", r.iter().filter(|&&x| x > 1.05).count());
        }
    }
}

#[test]
#[ignore]
fn debug_case() {
    let want: u64 = std::env::var("CASE").unwrap().parse().unwrap();
    let mut rng = Rng::new(std::env::var("SEED").map(|v| v.parse().unwrap()).unwrap_or(20_260_401));
    for case in 0..CASES {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        if case != want { continue; }
        let f = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        let h = half_duplex_fanout(&f);
        collsched_core::plan::verify::verify(&h).unwrap();
        let sf = simulate(&f, &c, &SimOptions::default()).unwrap().time_s;
        let sh = simulate(&h, &c, &SimOptions::default()).unwrap().time_s;
        let backend = std::env::var("BACKEND").unwrap_or("gloo".into());
        let ch = choose(t.data(), t.n(), &c, Calibration::defaults(), &backend, &[true; 8]).unwrap();
        eprintln!("fanout {} transfers sim {:.1} us; half duplex {} transfers sim {:.1} us; shape {:?}", f.transfers.len(), sf * 1e6, h.transfers.len(), sh * 1e6, plan_shape(&f));
        for p in &ch.candidates {
            eprintln!("  {:16} transfer {:.1} overhead {:.1} {:?}", p.name, p.transfer_s * 1e6, p.overhead_s * 1e6, p.shape);
            if p.name != "native" {
                let q = plan_all_to_all(&t, &c, p.name, &Options::new()).unwrap();
                let be = Calibration::defaults().backend(&backend).unwrap();
                let sh = plan_shape(&q);
                eprintln!("  {:16} sim      {:.1} overhead {:.1} {:?}", "", simulate(&q, &c, &SimOptions::default()).unwrap().time_s * 1e6, model::overhead_s(p.name, &sh, be, Calibration::defaults().planning_ns_per_transfer[p.name]) * 1e6, sh);
            }
        }
    }
}
