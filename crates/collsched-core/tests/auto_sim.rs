//! `auto` against the simulator on a fixed, seeded set of 240 small random cases
//! (2–4 servers of 2–8 GPUs, switch and mesh fabrics, shared and dedicated NICs, uniform,
//! Zipf, hot-receiver and sparse matrices, 64 KiB–64 MiB per GPU).
//!
//! Asserted: with the default (`refine=fluid`: close calls re-evaluated with the integer
//! fluid model, no floating point in the decision), auto's plan simulates within 2% of the
//! best candidate's simulated time in every case, and is strictly better than every fixed
//! algorithm on average. The same holds with `refine=always` (close calls simulated).
//! Every plan of auto is verified.
mod auto_cases;
mod sabre_common;
use auto_cases::{random_cluster, random_traffic};
use collsched_core::algo::auto::CANDIDATES;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::sim::{simulate, SimOptions};
use collsched_core::traffic::generators::Rng;
use collsched_core::plan::verify::verify;
use collsched_core::{Cluster, Error, Traffic};
use sabre_common::opts;

const CASES: u64 = 240;


/// Simulated time of auto's plan under `refine` (None = default), whether it refined its
/// close calls, and its choice with the reason.
fn auto_time(t: &Traffic, c: &Cluster, refine: Option<&str>, sim: &SimOptions) -> (f64, bool, String) {
    let mut o = vec![("cache", "0")];
    if let Some(r) = refine {
        o.push(("refine", r));
    }
    let p = plan_all_to_all(t, c, "auto", &opts(&o)).unwrap();
    verify(&p).unwrap();
    let a = simulate(&p, c, sim).unwrap().time_s;
    (a, p.meta["refined"] == "true", format!("{} ({})", p.meta["choice"], p.meta["reason"]))
}

/// Every case of one seed: the cases beyond 2% by default and with `refine=always`, how many
/// the default refined, and the mean ratio to the best candidate of auto (default) and of
/// each candidate (None where it could not plan every case).
struct Outcome {
    over_default: Vec<String>,
    over_always: Vec<String>,
    refined: u32,
    worst_gap: f64,
    auto_mean: f64,
    candidate_mean: Vec<Option<f64>>,
}

fn run_seed(seed: u64, with_always: bool) -> Outcome {
    let mut rng = Rng::new(seed);
    let sim = SimOptions::default();
    let mut sum_ratio: Vec<f64> = vec![0.0; CANDIDATES.len()];
    let mut counted = vec![0u64; CANDIDATES.len()];
    let (mut auto_sum, mut worst_gap) = (0.0, 0.0f64);
    let (mut over_default, mut over_always, mut refined) = (Vec::new(), Vec::new(), 0);
    for case in 0..CASES {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        let mut times: Vec<Option<f64>> = Vec::new();
        for alg in CANDIDATES {
            match plan_all_to_all(&t, &c, alg, &Options::new()) {
                Ok(p) => times.push(Some(simulate(&p, &c, &sim).unwrap().time_s)),
                Err(Error::Unsupported(_)) => times.push(None),
                Err(e) => panic!("{alg} failed on case {case}: {e}"),
            }
        }
        let best = times.iter().flatten().cloned().fold(f64::INFINITY, f64::min);
        let (a, r, why) = auto_time(&t, &c, None, &sim);
        refined += r as u32;
        worst_gap = worst_gap.max(a / best - 1.0);
        if a > best * 1.02 {
            over_default.push(format!("case {case}: {:.2}% on {}: {why}", (a / best - 1.0) * 100.0, c.spec()));
        }
        if with_always {
            let (a_always, _, why) = auto_time(&t, &c, Some("always"), &sim);
            if a_always > best * 1.02 {
                over_always.push(format!("case {case}: {:.2}% on {}: {why}", (a_always / best - 1.0) * 100.0, c.spec()));
            }
        }
        auto_sum += a / best;
        for (k, x) in times.iter().enumerate() {
            if let Some(x) = x {
                sum_ratio[k] += x / best;
                counted[k] += 1;
            }
        }
    }
    let candidate_mean = (0..CANDIDATES.len()).map(|k| (counted[k] == CASES).then(|| sum_ratio[k] / CASES as f64)).collect();
    Outcome { over_default, over_always, refined, worst_gap, auto_mean: auto_sum / CASES as f64, candidate_mean }
}

#[test]
fn auto_is_within_two_percent_of_the_best_simulated_candidate() {
    let o = run_seed(20_260_401, true);
    eprintln!("auto mean ratio to best {:.4}; worst gap {:.2}%; refined {} of {CASES} cases", o.auto_mean, o.worst_gap * 100.0, o.refined);
    assert!(o.over_default.is_empty(), "default: auto beyond 2% of the best candidate in {} cases: {:#?}", o.over_default.len(), o.over_default);
    assert!(o.over_always.is_empty(), "refine=always: auto beyond 2% of the best candidate in {} cases: {:#?}", o.over_always.len(), o.over_always);
    for (k, alg) in CANDIDATES.iter().enumerate() {
        if let Some(m) = o.candidate_mean[k] {
            eprintln!("  {alg:<16} mean ratio to best {m:.4}");
            assert!(o.auto_mean < m, "auto ({:.4}) is not better than {alg} ({m:.4}) on average", o.auto_mean);
        }
    }
}

/// Diagnostic (ignored): per case, the simulation cost of each candidate (wall time per
/// transfer, best of 3) and how far above the best prediction the truly best candidate was
/// predicted. `cargo test --release --test auto_sim -- --ignored --nocapture simcost`
#[test]
#[ignore]
fn simcost() {
    use collsched_core::algo::auto::cost::predict_ns;
    use std::time::Instant;
    let mut rng = Rng::new(20_260_401);
    let tol = std::env::var("TOL").ok().and_then(|v| v.parse().ok()).unwrap_or(collsched_core::sim::DEFAULT_TOLERANCE);
    let sim = SimOptions { tolerance: tol, ..SimOptions::default() };
    let exact = SimOptions::default();
    let mut worst_err = 0.0f64;
    let mut worst_per_transfer = 0.0f64;
    let mut per_transfer = Vec::new();
    let mut worst_margin = 0.0f64;
    for case in 0..CASES {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        let mut preds = Vec::new();
        let mut sims = Vec::new();
        for alg in CANDIDATES {
            let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
            let mut best = f64::INFINITY;
            let mut time = 0.0;
            for _ in 0..3 {
                let s = Instant::now();
                time = simulate(&p, &c, &sim).unwrap().time_s;
                best = best.min(s.elapsed().as_secs_f64());
            }
            let pt = best * 1e9 / p.transfers.len().max(1) as f64;
            per_transfer.push(pt);
            if pt > worst_per_transfer {
                worst_per_transfer = pt;
                eprintln!("case {case} {alg}: {} transfers, sim {:.1} us, {pt:.0} ns/transfer", p.transfers.len(), best * 1e6);
            }
            let reference = simulate(&p, &c, &exact).unwrap().time_s;
            worst_err = worst_err.max((time / reference - 1.0).abs());
            preds.push(predict_ns(&p, &c) as f64);
            sims.push(time);
        }
        let bp = preds.iter().cloned().fold(f64::INFINITY, f64::min);
        let bs = sims.iter().cloned().fold(f64::INFINITY, f64::min);
        let kbest = (0..sims.len()).find(|&k| sims[k] == bs).unwrap();
        let m = preds[kbest] / bp - 1.0;
        if m > worst_margin {
            worst_margin = m;
            eprintln!("case {case}: true best predicted {:.2}% above best prediction ({:.0} ns)", m * 100.0, bp);
        }
    }
    per_transfer.sort_by(|a, b| a.partial_cmp(b).unwrap());
    eprintln!("tolerance {tol}: worst error against the default tolerance {:.3}%", worst_err * 100.0);
    eprintln!("sim ns/transfer: median {:.0}, p90 {:.0}, max {:.0}", per_transfer[per_transfer.len() / 2], per_transfer[per_transfer.len() * 9 / 10], worst_per_transfer);
}

/// Diagnostic (ignored): predicted and simulated times of every candidate for the cases in
/// `CASES_OF_INTEREST` (comma-separated). `cargo test --release --test auto_sim -- --ignored --nocapture residuals`
#[test]
#[ignore]
fn residuals() {
    use collsched_core::algo::auto::cost::predict_ns;
    let want: Vec<u64> = std::env::var("CASES_OF_INTEREST").unwrap_or_default().split(',').filter_map(|x| x.parse().ok()).collect();
    let mut rng = Rng::new(20_260_401);
    let sim = SimOptions::default();
    for case in 0..CASES {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        if !want.contains(&case) {
            continue;
        }
        eprintln!("case {case}: {} GPUs, total {} B", c.num_gpus(), t.total());
        for alg in CANDIDATES {
            let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
            let s = simulate(&p, &c, &sim).unwrap().time_s * 1e9;
            let pr = predict_ns(&p, &c) as f64;
            eprintln!("  {alg:<16} transfers {:>5} predicted {pr:>10.0} simulated {s:>10.0} residual {:+.2}%", p.transfers.len(), (pr / s - 1.0) * 100.0);
        }
    }
}

/// Held-out check (ignored): the same acceptance on other seeds (disjoint case sets).
/// `SEEDS=7,11 cargo test --release --test auto_sim -- --ignored --nocapture other_seeds`
#[test]
#[ignore]
fn other_seeds() {
    for seed in std::env::var("SEEDS").unwrap_or("7".into()).split(',').filter_map(|s| s.parse::<u64>().ok()) {
        let o = run_seed(seed, std::env::var("ALWAYS").is_ok());
        eprintln!(
            "seed {seed}: auto mean ratio {:.4}, worst gap {:.2}%, refined {} of {CASES}; beyond 2%: default {} {:#?}; always {} {:#?}",
            o.auto_mean,
            o.worst_gap * 100.0,
            o.refined,
            o.over_default.len(),
            o.over_default,
            o.over_always.len(),
            o.over_always
        );
        for (k, alg) in CANDIDATES.iter().enumerate() {
            if let Some(m) = o.candidate_mean[k] {
                eprintln!("  {alg:<16} mean ratio to best {m:.4}{}", if o.auto_mean < m { "" } else { "  <-- not beaten" });
            }
        }
    }
}

/// Regression fingerprint of the cost model (ignored): a hash of every candidate's
/// prediction over the 240 cases, to check that a speed-up changes no prediction.
#[test]
#[ignore]
fn prediction_fingerprint() {
    use collsched_core::algo::auto::cost::predict_ns;
    let mut rng = Rng::new(20_260_401);
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut fluid = h;
    for _ in 0..CASES {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        for alg in CANDIDATES {
            if let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) {
                h = (h ^ predict_ns(&p, &c)).wrapping_mul(0x100_0000_01b3);
                for f in collsched_core::algo::auto::cost::fluid_finish_ns(&p, &c) {
                    fluid = (fluid ^ f).wrapping_mul(0x100_0000_01b3);
                }
            }
        }
    }
    eprintln!("prediction fingerprint {h:016x}; fluid (every finish time) {fluid:016x}");
}

/// The same fingerprint on the fabrics the 240 cases leave out — rings (`mi250`) and the
/// hybrid cube-mesh (`v100`) — plus larger switch clusters (ignored; 60 cases), so a
/// speed-up of the cost model is checked on every route shape.
#[test]
#[ignore]
fn prediction_fingerprint_other_fabrics() {
    use collsched_core::algo::auto::cost::{fluid_finish_ns, predict_finish_ns};
    let mut rng = Rng::new(20_261_122);
    let (mut h, mut fluid) = (0xcbf2_9ce4_8422_2325u64, 0xcbf2_9ce4_8422_2325u64);
    for case in 0..60 {
        let preset = ["mi250", "v100", "h200"][case % 3];
        let servers = if preset == "h200" { 4 + rng.below(5) } else { 2 + rng.below(3) };
        let c = Cluster::parse(&format!("{preset}:{servers}")).unwrap();
        let t = random_traffic(&c, &mut rng);
        for alg in CANDIDATES {
            if let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) {
                for f in predict_finish_ns(&p, &c) {
                    h = (h ^ f).wrapping_mul(0x100_0000_01b3);
                }
                if preset != "h200" {
                    for f in fluid_finish_ns(&p, &c) {
                        fluid = (fluid ^ f).wrapping_mul(0x100_0000_01b3);
                    }
                }
            }
        }
    }
    eprintln!("other fabrics: every predicted finish {h:016x}; fluid (every finish time) {fluid:016x}");
}

/// Every predicted finish time, the model's first pass and auto's decision (choice and
/// meta) at 32–64 GPUs (ignored): a speed-up of the cost model or of auto's evaluation must
/// leave this fingerprint unchanged. A tighter pruning bound changes meta only (which
/// candidates show `pruned_*` instead of `predicted_*`): then the decision part changes and
/// the choices must be compared directly (docs/auto.md records such a change).
#[test]
#[ignore]
fn prediction_fingerprint_large() {
    use collsched_core::algo::auto::cost::{first_pass_and_prediction_ns, predict_finish_ns};
    use collsched_core::traffic::generators;
    let (mut h, mut decisions) = (0xcbf2_9ce4_8422_2325u64, 0xcbf2_9ce4_8422_2325u64);
    let mix = |h: &mut u64, x: u64| *h = (*h ^ x).wrapping_mul(0x100_0000_01b3);
    for (k, spec) in ["h200:8", "h200:4", "mi300x:6", "h200:6,nics=4", "h200:8,gpus=4"].iter().enumerate() {
        let c = Cluster::parse(spec).unwrap();
        let n = c.num_gpus() as usize;
        for (s, mib) in [1u64, 16, 256].iter().enumerate() {
            let per_pair = (mib << 20) / n as u64;
            let seed = (k * 10 + s) as u64;
            for t in [generators::zipf(n, 0.8, per_pair, seed).unwrap(), generators::uniform(n, per_pair, seed).unwrap()] {
                for alg in CANDIDATES {
                    let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) else { continue };
                    for f in predict_finish_ns(&p, &c) {
                        mix(&mut h, f);
                    }
                    let (first, pred) = first_pass_and_prediction_ns(&p, &c, u64::MAX);
                    mix(&mut h, first);
                    mix(&mut h, pred.unwrap_or(0));
                }
                for threads in ["1", "2", "3"] {
                    let p = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0"), ("threads", threads)])).unwrap();
                    for (key, value) in &p.meta {
                        for b in key.bytes().chain(value.bytes()) {
                            mix(&mut decisions, b as u64);
                        }
                    }
                    mix(&mut decisions, p.hash());
                }
            }
        }
    }
    eprintln!("large: every predicted finish {h:016x}; auto decisions {decisions:016x}");
}
