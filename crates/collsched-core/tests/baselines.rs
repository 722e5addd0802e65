//! Every all-to-all producer's plans verify on random clusters and matrices, and
//! planning is deterministic. The baselines' own shapes are checked too.
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::verify::verify;
use collsched_core::plan::Options;
use collsched_core::traffic::generators::Rng;
use collsched_core::{Cluster, Error, Plan, Tier, Traffic};
use proptest::prelude::*;

const FABRICS: [&str; 4] = ["switch", "mesh", "ring", "cubemesh"];

/// Producers that must work everywhere.
const BASELINES: [&str; 3] = ["fanout", "spreadout", "hierarchical"];
/// Producers built elsewhere: verified when they return a plan; `Unsupported` is tolerated.
const OTHERS: [&str; 5] = ["balanced_direct", "fast", "sabre_skewed", "sabre_light", "auto"];

fn cluster(servers: u32, gpus: u32, fabric: usize, nics: u32) -> Cluster {
    // The hybrid cube-mesh only exists with 8 GPUs.
    let fabric = if FABRICS[fabric] == "cubemesh" && gpus != 8 { "switch" } else { FABRICS[fabric] };
    Cluster::parse(&format!("custom:{servers},gpus={gpus},fabric={fabric},nics={nics}")).unwrap()
}

/// kind 0: all zeros; 1: one hot pair; 2: random sizes (a quarter zero) up to a scale
/// picked from small, medium and "sums just fit u64".
fn matrix(n: usize, kind: u8, seed: u64) -> Traffic<'static> {
    let mut rng = Rng::new(seed);
    let mut t = Traffic::zeros(n);
    let huge = (1u64 << 60) / (n * n) as u64;
    match kind {
        0 => {}
        1 => {
            let (i, j) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
            t.set(i, j, 1 + rng.below(huge));
        }
        _ => {
            let scale = [17, 1 << 16, huge][rng.below(3) as usize];
            for i in 0..n {
                for j in 0..n {
                    if rng.below(4) != 0 {
                        t.set(i, j, rng.below(scale + 1));
                    }
                }
            }
        }
    }
    t
}

fn check_plan(algo: &str, t: &Traffic, c: &Cluster) -> Option<Plan> {
    let opts = Options::new();
    match plan_all_to_all(t, c, algo, &opts) {
        Ok(p) => {
            if let Err(e) = verify(&p) {
                panic!("{algo} on {} with matrix {:?}: {e}", c.spec(), t.data());
            }
            let again = plan_all_to_all(t, c, algo, &opts).unwrap();
            assert_eq!(p.hash(), again.hash(), "{algo} is not deterministic");
            Some(p)
        }
        Err(Error::Unsupported(_)) if OTHERS.contains(&algo) => None,
        Err(e) => panic!("{algo} failed on {}: {e}", c.spec()),
    }
}

/// Spread-out rounds are partial permutations, one round per step, straight Input→Output.
fn check_spreadout_shape(p: &Plan) {
    let n = p.num_ranks() as usize;
    assert_eq!(p.meta.get("rounds").map(String::as_str), Some(n.to_string().as_str()));
    let mut seen = vec![(u32::MAX, u32::MAX); n];
    for t in &p.transfers {
        assert_eq!((t.dst as usize + n - t.src as usize) % n, t.step as usize, "round r goes to i + r");
        assert_ne!(seen[t.src as usize].0, t.step, "rank {} sends twice in step {}", t.src, t.step);
        assert_ne!(seen[t.dst as usize].1, t.step, "rank {} receives twice in step {}", t.dst, t.step);
        seen[t.src as usize].0 = t.step;
        seen[t.dst as usize].1 = t.step;
    }
}

/// Hierarchical: scale-out only in step 1, rail-aligned, at most one message per (server pair, rail).
fn check_hierarchical_shape(p: &Plan, c: &Cluster) {
    let mut out = 0;
    for t in &p.transfers {
        match t.tier {
            Tier::ScaleOut => {
                out += 1;
                assert_eq!(t.step, 1);
                assert_eq!(c.local_index(t.src), c.local_index(t.dst), "scale-out must stay on its rail");
                assert_eq!(c.nic_of(t.src), c.nic_of(t.dst));
            }
            _ => assert_eq!(t.step, 0),
        }
    }
    let s = c.servers as usize;
    assert!(out <= s * (s - 1) * c.gpus_per_server as usize);
    assert_eq!(p.meta.get("scaleout_messages"), Some(&out.to_string()));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn every_producer_verifies(servers in 1u32..=6, gpus in 1u32..=8, fabric in 0usize..4, nics_pick in 0u32..8,
                               kind in 0u8..3, seed in any::<u64>()) {
        let nics = 1 + nics_pick % gpus;
        let c = cluster(servers, gpus, fabric, nics);
        let t = matrix(c.num_gpus() as usize, kind, seed);
        for algo in BASELINES.iter().chain(OTHERS.iter()) {
            let plan = check_plan(algo, &t, &c);
            match (*algo, plan) {
                ("spreadout", Some(p)) => check_spreadout_shape(&p),
                ("hierarchical", Some(p)) => check_hierarchical_shape(&p, &c),
                _ => {}
            }
        }
    }
}

#[test]
fn hierarchical_sends_one_message_per_rail_and_server_pair() {
    // Balanced traffic on 3 servers × 4 GPUs: exactly S(S-1)G scale-out messages, each
    // carrying G blocks, and scale-out bytes equal to the off-server traffic.
    let c = Cluster::parse("h200:3,gpus=4,nics=2").unwrap();
    let t = Traffic::new(12, vec![64; 144]).unwrap();
    let p = plan_all_to_all(&t, &c, "hierarchical", &Options::new()).unwrap();
    verify(&p).unwrap();
    let out: Vec<_> = p.transfers.iter().filter(|t| t.tier == Tier::ScaleOut).collect();
    assert_eq!(out.len(), 3 * 2 * 4);
    assert!(out.iter().all(|t| t.seg_end - t.seg_begin == 4));
    assert_eq!(p.bytes_per_tier()[Tier::ScaleOut as usize], 12 * 8 * 64);
    // Each aggregator holds (G-1) blocks for each of the S-1 other servers.
    assert!(p.scratch_bytes.iter().all(|&s| s == 3 * 2 * 64));
}

#[test]
fn spreadout_chains_rounds_per_rank() {
    let c = Cluster::parse("h200:1,gpus=4").unwrap();
    // Rank 0 sends nothing in round 1 (0→1 empty): its round-2 send waits on round 0's.
    let mut t = Traffic::new(4, vec![8; 16]).unwrap();
    t.set(0, 1, 0);
    let p = plan_all_to_all(&t, &c, "spreadout", &Options::new()).unwrap();
    verify(&p).unwrap();
    let id = p.transfers.iter().position(|x| x.src == 0 && x.dst == 2).unwrap();
    let deps: Vec<(u32, u32)> = p.deps_of(&p.transfers[id]).iter().map(|&d| (p.transfers[d as usize].src, p.transfers[d as usize].dst)).collect();
    // Latest earlier send of rank 0 is its self copy; latest receive is 3→0 of round 1.
    assert_eq!(deps, vec![(0, 0), (3, 0)]);
}

#[test]
fn baselines_reject_options() {
    let c = Cluster::parse("h200:2,gpus=2").unwrap();
    let t = Traffic::new(4, vec![8; 16]).unwrap();
    let opts = Options::from([("chunk".to_string(), "1MiB".to_string())]);
    for algo in ["spreadout", "hierarchical"] {
        let e = plan_all_to_all(&t, &c, algo, &opts).unwrap_err();
        assert!(matches!(&e, Error::InvalidInput(m) if m.contains(algo) && m.contains("'chunk'")), "{e:?}");
    }
}
