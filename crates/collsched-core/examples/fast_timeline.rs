//! When each phase of a FAST plan ends (planning runs on the calling thread): medians over
//! plans of 20 Zipf(0.8) matrices, to see where the time goes.
//! `cargo run --release --example fast_timeline -- 40 200`
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::traffic::generators;
use collsched_core::{timeline, Cluster};
use std::collections::BTreeMap;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let servers: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(40);
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let c = Cluster::parse(&format!("h200:{servers}")).unwrap();
    let mats: Vec<_> = (0..20).map(|seed| generators::zipf(c.num_gpus() as usize, 0.8, 50 << 20, seed).unwrap()).collect();
    let mut ends: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for i in 0..reps {
        timeline::start();
        let p = plan_all_to_all(&mats[i % mats.len()], &c, "fast", &Options::new()).unwrap();
        for (phase, t) in timeline::stop() {
            ends.entry(phase).or_default().push(t.as_secs_f64() * 1e6);
        }
        collsched_core::plan::recycle(p);
    }
    let mut rows: Vec<(f64, &str)> = ends
        .into_iter()
        .map(|(phase, mut v)| {
            v.sort_by(f64::total_cmp);
            (v[v.len() / 2], phase)
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    println!("FAST on h200:{servers}, median end of each phase over {reps} plans:");
    for (t, phase) in rows {
        println!("{t:>10.1} µs  {phase}");
    }
}
