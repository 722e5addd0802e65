//! Calibration data for `auto`'s closed-form model (ignored test):
//! `cargo test --release --test auto_diag -- --ignored --nocapture features > f.jsonl`
//! writes one JSON line per case (cluster, matrix and, per candidate, simulated time and
//! plan statistics) of the seeded set shared with `auto_sim.rs` (`SEED`, `N`); the model's
//! fitted weights (`algo/auto/model.rs`) come from it.
mod auto_cases;
use auto_cases::{random_cluster, random_traffic};
use collsched_core::algo::auto::PLANNED as CANDIDATES;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::Options;
use collsched_core::sim::{simulate, SimOptions};
use collsched_core::traffic::generators::Rng;

const CASES: u64 = 240;

/// Data for fitting the closed-form selector (ignored): one JSON line per case with the
/// cluster, the matrix and, per candidate, its simulated time and plan statistics.
/// `cargo test --release --test auto_diag -- --ignored --nocapture features > /tmp/f.jsonl`
#[test]
#[ignore]
fn features() {
    use collsched_core::plan::Op;
    use collsched_core::topology::Tier;
    let mut rng = Rng::new(std::env::var("SEED").map(|v| v.parse().unwrap()).unwrap_or(20_260_401));
    let sim = SimOptions::default();
    for case in 0..std::env::var("N").map(|v| v.parse().unwrap()).unwrap_or(CASES) {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        let mut cands = Vec::new();
        for alg in CANDIDATES {
            if let Ok(p) = plan_all_to_all(&t, &c, alg, &Options::new()) {
                let s = simulate(&p, &c, &sim).unwrap().time_s;
                let n = c.num_gpus() as usize;
                let (mut msgs, mut staged) = (vec![0u64; n], vec![0u64; n]);
                for x in &p.transfers {
                    let b = p.transfer_bytes(x);
                    let multi = x.seg_end - x.seg_begin > 1;
                    if x.tier == Tier::Local || x.op == Op::Copy && x.src == x.dst {
                        staged[x.src as usize] += b;
                        continue;
                    }
                    msgs[x.src as usize] += 1;
                    msgs[x.dst as usize] += 1;
                    if multi {
                        staged[x.src as usize] += b;
                        staged[x.dst as usize] += b;
                    }
                }
                cands.push(format!(
                    "\"{alg}\":{{\"sim\":{s},\"transfers\":{},\"steps\":{},\"msgs\":{},\"staged\":{}}}",
                    p.transfers.len(),
                    p.num_steps(),
                    msgs.iter().max().unwrap(),
                    staged.iter().max().unwrap()
                ));
            }
        }
        let up = match c.scaleup {
            collsched_core::topology::ScaleUp::Switch { port_bw } => port_bw,
            collsched_core::topology::ScaleUp::FullMesh { link_bw } | collsched_core::topology::ScaleUp::Ring { link_bw } | collsched_core::topology::ScaleUp::HybridCubeMesh { link_bw } => link_bw,
        };
        println!(
            "{{\"case\":{case},\"spec\":\"{}\",\"fabric\":\"{}\",\"servers\":{},\"g\":{},\"nics\":{},\"nic_bw\":{},\"up_bw\":{up},\"gpu_up_bw\":{},\"a_up\":{},\"a_out\":{},\"a_loc\":{},\"copy_bw\":{},\"matrix\":{:?},\"cands\":{{{}}}}}",
            c.spec(), c.fabric_name(), c.servers, c.gpus_per_server, c.nics_per_server, c.nic_bw, c.gpu_scaleup_bw(), c.alpha_scaleup_ns, c.alpha_scaleout_ns, c.alpha_local_ns, c.local_copy_bw, t.data(), cands.join(",")
        );
    }
}

/// Data for native's Gloo term (ignored): per case, fanout's and the pair-serialised fanout's
/// simulated times and, per NIC, the loads the closed form can read.
/// `cargo test --release --test auto_diag -- --ignored --nocapture native_features > /tmp/n.jsonl`
#[test]
#[ignore]
fn native_features() {
    use collsched_core::algo::auto::Loads;
    let mut rng = Rng::new(std::env::var("SEED").map(|v| v.parse().unwrap()).unwrap_or(20_260_401));
    let sim = SimOptions::default();
    for case in 0..CASES {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        let f = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        let h = auto_cases::half_duplex_fanout(&f);
        let (sf, sh) = (simulate(&f, &c, &sim).unwrap().time_s, simulate(&h, &c, &sim).unwrap().time_s);
        let l = Loads::new(t.data(), t.n(), &c).unwrap();
        let n = t.n();
        let nics = l.nic_up.len();
        // Per NIC: sum over its remote pairs of min(forward, reverse) and of the reverse bytes.
        let mut pmin = vec![0u64; nics];
        for i in 0..n {
            for j in i + 1..n {
                if c.server_of(i as u32) != c.server_of(j as u32) {
                    let m = t.data()[i * n + j].min(t.data()[j * n + i]);
                    pmin[c.global_nic_of(i as u32) as usize] += m;
                    pmin[c.global_nic_of(j as u32) as usize] += m;
                }
            }
        }
        // The scale-up part with each pair's two directions in turn (as `model::direct`).
        let (link, per_pair) = match c.scaleup {
            collsched_core::topology::ScaleUp::Switch { port_bw } => (port_bw as f64, false),
            collsched_core::topology::ScaleUp::FullMesh { link_bw } | collsched_core::topology::ScaleUp::HybridCubeMesh { link_bw } => (link_bw as f64, true),
            collsched_core::topology::ScaleUp::Ring { .. } => (c.gpu_scaleup_bw() as f64, false),
        };
        let a_up = c.alpha_scaleup_ns as f64 * 1e-9;
        let mut su = 0.0f64;
        for i in 0..n {
            for j in 0..n {
                if i != j && c.server_of(i as u32) == c.server_of(j as u32) && per_pair {
                    let b = t.data()[i * n + j] + t.data()[j * n + i];
                    su = su.max(a_up + b as f64 / link);
                }
            }
            if !per_pair {
                let b = l.su_out[i] + l.su_in[i];
                if b > 0 {
                    su = su.max(a_up + b as f64 / link);
                }
            }
        }
        let model = collsched_core::algo::auto::model::transfer_s("native", &l, &c, 1.0);
        println!(
            "{{\"case\":{case},\"su\":{su},\"model\":{model},\"nic_bw\":{},\"a_out\":{},\"fanout\":{sf},\"native\":{sh},\"up\":{:?},\"down\":{:?},\"uf\":{:?},\"us\":{:?},\"df\":{:?},\"ds\":{:?},\"pmin\":{:?}}}",
            c.nic_bw, c.alpha_scaleout_ns, l.nic_up, l.nic_down, l.up_first, l.up_second, l.down_first, l.down_second, pmin
        );
    }
}

/// Data for the balancing candidates' weights (ignored): per case and candidate, the
/// simulated time and the model's phases (`model::Terms::phases`).
/// `cargo test --release --test auto_diag -- --ignored --nocapture phase_features > /tmp/p.jsonl`
#[test]
#[ignore]
fn phase_features() {
    use collsched_core::algo::auto::{model, Loads};
    let mut rng = Rng::new(std::env::var("SEED").map(|v| v.parse().unwrap()).unwrap_or(20_260_401));
    let sim = SimOptions::default();
    for case in 0..CASES {
        let c = random_cluster(&mut rng);
        let t = random_traffic(&c, &mut rng);
        let l = Loads::new(t.data(), t.n(), &c).unwrap();
        let terms = model::Terms::new(&l, &c);
        let ph: Vec<String> = terms.phases(&l).iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        let mut cands = Vec::new();
        for alg in CANDIDATES {
            let p = plan_all_to_all(&t, &c, alg, &Options::new()).unwrap();
            let s = simulate(&p, &c, &sim).unwrap().time_s;
            cands.push(format!("\"{alg}\":{{\"sim\":{s},\"model\":{}}}", terms.transfer_s(alg, &l, 0.0)));
        }
        println!("{{\"case\":{case},\"g\":{},\"servers\":{},\"fabric\":\"{}\",{},{}}}", c.gpus_per_server, c.servers, c.fabric_name(), ph.join(","), cands.join(","));
    }
}
