//! Where FAST's per-rank deciding goes, phase by phase:
//! `cargo run --release --example decide_profile -- 128 11`. Plans one rank's part of a new
//! Zipf(0.8) matrix (50 MB mean pair) per repetition in a reused workspace, as the runtime
//! does, and prints the median duration of each phase (ms) and the median CPU time of the
//! whole call (this thread's, from /proc; wall minus CPU is time lost to other processes).
use collsched_core::algo::{plan_for_rank_in, Workspace};
use collsched_core::plan::Options;
use collsched_core::traffic::generators;
use collsched_core::{timeline, Cluster};
use std::collections::BTreeMap;

/// This thread's CPU time (ns), from the scheduler's statistics; 0 where unavailable.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok().and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok())).unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let servers: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(128);
    let reps: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(11);
    let c = Cluster::parse(&format!("h200:{servers}")).unwrap();
    let p = c.num_gpus();
    let mut ws = Workspace::default();
    let mut phases: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    let mut add = |name: &'static str, ms: f64, phases: &mut BTreeMap<&str, Vec<f64>>| {
        if !order.contains(&name) {
            order.push(name);
        }
        phases.entry(name).or_default().push(ms);
    };
    let mats: Vec<_> = (0..reps).map(|i| generators::zipf(p as usize, 0.8, 50 << 20, i).unwrap()).collect();
    // Warm-up: the workspace's arrays reach their size.
    plan_for_rank_in(&mut ws, &mats[0], &c, 0, "fast", &Options::new(), false).unwrap();
    for (i, t) in mats.iter().enumerate() {
        let cpu0 = thread_cpu_ns();
        timeline::start();
        let (rp, times) = plan_for_rank_in(&mut ws, t, &c, (i as u32 * 37) % p, "fast", &Options::new(), false).unwrap();
        let marks = timeline::stop();
        let cpu = thread_cpu_ns() - cpu0;
        std::hint::black_box(rp);
        let mut last = 0.0;
        for (phase, at) in marks {
            let ms = at.as_secs_f64() * 1e3;
            add(phase, ms - last, &mut phases);
            last = ms;
        }
        add("= decide", times.decide_ns as f64 / 1e6, &mut phases);
        add("= expand", times.expand_ns as f64 / 1e6, &mut phases);
        add("= cpu (whole call)", cpu as f64 / 1e6, &mut phases);
        add("= wall (whole call)", (times.decide_ns + times.expand_ns) as f64 / 1e6, &mut phases);
    }
    println!("FAST per rank on h200:{servers} ({p} GPUs), median of {reps} (ms; phases are the time since the previous mark):");
    for name in order {
        let v = phases.get_mut(name).unwrap();
        v.sort_by(f64::total_cmp);
        println!("{:>10.3}  {name}", v[v.len() / 2]);
    }
}
