//! The fixed, seeded case generator shared by `auto_sim.rs` (acceptance) and `auto_diag.rs`
//! (calibration): 2–4 servers of 2–8 GPUs, switch and mesh fabrics, shared and dedicated
//! NICs; uniform, Zipf, hot-receiver and sparse matrices; 64 KiB–64 MiB per GPU.
#![allow(dead_code)]
use collsched_core::traffic::generators::{self, Rng};
use collsched_core::{Cluster, Traffic};

pub fn random_cluster(rng: &mut Rng) -> Cluster {
    let servers = 2 + rng.below(3) as u32; // 2..=4
    let gpus = [2u32, 4, 4, 8][rng.below(4) as usize];
    let nics = if rng.below(3) == 0 { (gpus / 2).max(1) } else { gpus };
    let preset = ["h200", "mi300x", "perlmutter"][rng.below(3) as usize];
    Cluster::parse(&format!("{preset}:{servers},gpus={gpus},nics={nics}")).unwrap()
}

/// A hot-receiver matrix: uniform noise with `hot` columns scaled by `k` on remote senders.
pub fn hot(n: usize, g: usize, mean: u64, k: u64, hot: usize, rng: &mut Rng) -> Traffic {
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

pub fn random_traffic(c: &Cluster, rng: &mut Rng) -> Traffic {
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
