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
    let c = Cluster::parse(&format!("{preset}:{servers},gpus={gpus},nics={nics}")).unwrap();
    // The presets' peaks: the closed form's weights are fitted to the fluid model, and with
    // neutral terms the (default) hardware model is the fluid one. The fitted hardware
    // terms' picks are checked against the measurements (benchmarks/hardware_auto_picks.py).
    Cluster { hw: Default::default(), ..c }
}

/// A hot-receiver matrix: uniform noise with `hot` columns scaled by `k` on remote senders.
pub fn hot(n: usize, g: usize, mean: u64, k: u64, hot: usize, rng: &mut Rng) -> Traffic<'static> {
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

pub fn random_traffic(c: &Cluster, rng: &mut Rng) -> Traffic<'static> {
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

use collsched_core::algo::auto::model::Shape;
use collsched_core::{Op, Plan, PlanBuilder, Tier};

/// What a plan costs on the host, measured on the plan itself (the model estimates it
/// from the matrix): transfers, steps, the busiest rank's messages and staged bytes
/// (multi-segment messages and local copies).
pub fn plan_shape(p: &Plan) -> Shape {
    let n = p.num_ranks() as usize;
    let (mut msgs, mut staged) = (vec![0u64; n], vec![0u64; n]);
    for x in &p.transfers {
        let b = p.transfer_bytes(x);
        if x.tier == Tier::Local || (x.op == Op::Copy && x.src == x.dst) {
            staged[x.src as usize] += b;
            continue;
        }
        msgs[x.src as usize] += 1;
        msgs[x.dst as usize] += 1;
        if x.seg_end - x.seg_begin > 1 {
            staged[x.src as usize] += b;
            staged[x.dst as usize] += b;
        }
    }
    Shape {
        transfers: p.transfers.len() as f64,
        steps: p.num_steps() as f64,
        messages: *msgs.iter().max().unwrap_or(&0) as f64,
        staged: *staged.iter().max().unwrap_or(&0) as f64,
    }
}

/// torch's Gloo all-to-all as a plan for the simulator: fanout's transfers, with the two
/// directions of each pair one after the other (issue 32: Gloo moves them in turn).
pub fn half_duplex_fanout(fanout: &Plan) -> Plan {
    let mut b = PlanBuilder::new("native_gloo", fanout.collective.clone(), fanout.gpus_per_server);
    let mut first = std::collections::HashMap::new();
    for x in fanout.transfers.iter().filter(|x| x.src <= x.dst) {
        let id = b.transfer(x.src, x.dst, x.op, x.tier, 0, fanout.segments_of(x), &[]);
        first.insert((x.src, x.dst), id);
    }
    for x in fanout.transfers.iter().filter(|x| x.src > x.dst) {
        let deps: Vec<u32> = first.get(&(x.dst, x.src)).copied().into_iter().collect();
        b.transfer(x.src, x.dst, x.op, x.tier, 1, fanout.segments_of(x), &deps);
    }
    b.finish()
}
