//! `auto` against the simulator on a fixed, seeded set of 240 small random cases
//! (2–4 servers of 2–8 GPUs, switch and mesh fabrics, shared and dedicated NICs, uniform,
//! Zipf, hot-receiver and sparse matrices, 64 KiB–64 MiB per GPU).
//!
//! Asserted: auto's plan simulates within 2% of the best candidate's simulated time in
//! all but at most 3% of the cases (≤ 7 of 240) and within 10% in every case; its mean
//! gap to the best is below 0.5%; and on average it is strictly better than every fixed
//! algorithm. The closed-form cost model does not see every max-min sharing effect, so
//! "within 2% in every case" does not hold: with all seven candidates 5 of these 240
//! cases land at 2.2–4.4% (1.2% of 940 cases over this and two other seeds; docs/auto.md).
mod sabre_common;
use collsched_core::algo::auto::CANDIDATES;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::sim::{simulate, SimOptions};
use collsched_core::traffic::generators::{self, Rng};
use collsched_core::{Cluster, Error, Traffic};
use sabre_common::opts;

const CASES: u64 = 240;

fn random_cluster(rng: &mut Rng) -> Cluster {
    let servers = 2 + rng.below(3) as u32; // 2..=4
    let gpus = [2u32, 4, 4, 8][rng.below(4) as usize];
    let nics = if rng.below(3) == 0 { (gpus / 2).max(1) } else { gpus };
    let preset = ["h200", "mi300x", "perlmutter"][rng.below(3) as usize];
    Cluster::parse(&format!("{preset}:{servers},gpus={gpus},nics={nics}")).unwrap()
}

/// A hot-receiver matrix: uniform noise with `hot` columns scaled by `k` on remote senders.
fn hot(n: usize, g: usize, mean: u64, k: u64, hot: usize, rng: &mut Rng) -> Traffic {
    let mut t = generators::uniform(n, mean, rng.next_u64()).unwrap();
    for _ in 0..hot {
        let c = rng.below(n as u64) as usize;
        for i in 0..n {
            if i / g != c / g {
                t.set(i, c, t.get(i, c) * k);
            }
        }
    }
    t
}

fn random_traffic(c: &Cluster, rng: &mut Rng) -> Traffic {
    let n = c.num_gpus() as usize;
    let g = c.gpus_per_server as usize;
    let per_gpu = [64u64 << 10, 1 << 20, 8 << 20, 64 << 20][rng.below(4) as usize];
    let mean = per_gpu / n as u64;
    match rng.below(4) {
        0 => generators::uniform(n, mean, rng.next_u64()).unwrap(),
        1 => generators::zipf(n, [0.5, 0.8, 0.99, 1.2][rng.below(4) as usize], mean, rng.next_u64()).unwrap(),
        2 => hot(n, g, mean, 1 + rng.below(20), 1 + rng.below(2) as usize, rng),
        _ => {
            let mut t = generators::uniform(n, mean, rng.next_u64()).unwrap();
            for i in 0..n {
                for j in 0..n {
                    if rng.below(100) < 60 {
                        t.set(i, j, 0);
                    }
                }
            }
            t
        }
    }
}

#[test]
fn auto_is_within_two_percent_of_the_best_simulated_candidate() {
    let mut rng = Rng::new(20_260_401);
    let sim = SimOptions::default();
    let mut sum_ratio: Vec<f64> = vec![0.0; CANDIDATES.len()];
    let mut counted = vec![0u64; CANDIDATES.len()];
    let mut auto_sum = 0.0;
    let mut worst = (0.0f64, String::new());
    let mut over_two_percent = Vec::new();
    let mut gap_sum = 0.0;
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
        let p = plan_all_to_all(&t, &c, "auto", &opts(&[("cache", "0")])).unwrap();
        let a = simulate(&p, &c, &sim).unwrap().time_s;
        let gap = a / best - 1.0;
        if gap > worst.0 {
            worst = (gap, format!("case {case} on {}: auto chose {} ({})", c.spec(), p.meta["choice"], p.meta["reason"]));
        }
        assert!(a <= best * 1.10, "case {case} on {}: auto ({}) {a:.6e}s vs best {best:.6e}s; times {times:?}", c.spec(), p.meta["choice"]);
        if a > best * 1.02 {
            over_two_percent.push(format!("case {case}: {:.2}% ({} on {})", gap * 100.0, p.meta["choice"], c.spec()));
        }
        gap_sum += gap.max(0.0);
        auto_sum += a / best;
        for (k, x) in times.iter().enumerate() {
            if let Some(x) = x {
                sum_ratio[k] += x / best;
                counted[k] += 1;
            }
        }
    }
    let auto_mean = auto_sum / CASES as f64;
    eprintln!("auto mean ratio to best {auto_mean:.4}; worst gap {:.2}% ({})", worst.0 * 100.0, worst.1);
    eprintln!("cases over 2%: {over_two_percent:?}");
    assert!(over_two_percent.len() as u64 * 100 <= 3 * CASES, "more than 3% of cases over 2%: {over_two_percent:?}");
    assert!(gap_sum / (CASES as f64) < 0.005, "mean gap {:.3}%", gap_sum / CASES as f64 * 100.0);
    for (k, alg) in CANDIDATES.iter().enumerate() {
        if counted[k] == 0 {
            continue;
        }
        let m = sum_ratio[k] / counted[k] as f64;
        eprintln!("  {alg:<16} mean ratio to best {m:.4} over {} cases", counted[k]);
        if counted[k] == CASES {
            assert!(auto_mean < m, "auto ({auto_mean:.4}) is not better than {alg} ({m:.4}) on average");
        }
    }
}
