//! Simulator speed: fanout all-to-all on 64 / 256 / 1024 GPUs (h200:8/32/128),
//! uniform and zipf traffic. Plain timed main (harness = false).
//! `cargo bench -p collsched-core --bench simulator [-- --quick | -- 64]`
//! Args: `--quick` skips the 1024-GPU cases; numbers filter by GPU count;
//! `tol=X` sets the coalescing tolerance.
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::sim::{simulate, SimOptions};
use collsched_core::traffic::generators;
use collsched_core::Cluster;
use std::time::Instant;

/// CPU seconds this thread has run (Linux schedstat); the machine is shared, so
/// wall time alone overstates the simulator's cost under load.
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()))
        .map_or(f64::NAN, |ns| ns * 1e-9)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only: Vec<u32> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let mut opts = SimOptions::default();
    for a in &args {
        if let Some(v) = a.strip_prefix("tol=") {
            opts.tolerance = v.parse().expect("tol=<float>");
        }
    }
    println!("tolerance {}", opts.tolerance);
    println!("{:<22} {:>6} {:>9} {:>8} {:>9} {:>9} {:>8} {:>11} {:>10} {:>8}", "case", "GPUs", "transfers", "plan s", "sim wall", "sim cpu", "windows", "simulated", "algbw GB/s", "/bound");
    for servers in [8u32, 32, 128] {
        let gpus = servers * 8;
        if (quick && gpus > 256) || (!only.is_empty() && !only.contains(&gpus)) {
            continue;
        }
        let cluster = Cluster::parse(&format!("h200:{servers}")).unwrap();
        let n = gpus as usize;
        for (name, traffic) in [("uniform 1MiB", generators::uniform(n, 1 << 20, 1).unwrap()), ("zipf1.2 1MiB", generators::zipf(n, 1.2, 1 << 20, 1).unwrap())] {
            let t0 = Instant::now();
            let plan = plan_all_to_all(&traffic, &cluster, "fanout", &Options::new()).unwrap();
            let plan_s = t0.elapsed().as_secs_f64();
            let (t1, c1) = (Instant::now(), cpu_s());
            let r = simulate(&plan, &cluster, &opts).unwrap();
            let (sim_s, sim_cpu) = (t1.elapsed().as_secs_f64(), cpu_s() - c1);
            println!(
                "{:<22} {:>6} {:>9} {:>8.3} {:>9.3} {:>9.3} {:>8} {:>9.3}ms {:>10.1} {:>8.4}",
                format!("fanout {name}"),
                gpus,
                r.transfers,
                plan_s,
                sim_s,
                sim_cpu,
                r.windows,
                r.time_s * 1e3,
                r.algbw / 1e9,
                r.ratio_to_bound.unwrap_or(f64::NAN)
            );
        }
    }
}
