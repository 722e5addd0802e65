//! Calibration tools (ignored tests): `SEED=7 N=300 cargo test --release --test auto_diag -- --ignored --nocapture dump`
//! prints predicted and simulated times per candidate; `detail` (CASE, ALG) prints per-transfer times.
//! Generator shared with `auto_sim.rs`: a fixed, seeded set of small random cases
//! (2–4 servers of 2–8 GPUs, switch and mesh fabrics, shared and dedicated NICs, uniform,
//! Zipf, hot-receiver and sparse matrices, 64 KiB–64 MiB per GPU).
mod auto_cases;
mod sabre_common;
use auto_cases::{random_cluster, random_traffic};
use collsched_core::algo::auto::CANDIDATES;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::sim::{simulate, SimOptions};
use collsched_core::traffic::generators::Rng;
#[allow(unused_imports)]
use sabre_common::opts;

const CASES: u64 = 240;


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
