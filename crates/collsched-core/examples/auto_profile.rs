//! Plan `auto` repeatedly on one Zipf(0.8) matrix, for profiling its overhead:
//! `cargo run --release --example auto_profile -- 8 20 [MiB sent per GPU] [predict|hit|bounds]`.
//! With `predict`, time the closed-form model alone on each candidate's plan instead (and
//! print its bounds; `CAND=<name>` for one candidate); with `hit`, a decision-cache hit next
//! to hashing the matrix and cloning the plan; with `bounds`, the cost of auto's lower
//! bounds and of planning the candidates it always plans. `AUTO_THREADS=N` sets auto's
//! `threads` option; `GAP_US=N` pauses N µs between calls.
use collsched_core::algo::auto::{cost, CANDIDATES};
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::traffic::generators;
use collsched_core::Cluster;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let servers: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8);
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let mib: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(50);
    let predict_only = args.get(4).is_some_and(|s| s == "predict");
    let hit = args.get(4).is_some_and(|s| s == "hit");
    let c = Cluster::parse(&format!("h200:{servers}")).unwrap();
    let t = generators::zipf(c.num_gpus() as usize, 0.8, (mib << 20) / c.num_gpus() as u64, 1).unwrap();
    if predict_only {
        let only = std::env::var("CAND").ok();
        for name in CANDIDATES {
            if only.as_deref().is_some_and(|o| o != *name) { continue; }
            let Ok(p) = plan_all_to_all(&t, &c, name, &Options::new()) else { continue };
            let times: Vec<Duration> = (0..reps)
                .map(|_| {
                    let t0 = Instant::now();
                    std::hint::black_box(cost::predict_ns(&p, &c));
                    t0.elapsed()
                })
                .collect();
            let best = *times.iter().min().unwrap();
            let nic = cost::nic_lower_bound_ns(&p, &c);
            let chain = cost::critical_path_lower_bound_ns(&p, &c);
            let (first, pred) = cost::first_pass_and_prediction_ns(&p, &c, u64::MAX);
            println!("  bounds: nic {nic} ns, chain {chain} ns, first pass {first} ns, prediction {}", pred.unwrap_or(0));
            println!("predict {name}: {} transfers, median {:?}, min {best:?}", p.transfers.len(), median(times));
        }
        return;
    }
    if args.get(4).is_some_and(|s| s == "bounds") {
        let time = |f: &dyn Fn()| median((0..reps).map(|_| { let t0 = Instant::now(); f(); t0.elapsed() }).collect());
        for r in [cost::Route::Direct, cost::Route::Rail, cost::Route::SabreProxies] {
            println!("matrix bound {r:?}: {:?}", time(&|| { std::hint::black_box(cost::matrix_nic_lower_bound_ns(&t, &c, r)); }));
        }
        // What auto uses for sabre_skewed: its NIC bound raised by its phases.
        println!("sabre_skewed phase bound: {:?}", time(&|| { std::hint::black_box(cost::sabre_skewed_lower_bound_ns(&t, &c)); }));
        for name in ["balanced_direct", "fast", "sabre_skewed"] {
            let p = plan_all_to_all(&t, &c, name, &Options::new()).unwrap();
            println!("{name}: plan {:?}, nic bound {:?}, chain {:?}", time(&|| { std::hint::black_box(plan_all_to_all(&t, &c, name, &Options::new()).unwrap()); }),
                time(&|| { std::hint::black_box(cost::nic_lower_bound_ns(&p, &c)); }), time(&|| { std::hint::black_box(cost::critical_path_lower_bound_ns(&p, &c)); }));
        }
        return;
    }
    if hit {
        // A cache hit against what it has to do anyway: hash the matrix, clone the plan.
        let p = plan_all_to_all(&t, &c, "auto", &Options::new()).unwrap();
        let time = |f: &dyn Fn()| median((0..reps).map(|_| { let t0 = Instant::now(); f(); t0.elapsed() }).collect());
        let hash = time(&|| { std::hint::black_box(t.hash()); });
        let clone = time(&|| { std::hint::black_box(p.clone()); });
        let cached = time(&|| { std::hint::black_box(plan_all_to_all(&t, &c, "auto", &Options::new()).unwrap()); });
        println!("{servers} servers: cache hit {cached:?}; matrix hash {hash:?}, plan clone {clone:?} ({} transfers)", p.transfers.len());
        return;
    }
    let mut opts = Options::new();
    opts.insert("cache".into(), "0".into());
    if let Ok(t) = std::env::var("AUTO_THREADS") { opts.insert("threads".into(), t); }
    let mut times = Vec::new();
    let (mut choice, mut reason) = (String::new(), String::new());
    // `GAP_US=N`: pause N µs between calls, as a training step does between all-to-alls,
    // so that a helper thread's short polling after one call does not serve the next.
    let gap = std::env::var("GAP_US").ok().and_then(|s| s.parse().ok()).map(Duration::from_micros);
    for _ in 0..reps {
        if let Some(gap) = gap {
            std::thread::sleep(gap);
        }
        let t0 = Instant::now();
        let p = plan_all_to_all(&t, &c, "auto", &opts).unwrap();
        times.push(t0.elapsed());
        choice = p.meta.get("choice").cloned().unwrap_or_default();
        reason = p.meta.iter().filter(|(k, _)| !k.contains('.')).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\n");
    }
    let mut sorted = times.clone();
    sorted.sort();
    let at = |q: usize| sorted[(sorted.len() - 1) * q / 100];
    println!("auto {servers} servers, {mib} MiB/GPU: choice {choice}, median {:?} (p10 {:?}, p90 {:?})\n{reason}", median(times), at(10), at(90));
}
