//! Calibration tools (ignored tests): `SEED=7 N=300 cargo test --release --test auto_diag -- --ignored --nocapture dump`
//! prints predicted and simulated times per candidate; `detail` (CASE, ALG) prints per-transfer times.
//! Generator shared with `auto_sim.rs`: a fixed, seeded set of small random cases
//! (2–4 servers of 2–8 GPUs, switch and mesh fabrics, shared and dedicated NICs, uniform,
//! Zipf, hot-receiver and sparse matrices, 64 KiB–64 MiB per GPU).
mod auto_cases;
mod sabre_common;
use auto_cases::{random_cluster, random_traffic};
use collsched_core::algo::auto::CANDIDATES;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::sim::{simulate, SimOptions};
use collsched_core::traffic::generators::Rng;
#[allow(unused_imports)]
use sabre_common::opts;

const CASES: u64 = 240;


#[test]
#[ignore]
fn dump() {
    let mut rng = Rng::new(std::env::var("SEED").map(|v| v.parse().unwrap()).unwrap_or(20_260_401));
    let sim = SimOptions::default();
    for case in 0..std::env::var("N").map(|v| v.parse().unwrap()).unwrap_or(CASES) {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        for alg in CANDIDATES {
            if let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) {
                let s = simulate(&p, &c, &sim).unwrap().time_s;
                let pr = collsched_core::algo::auto::cost::predict_ns(&p, &c);
                println!("ROW,{case},{},{},{},{alg},{s},{pr}", c.fabric_name(), c.gpus_per_server, c.nics_per_server);
            }
        }
    }
}

#[test]
#[ignore]
fn detail() {
    let want: u64 = std::env::var("CASE").unwrap().parse().unwrap();
    let alg = std::env::var("ALG").unwrap();
    let mut rng = Rng::new(std::env::var("SEED").map(|v| v.parse().unwrap()).unwrap_or(20_260_401));
    for case in 0..CASES {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        if case != want { continue; }
        let p = plan_all_to_all(&t, &c, &alg, &Options::new()).unwrap();
        let r = simulate(&p, &c, &SimOptions::default()).unwrap();
        let f = collsched_core::algo::auto::cost::predict_finish_ns(&p, &c);
        println!("{}", c.spec());
        for (i, x) in p.transfers.iter().enumerate() {
            println!("T {i} {}->{} {:?} step {} bytes {} deps {:?} sim {:.1}-{:.1} pred {:.1}", x.src, x.dst, x.tier, x.step, p.transfer_bytes(x), p.deps_of(x), r.transfer_start[i]*1e6, r.transfer_end[i]*1e6, f[i] as f64/1e3);
        }
    }
}

/// Integer fluid model against the simulator: residual statistics per candidate and its
/// cost (rate computations per transfer). `SEED=11 N=200 ... --ignored --nocapture fluid_residuals`
#[test]
#[ignore]
fn fluid_residuals() {
    use collsched_core::algo::auto::cost::{fluid_predict_ns, predict_ns};
    let mut rng = Rng::new(std::env::var("SEED").map(|v| v.parse().unwrap()).unwrap_or(20_260_401));
    let sim = SimOptions::default();
    let n = std::env::var("N").map(|v| v.parse().unwrap()).unwrap_or(CASES);
    let k = CANDIDATES.len();
    let (mut worst_f, mut worst_c) = (vec![0.0f64; k], vec![0.0f64; k]);
    let (mut abs_f, mut abs_c, mut cnt) = (vec![0.0f64; k], vec![0.0f64; k], vec![0u32; k]);
    let (mut t_fluid, mut t_closed, mut t_sim) = (0.0, 0.0, 0.0);
    for _ in 0..n {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        for (i, alg) in CANDIDATES.iter().enumerate() {
            let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
            let s0 = std::time::Instant::now();
            let s = simulate(&p, &c, &sim).unwrap().time_s * 1e9;
            t_sim += s0.elapsed().as_secs_f64();
            let s0 = std::time::Instant::now();
            let f = fluid_predict_ns(&p, &c, u64::MAX).unwrap().0 as f64;
            t_fluid += s0.elapsed().as_secs_f64();
            let s0 = std::time::Instant::now();
            let pc = predict_ns(&p, &c) as f64;
            t_closed += s0.elapsed().as_secs_f64();
            let (rf, rc) = (f / s - 1.0, pc / s - 1.0);
            if rf.abs() > worst_f[i] { worst_f[i] = rf.abs(); }
            if rc.abs() > worst_c[i] { worst_c[i] = rc.abs(); }
            abs_f[i] += rf.abs();
            abs_c[i] += rc.abs();
            cnt[i] += 1;
        }
    }
    for (i, alg) in CANDIDATES.iter().enumerate() {
        let m = cnt[i].max(1) as f64;
        println!("{alg:<16} fluid mean|r| {:.3}% max {:.3}%   closed mean|r| {:.3}% max {:.3}%", abs_f[i] / m * 100.0, worst_f[i] * 100.0, abs_c[i] / m * 100.0, worst_c[i] * 100.0);
    }
    println!("time: sim {:.3} s, fluid {:.3} s, closed form {:.3} s", t_sim, t_fluid, t_closed);
}

/// Cost of the default fluid refinement per case (ignored): close calls (predicted within
/// the margin, all candidates planned, no pruning), their fluid work and wall time, and
/// whether the closed form alone would be beyond 2% of the best fluid time.
/// `SEED=7 ... --ignored --nocapture fluid_cost`
#[test]
#[ignore]
fn fluid_cost() {
    use collsched_core::algo::auto::cost::{fluid_predict_ns, predict_ns};
    use collsched_core::algo::auto::REFINE_MARGIN_PERCENT;
    let mut rng = Rng::new(std::env::var("SEED").map(|v| v.parse().unwrap()).unwrap_or(20_260_401));
    let mut rows = Vec::new();
    for case in 0..std::env::var("N").map(|v| v.parse().unwrap()).unwrap_or(CASES) {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        let plans: Vec<_> = CANDIDATES.iter().filter_map(|alg| plan_all_to_all(&t, &c, alg, &Options::new()).ok()).collect();
        let preds: Vec<u64> = plans.iter().map(|p| predict_ns(p, &c)).collect();
        let best = *preds.iter().min().unwrap();
        let (mut work, mut wall, mut close, mut fl) = (0u64, 0.0, 0, Vec::new());
        for (p, &pr) in plans.iter().zip(&preds) {
            if pr as u128 * 100 <= best as u128 * (100 + REFINE_MARGIN_PERCENT) as u128 {
                close += 1;
                let s = std::time::Instant::now();
                let (ns, w) = fluid_predict_ns(p, &c, u64::MAX).unwrap();
                wall += s.elapsed().as_secs_f64();
                work += w;
                fl.push((ns, pr));
            } else {
                fl.push((u64::MAX, pr));
            }
        }
        let best_fluid = fl.iter().map(|x| x.0).min().unwrap();
        let model_pick = fl.iter().enumerate().min_by_key(|(i, x)| (x.1, *i)).unwrap().1 .0;
        let gap = model_pick as f64 / best_fluid as f64 - 1.0;
        if close > 1 {
            rows.push((work, wall, gap, case, c.num_gpus(), best));
        }
    }
    rows.sort_by_key(|r| r.0);
    for r in &rows {
        println!("case {:>3} gpus {:>2} close-call work {:>8} wall {:>7.0} us ({:>5.1} ns/unit) predicted {:>9} ns model gap {:+.2}%{}", r.3, r.4, r.0, r.1 * 1e6, r.1 * 1e9 / r.0 as f64, r.5, r.2 * 100.0, if r.2 > 0.02 { "  <-- needs refinement" } else { "" });
    }
}
