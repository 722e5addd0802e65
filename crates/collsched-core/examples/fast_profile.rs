//! Plan FAST repeatedly on one Zipf(0.8) matrix, for profiling: `cargo run --release --example fast_profile -- 128 20 [algorithm] [seeds]`.
//! `GAP_US=2000` sleeps that long between plans (as a training step does between its
//! plans), so a helper thread has gone to sleep and must be woken each time.
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::traffic::generators;
use collsched_core::topology::Tier;
use collsched_core::Cluster;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let servers: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(128);
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let algo = args.get(3).cloned().unwrap_or_else(|| "fast".into());
    // Matrices cycled through (seeds 0..seeds-1; seed 1 alone by default).
    let seeds: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(0);
    let c = Cluster::parse(&format!("h200:{servers}")).unwrap();
    let mats: Vec<_> = if seeds == 0 { vec![1] } else { (0..seeds).collect() }
        .into_iter()
        .map(|seed| generators::zipf(c.num_gpus() as usize, 0.8, 50 << 20, seed).unwrap())
        .collect();
    let gap = std::env::var("GAP_US").ok().and_then(|v| v.parse().ok()).map(std::time::Duration::from_micros);
    let mut times = Vec::new();
    for i in 0..reps {
        if let Some(gap) = gap {
            std::thread::sleep(gap);
        }
        let t = &mats[i % mats.len()];
        let t0 = std::time::Instant::now();
        let p = plan_all_to_all(t, &c, &algo, &Options::new()).unwrap();
        times.push(t0.elapsed());
        if i == 0 && std::env::var_os("STATS").is_some() {
            // Transfers, segments and deps per tier: where the assembler's work goes.
            let mut per_tier = [(0usize, 0usize, 0usize); 3];
            for tr in &p.transfers {
                let e = &mut per_tier[tr.tier as usize];
                e.0 += 1;
                e.1 += (tr.seg_end - tr.seg_begin) as usize;
                e.2 += (tr.dep_end - tr.dep_begin) as usize;
            }
            for (tier, (t, s, d)) in ["local", "scaleup", "scaleout"].iter().zip(per_tier) {
                println!("{tier}: {t} transfers, {s} segments, {d} deps");
            }
            // Step 0 is balancing; step 1 holds the intra-server part beside the first round.
            let step0 = p.transfers.iter().filter(|t| t.step == 0).count();
            let intra = p.transfers.iter().filter(|t| t.step == 1 && t.tier != Tier::ScaleOut).count();
            println!("balancing: {step0} transfers; intra-server part: {intra}");
        }
        // Recycled as a dropped Python Plan is (see plan::recycle).
        collsched_core::plan::recycle(std::hint::black_box(p));
    }
    times.sort();
    // Under load the minimum and the lower quartile are the most repeatable.
    println!("{algo} {servers} servers: median {:?} p25 {:?} min {:?}", times[times.len() / 2], times[times.len() / 4], times[0]);
}
