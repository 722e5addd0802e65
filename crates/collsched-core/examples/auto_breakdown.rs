//! One thread's work inside `auto` at 64 GPUs (h200:8, Zipf 0.8), step by step in the same
//! loop (so caches are as warm as in `auto`): planning balanced_direct and FAST, the matrix
//! bounds, the plan bounds, the two models, then `auto` itself on one thread.
//! `cargo run --release --example auto_breakdown -- [MiB sent per GPU]`.
use collsched_core::algo::auto::cost;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::{recycle, Options};
use collsched_core::traffic::generators;
use collsched_core::Cluster;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let reps = 200;
    let c = Cluster::parse("h200:8").unwrap();
    let t = generators::zipf(64, 0.8, (mib << 20) / 64, 1).unwrap();
    let names = ["plan bd", "plan fast", "mbounds", "bounds bd", "bounds fast", "model bd", "model fast", "recycle", "auto", "auto+recycle"];
    let mut acc = vec![Vec::new(); names.len()];
    let mut opts = Options::new();
    opts.insert("cache".into(), "0".into());
    opts.insert("threads".into(), "1".into());
    for _ in 0..reps {
        let mut lap = Instant::now();
        let mut tick = |k: usize, acc: &mut Vec<Vec<f64>>| { acc[k].push(lap.elapsed().as_secs_f64() * 1e6); lap = Instant::now(); };
        let bd = plan_all_to_all(&t, &c, "balanced_direct", &Options::new()).unwrap(); tick(0, &mut acc);
        let f = plan_all_to_all(&t, &c, "fast", &Options::new()).unwrap(); tick(1, &mut acc);
        // The matrix bounds auto computes: direct, rail, and sabre_skewed's phase bound.
        for r in [cost::Route::Direct, cost::Route::Rail] { std::hint::black_box(cost::matrix_nic_lower_bound_ns(&t, &c, r)); }
        std::hint::black_box(cost::sabre_skewed_lower_bound_ns(&t, &c)); tick(2, &mut acc);
        std::hint::black_box((cost::nic_lower_bound_ns(&bd, &c), cost::critical_path_lower_bound_ns(&bd, &c))); tick(3, &mut acc);
        std::hint::black_box((cost::nic_lower_bound_ns(&f, &c), cost::critical_path_lower_bound_ns(&f, &c))); tick(4, &mut acc);
        std::hint::black_box(cost::predict_ns(&bd, &c)); tick(5, &mut acc);
        std::hint::black_box(cost::predict_ns(&f, &c)); tick(6, &mut acc);
        recycle(bd); recycle(f); tick(7, &mut acc);
        let a = plan_all_to_all(&t, &c, "auto", &opts).unwrap(); tick(8, &mut acc);
        drop(a);
        let a = plan_all_to_all(&t, &c, "auto", &opts).unwrap(); recycle(a); tick(9, &mut acc);
    }
    for (k, n) in names.iter().enumerate() {
        let v = &mut acc[k];
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("{n:>12}: {:8.1} µs", v[v.len() / 2]);
    }
}
