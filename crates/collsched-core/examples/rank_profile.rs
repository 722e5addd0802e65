//! Plan one rank's FAST part repeatedly, for profiling the per-rank path:
//! `cargo run --release --example rank_profile -- 128 20 [algorithm]`. Prints the median
//! decide and expand times (ms); a new Zipf(0.8) matrix and rank each repetition.
use collsched_core::algo::{plan_for_rank_in, Workspace};
use collsched_core::plan::Options;
use collsched_core::traffic::generators;
use collsched_core::Cluster;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let servers: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(128);
    let reps: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let algo = args.get(3).cloned().unwrap_or_else(|| "fast".into());
    let c = Cluster::parse(&format!("h200:{servers}")).unwrap();
    let p = c.num_gpus();
    let mut ws = Workspace::default();
    let (mut decide, mut expand) = (Vec::new(), Vec::new());
    for i in 0..reps {
        let t = generators::zipf(p as usize, 0.8, 50 << 20, i).unwrap();
        let (rp, times) = plan_for_rank_in(&mut ws, &t, &c, (i as u32 * 37) % p, &algo, &Options::new(), false).unwrap();
        std::hint::black_box(rp);
        decide.push(times.decide_ns as f64 / 1e6);
        expand.push(times.expand_ns as f64 / 1e6);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("{algo} on {p} GPUs: decide {:.3} ms, expand {:.3} ms (median of {reps})", median(&mut decide), median(&mut expand));
}
