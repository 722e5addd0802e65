//! Calibration tools (ignored tests): `SEED=7 N=300 cargo test --release --test auto_diag -- --ignored --nocapture dump`
//! prints predicted and simulated times per candidate; `detail` (CASE, ALG) prints per-transfer times.
//! Generator shared with `auto_sim.rs`: a fixed, seeded set of small random cases
//! (2–4 servers of 2–8 GPUs, switch and mesh fabrics, shared and dedicated NICs, uniform,
//! Zipf, hot-receiver and sparse matrices, 64 KiB–64 MiB per GPU).
mod sabre_common;
use collsched_core::algo::auto::CANDIDATES;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::sim::{simulate, SimOptions};
use collsched_core::traffic::generators::{self, Rng};
use collsched_core::{Cluster, Traffic};
#[allow(unused_imports)]
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
