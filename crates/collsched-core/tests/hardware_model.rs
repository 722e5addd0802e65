//! The simulator's hardware model: each term changes a small plan's time exactly as it says,
//! the fluid model is unchanged when selected (and when the terms are neutral), and no
//! hardware-model time beats the (fluid) lower bound.
use collsched_core::algo::collective;
use collsched_core::algo::plan_all_to_all;
use collsched_core::plan::verify::verify;
use collsched_core::bound::lower_bound;
use collsched_core::plan::{Options, Plan};
use collsched_core::sim::{simulate, Model, SimOptions};
use collsched_core::topology::HardwareTerms;
use collsched_core::traffic::generators;
use collsched_core::Cluster;
use proptest::prelude::*;

mod hand_plans;
use hand_plans::plan_of;

fn opts(model: Model) -> SimOptions {
    SimOptions { model, tolerance: 0.0, ..SimOptions::default() }
}

fn time(p: &Plan, c: &Cluster) -> f64 {
    simulate(p, c, &opts(Model::Hardware)).unwrap().time_s
}

fn assert_close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-9 * b.abs(), "{a} vs {b}");
}

/// 2 servers × 4 GPUs: NICs 100 GB/s, switch ports 400 GB/s, alphas 1/2/5 µs.
const BASE: &str = "custom:2,gpus=4,nics=4,nic=100GB/s,scaleup=400GB/s,alpha_local=1us,alpha_scaleup=2us,alpha_scaleout=5us";
const MB: u64 = 1_000_000;

fn cluster(extra: &str) -> Cluster {
    Cluster::parse(&format!("{BASE}{extra}")).unwrap()
}

#[test]
fn efficiency_scales_each_tier() {
    let out = plan_of(&cluster(""), &[(0, 4, 100 * MB, 0, &[])]);
    let up = plan_of(&cluster(""), &[(0, 1, 100 * MB, 0, &[])]);
    assert_close(time(&out, &cluster(",eff_scaleout=0.8")), 5e-6 + 100e6 / 80e9);
    assert_close(time(&out, &cluster(",eff_scaleup=0.5")), 5e-6 + 100e6 / 100e9); // other tier: unchanged
    assert_close(time(&up, &cluster(",eff_scaleup=0.5")), 2e-6 + 100e6 / 200e9);
}

#[test]
fn chunk_fill_delays_the_start_by_the_first_chunk() {
    let c = cluster(",chunk_scaleout=2MB,eff_scaleout=0.5");
    let rate = 50e9;
    for bytes in [MB, 10 * MB] {
        let p = plan_of(&c, &[(0, 4, bytes, 0, &[])]);
        let fill = bytes.min(2 * MB) as f64 / rate;
        let r = simulate(&p, &c, &opts(Model::Hardware)).unwrap();
        assert_close(r.time_s, 5e-6 + fill + bytes as f64 / rate);
        assert_close(r.transfer_start[0], 5e-6 + fill);
    }
    let up = plan_of(&c, &[(0, 1, MB, 0, &[])]);
    assert_close(time(&up, &c), 2e-6 + 1e6 / 400e9); // chunk_scaleout only: scale-up untouched
    let c = cluster(",chunk_scaleup=1MB");
    assert_close(time(&up, &c), 2e-6 + 2.0 * 1e6 / 400e9);
}

#[test]
fn step_cost_is_paid_per_stage_boundary() {
    let c = cluster(",step_cost=20us");
    // Two stages (a dependency on an earlier step) pay it once; a dependency within a step does not.
    let staged = plan_of(&c, &[(0, 4, 10 * MB, 0, &[]), (4, 0, 10 * MB, 1, &[0])]);
    let same_step = plan_of(&c, &[(0, 4, 10 * MB, 0, &[]), (4, 0, 10 * MB, 0, &[0])]);
    let leg = 5e-6 + 10e6 / 100e9;
    assert_close(time(&staged, &c), 2.0 * leg + 20e-6);
    assert_close(time(&same_step, &c), 2.0 * leg);
    // Under barrier_steps every transfer of a later step pays it.
    let free = plan_of(&c, &[(0, 4, 10 * MB, 0, &[]), (5, 1, 10 * MB, 1, &[])]);
    let r = simulate(&free, &c, &SimOptions { barrier_steps: true, ..opts(Model::Hardware) }).unwrap();
    assert_close(r.time_s, 2.0 * leg + 20e-6);
}

#[test]
fn peer_cost_grows_with_the_senders_peers_in_a_step() {
    let c = cluster(",peer_cost=1us");
    let one = plan_of(&c, &[(0, 4, MB, 0, &[])]);
    assert_close(time(&one, &c), 5e-6 + 1e6 / 100e9);
    // Three peers in the same step: each transfer starts 2 × peer_cost later.
    let three = plan_of(&c, &[(0, 4, MB, 0, &[]), (0, 5, MB, 0, &[]), (0, 6, MB, 0, &[])]);
    let r = simulate(&three, &c, &opts(Model::Hardware)).unwrap();
    for &s in &r.transfer_start {
        assert_close(s, 5e-6 + 2e-6);
    }
    // The same peers in three steps: one peer each.
    let spread = plan_of(&c, &[(0, 4, MB, 0, &[]), (0, 5, MB, 1, &[]), (0, 6, MB, 2, &[])]);
    let r = simulate(&spread, &c, &opts(Model::Hardware)).unwrap();
    assert!(r.transfer_start.iter().all(|&s| (s - 5e-6).abs() < 1e-15), "{:?}", r.transfer_start);
}

#[test]
fn incast_cuts_goodput_above_its_threshold_for_large_flows_only() {
    // Three senders into GPU 0's NIC: 3 flows > threshold 2.
    let xf: &[(u32, u32, u64, u32, &[u32])] = &[(4, 0, 30 * MB, 0, &[]), (5, 0, 30 * MB, 0, &[]), (6, 0, 30 * MB, 0, &[])];
    let c = cluster(",incast_flows=2,incast_goodput=0.5");
    assert_close(time(&plan_of(&c, xf), &c), 5e-6 + 90e6 / 50e9);
    let c = cluster(",incast_flows=3,incast_goodput=0.5");
    assert_close(time(&plan_of(&c, xf), &c), 5e-6 + 90e6 / 100e9);
    // Flows below incast_min fit in the buffers: no loss; at or above it: the loss.
    let c = cluster(",incast_flows=2,incast_goodput=0.5,incast_min=31MB");
    assert_close(time(&plan_of(&c, xf), &c), 5e-6 + 90e6 / 100e9);
    let c = cluster(",incast_flows=2,incast_goodput=0.5,incast_min=30MB");
    assert_close(time(&plan_of(&c, xf), &c), 5e-6 + 90e6 / 50e9);
}

#[test]
fn rendezvous_waits_for_the_receivers_previous_step() {
    // Rank 4 receives 100 MB in step 0; in step 1 rank 1 sends it 1 MB (no dependency in the plan).
    let xf: &[(u32, u32, u64, u32, &[u32])] = &[(0, 4, 100 * MB, 0, &[]), (1, 5, MB, 0, &[]), (5, 4, MB, 1, &[])];
    let free = cluster("");
    let r = simulate(&plan_of(&free, xf), &free, &opts(Model::Hardware)).unwrap();
    assert_close(r.transfer_start[2], 2e-6); // scale-up 5→4 starts at once
    let c = cluster(",rendezvous=1");
    let r = simulate(&plan_of(&c, xf), &c, &opts(Model::Hardware)).unwrap();
    let first_done = 5e-6 + 100e6 / 100e9;
    assert_close(r.transfer_end[0], first_done);
    assert_close(r.transfer_start[2], first_done + 2e-6); // after rank 4's step 0, then alpha
    assert_close(r.time_s, first_done + 2e-6 + 1e6 / 400e9);
}

#[test]
fn fluid_model_ignores_the_terms_bit_for_bit() {
    let terms = ",eff_scaleout=0.7,eff_scaleup=0.6,chunk_scaleout=1MiB,chunk_scaleup=1MiB,step_cost=9us,peer_cost=1us,incast_flows=2,incast_goodput=0.4,rendezvous=1";
    let (plain, rich) = (cluster(""), cluster(terms));
    let t = generators::zipf(8, 1.1, 4 << 20, 3).unwrap();
    for algo in ["fanout", "spreadout", "fast"] {
        let p = plan_all_to_all(&t, &plain, algo, &Options::new()).unwrap();
        let fluid = simulate(&p, &rich, &opts(Model::Fluid)).unwrap();
        let neutral = simulate(&p, &plain, &opts(Model::Hardware)).unwrap();
        let reference = simulate(&p, &plain, &opts(Model::Fluid)).unwrap();
        assert_eq!(fluid.time_s.to_bits(), reference.time_s.to_bits(), "{algo}");
        assert_eq!(neutral.time_s.to_bits(), reference.time_s.to_bits(), "{algo}: neutral terms must be the fluid model");
        assert_eq!(fluid.transfer_end, reference.transfer_end);
        assert!(simulate(&p, &rich, &opts(Model::Hardware)).unwrap().time_s > reference.time_s, "{algo}");
    }
}

#[test]
fn presets_with_fitted_constants_simulate_slower_than_fluid() {
    for (name, _) in collsched_core::topology::presets::PRESETS {
        let one = Cluster::parse(&format!("{name}:1")).unwrap(); // scale-up bound: every scale-up term shows
        // A preset whose terms are all scale-out ones (mi355x's carried RCCL terms) shows them across servers.
        let scaleup_neutral = one.hw.eff_scaleup_ppm == collsched_core::topology::hardware::PPM && one.hw.chunk_scaleup_bytes == 0;
        let c = if scaleup_neutral && !one.hw.is_neutral() { Cluster::parse(&format!("{name}:2")).unwrap() } else { one };
        let t = generators::balanced(c.num_gpus() as usize, 8 << 20).unwrap();
        let p = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        let (hw, fluid) = (time(&p, &c), simulate(&p, &c, &opts(Model::Fluid)).unwrap().time_s);
        // What a point-to-point plan runs under: the terms less the collective-kernel ones.
        let d = HardwareTerms::default();
        let p2p = HardwareTerms { coll_eff_scaleup_ppm: d.coll_eff_scaleup_ppm, coll_eff_scaleout_ppm: d.coll_eff_scaleout_ppm, coll_step_ns: 0, ll_alpha_scaleup_ns: 0, ll_alpha_scaleout_ns: 0, ll_payload_ppm: d.ll_payload_ppm, ll_bw: 0, ..c.hw };
        if p2p.is_neutral() {
            assert_eq!(hw.to_bits(), fluid.to_bits(), "{name}");
        } else {
            assert!(hw > fluid, "{name}: {hw} vs {fluid}");
        }
        // Collective kernels (two servers: both tiers' terms show). The low-latency protocol
        // may beat the fluid model's alpha, so only "different" is asserted.
        let c = Cluster::parse(&format!("{name}:2")).unwrap();
        let p = collective::plan("allgather", "ring", c.num_gpus(), 64 << 10, 4, Some(&c), &Options::new()).unwrap();
        let (hw, fluid) = (time(&p, &c), simulate(&p, &c, &opts(Model::Fluid)).unwrap().time_s);
        if c.hw.for_collective_kernels().is_neutral() {
            assert_eq!(hw.to_bits(), fluid.to_bits(), "{name} allgather");
        } else {
            assert_ne!(hw.to_bits(), fluid.to_bits(), "{name} allgather");
        }
    }
}

/// A ring allgather (one channel, shard `bytes`) or an allreduce (buffer `bytes`) on `c`.
fn ring(kind: &str, c: &Cluster, bytes: u64) -> Plan {
    let o: Options = [("channels".to_string(), "1".to_string())].into();
    let p = collective::plan(kind, "ring", c.num_gpus(), bytes, 4, Some(c), &o).unwrap();
    verify(&p).unwrap();
    p
}

/// `BASE` with one GPU per server (every ring hop crosses a NIC).
fn one_gpu(servers: u32, extra: &str) -> Cluster {
    Cluster::parse(&format!("custom:{servers},gpus=1,nics=1,nic=100GB/s,scaleup=400GB/s,alpha_local=1us,alpha_scaleup=2us,alpha_scaleout=5us{extra}")).unwrap()
}

#[test]
fn collective_efficiency_applies_to_collective_plans_only() {
    let c = one_gpu(2, ",eff_scaleout=0.5");
    let gather = ring("allgather", &c, 100 * MB);
    assert!(gather.is_collective_kernel());
    // The point-to-point efficiency does not reach the collective kernels: neutral 1.0.
    assert_close(time(&gather, &c), 5e-6 + 100e6 / 100e9);
    let c = one_gpu(2, ",eff_scaleout=0.5,coll_eff_scaleout=0.8");
    assert_close(time(&gather, &c), 5e-6 + 100e6 / 80e9);
    // ... and the point-to-point plans keep eff_scaleout.
    let p2p = plan_of(&c, &[(0, 1, 100 * MB, 0, &[])]);
    assert!(!p2p.is_collective_kernel());
    assert_close(time(&p2p, &c), 5e-6 + 100e6 / 50e9);
}

#[test]
fn low_latency_protocol_is_chosen_when_cheaper_and_doubles_the_wire_bytes() {
    // Simple: 5 us + b / 100 GB/s; LL: 1 us + 2b / 100 GB/s; LL is cheaper below 400 kB.
    let c = one_gpu(2, ",ll_alpha_scaleout=1us");
    for (bytes, ll) in [(1_000u64, true), (396_000, true), (404_000, false), (100 * MB, false)] {
        let want = if ll { 1e-6 + 2.0 * bytes as f64 / 100e9 } else { 5e-6 + bytes as f64 / 100e9 };
        assert_close(time(&ring("allgather", &c, bytes), &c), want);
    }
    // A quarter of the wire bytes carry data: 4x the bytes, so LL only below 4 us / 3 of wire time.
    let c = one_gpu(2, ",ll_alpha_scaleout=1us,ll_payload=0.25");
    assert_close(time(&ring("allgather", &c, 100_000), &c), 1e-6 + 4.0 * 100_000.0 / 100e9);
    assert_close(time(&ring("allgather", &c, 200_000), &c), 5e-6 + 200_000.0 / 100e9);
    // Point-to-point plans never use it.
    let p2p = plan_of(&c, &[(0, 1, 1_000, 0, &[])]);
    assert_close(time(&p2p, &c), 5e-6 + 1_000.0 / 100e9);
}

#[test]
fn low_latency_rate_cap_bounds_each_transfer_and_moves_the_choice() {
    // LL capped at 1 GB/s of data: 1 kB costs 1 us + 1 us (cap) < 5 us + 10 ns (Simple).
    let c = one_gpu(2, ",ll_alpha_scaleout=1us,ll_bw=1GB/s");
    assert_close(time(&ring("allgather", &c, 1_000), &c), 1e-6 + 1_000.0 / 1e9);
    // 10 kB: 1 us + 10 us (cap) > 5 us + 0.1 us: Simple, though LL's wire time alone is lower.
    assert_close(time(&ring("allgather", &c, 10_000), &c), 5e-6 + 10_000.0 / 100e9);
    // The cap is per transfer: two concurrent LL transfers (both directions) each get it.
    let p = ring("allgather", &c, 1_000);
    let r = simulate(&p, &c, &opts(Model::Hardware)).unwrap();
    let sends: Vec<usize> = (0..p.transfers.len()).filter(|&i| p.transfers[i].tier == collsched_core::Tier::ScaleOut).collect();
    assert_eq!(sends.len(), 2);
    for i in sends {
        assert_close(r.transfer_end[i], 1e-6 + 1_000.0 / 1e9);
    }
    assert!(r.links.iter().all(|l| l.class != collsched_core::sim::LinkClass::Protocol), "caps are not reported as links");
}

#[test]
fn low_latency_transfers_pay_no_step_synchronisation_or_chunk_fill() {
    // Three ranks: two ring steps, the second waits on the first.
    let simple = one_gpu(3, ",coll_step_cost=10us,step_cost=99us,chunk_scaleout=1MB");
    // alpha + wire per hop, the fill (the whole 1 kB) once per connection, one step's sync.
    assert_close(time(&ring("allgather", &simple, 1_000), &simple), 2.0 * 5e-6 + 3.0 * 1_000.0 / 100e9 + 10e-6);
    let ll = one_gpu(3, ",coll_step_cost=10us,chunk_scaleout=1MB,ll_alpha_scaleout=1us");
    assert_close(time(&ring("allgather", &ll, 1_000), &ll), 2.0 * (1e-6 + 2.0 * 1_000.0 / 100e9));
    // Scale-up hops use their own latency; without ll_alpha_scaleup they stay Simple.
    let two = Cluster::parse("custom:1,gpus=2,scaleup=400GB/s,alpha_local=100ns,alpha_scaleup=2us,ll_alpha_scaleout=1us").unwrap();
    assert_close(time(&ring("allgather", &two, 1_000), &two), 2e-6 + 1_000.0 / 400e9);
    let two = Cluster::parse("custom:1,gpus=2,scaleup=400GB/s,alpha_local=100ns,alpha_scaleup=2us,ll_alpha_scaleup=500ns").unwrap();
    assert_close(time(&ring("allgather", &two, 1_000), &two), 0.5e-6 + 2.0 * 1_000.0 / 400e9);
}

#[test]
fn collective_terms_are_neutral_by_default_and_ignored_by_the_fluid_model() {
    let terms = ",coll_eff_scaleout=0.7,coll_eff_scaleup=0.6,ll_alpha_scaleup=500ns,ll_alpha_scaleout=2us,coll_step_cost=5us";
    let (plain, rich) = (cluster(""), cluster(terms));
    for kind in ["allgather", "allreduce"] {
        for bytes in [4_000u64, 40 * MB] {
            let p = collective::plan(kind, "ring", 8, bytes, 4, Some(&plain), &Options::new()).unwrap();
            let reference = simulate(&p, &plain, &opts(Model::Fluid)).unwrap();
            let neutral = simulate(&p, &plain, &opts(Model::Hardware)).unwrap();
            let fluid = simulate(&p, &rich, &opts(Model::Fluid)).unwrap();
            assert_eq!(neutral.time_s.to_bits(), reference.time_s.to_bits(), "{kind} {bytes}");
            assert_eq!(fluid.time_s.to_bits(), reference.time_s.to_bits(), "{kind} {bytes}");
            assert_ne!(simulate(&p, &rich, &opts(Model::Hardware)).unwrap().time_s, reference.time_s, "{kind} {bytes}");
        }
    }
}

fn arb_terms() -> impl Strategy<Value = String> {
    (50u32..=100, 30u32..=100, 0u32..4, 0u32..50, 0u32..5, 0u32..6, 1u32..=10, (0u32..3, 0u32..2)).prop_map(|(eo, eu, chunk, step, peer, flows, goodput, (min, rdv))| {
        format!(
            ",eff_scaleout={},eff_scaleup={},chunk_scaleout={chunk}MiB,chunk_scaleup={chunk}MiB,step_cost={step}us,peer_cost={peer}us,incast_flows={flows},incast_goodput={},incast_min={min}MiB,rendezvous={rdv}",
            eo as f64 / 100.0,
            eu as f64 / 100.0,
            goodput as f64 / 10.0
        )
    })
}

/// The collective-kernel terms on top of `arb_terms` (LL latencies 0 = off).
fn arb_collective_terms() -> impl Strategy<Value = String> {
    (arb_terms(), 30u32..=100, 50u32..=100, 0u32..4, 0u32..8, 1u32..=4, 0u32..10).prop_map(|(t, cu, co, llu, llo, payload, step)| {
        format!("{t},coll_eff_scaleup={},coll_eff_scaleout={},coll_step_cost={step}us,ll_alpha_scaleup={llu}us,ll_alpha_scaleout={llo}us,ll_payload={},ll_bw={}GB/s", cu as f64 / 100.0, co as f64 / 100.0, payload as f64 / 4.0, payload * 2)
    })
}

/// Each rank's NIC and scale-up port carry at least the bytes it sends on that tier: no
/// plan beats its busiest port's bytes at peak (alpha-free, so it holds for any protocol).
fn port_bound(p: &Plan, c: &Cluster) -> f64 {
    let mut out = vec![0f64; c.num_gpus() as usize];
    let mut up = vec![0f64; c.num_gpus() as usize];
    for t in &p.transfers {
        let b = p.transfer_bytes(t) as f64;
        match t.tier {
            collsched_core::Tier::ScaleOut => out[t.src as usize] += b,
            collsched_core::Tier::ScaleUp => up[t.src as usize] += b,
            collsched_core::Tier::Local => {}
        }
    }
    let per_nic = c.gpus_per_server.div_ceil(c.nics_per_server) as f64; // GPUs sharing a NIC
    let nic = out.iter().fold(0f64, |m, &b| m.max(b)) / (c.nic_bw as f64 / per_nic);
    nic.max(up.iter().fold(0f64, |m, &b| m.max(b)) / c.scaleup_bw() as f64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    /// The hardware model only adds start-up time and removes capacity: no plan beats the
    /// fluid lower bound under it. (Not "never faster than the fluid model's time for the
    /// same plan": under max-min sharing, delaying one transfer can speed up another.)
    #[test]
    fn hardware_model_never_beats_the_fluid_bound(terms in arb_terms(), servers in 1u32..4, gpus in 1u32..5, seed in 0u64..1000, algo in 0usize..3, barrier in any::<bool>()) {
        let c = Cluster::parse(&format!("custom:{servers},gpus={gpus},nics={gpus},nic=50GB/s,scaleup=200GB/s{terms}")).unwrap();
        let n = c.num_gpus() as usize;
        let t = generators::zipf(n, 1.2, 1 << 20, seed).unwrap();
        let name = ["fanout", "spreadout", "fast"][algo];
        let p = plan_all_to_all(&t, &c, name, &Options::new()).unwrap();
        let bound = lower_bound(&t, &c).unwrap().seconds;
        let o = SimOptions { barrier_steps: barrier, ..SimOptions::default() };
        let hw = simulate(&p, &c, &o).unwrap().time_s;
        prop_assert!(hw >= bound * (1.0 - 1e-9), "{}: {name} {hw} < bound {bound}", c.spec());
    }

    /// The collective-kernel terms (collective efficiencies, the low-latency protocol) leave
    /// point-to-point plans alone, and a collective plan under them never beats its busiest
    /// port's bytes at peak (the protocol only adds wire bytes; efficiencies only remove rate).
    #[test]
    fn collective_terms_never_beat_the_bandwidth_bound(terms in arb_collective_terms(), servers in 1u32..4, gpus in 1u32..5, kb in 1u64..4096, kind in 0usize..2, algo in 0usize..2, barrier in any::<bool>()) {
        let c = Cluster::parse(&format!("custom:{servers},gpus={gpus},nics={gpus},nic=50GB/s,scaleup=200GB/s{terms}")).unwrap();
        let n = c.num_gpus();
        let o = SimOptions { barrier_steps: barrier, ..SimOptions::default() };
        let p = collective::plan(["allgather", "allreduce"][kind], ["ring", "tree"][algo], n, kb * 1024, 4, Some(&c), &Options::new()).unwrap();
        let hw = simulate(&p, &c, &o).unwrap().time_s;
        let bound = port_bound(&p, &c);
        prop_assert!(hw >= bound * (1.0 - 1e-9), "{}: {hw} < port bound {bound}", c.spec());
        // All-to-all: exactly as without the collective-kernel keys.
        let t = generators::zipf(n as usize, 1.2, 1 << 16, kb).unwrap();
        let a2a = plan_all_to_all(&t, &c, "fanout", &Options::new()).unwrap();
        let base = Cluster { hw: HardwareTerms { coll_eff_scaleup_ppm: 1_000_000, coll_eff_scaleout_ppm: 1_000_000, ll_alpha_scaleup_ns: 0, ll_alpha_scaleout_ns: 0, coll_step_ns: 0, ll_payload_ppm: 500_000, ll_bw: 0, ..c.hw }, ..c.clone() };
        prop_assert_eq!(simulate(&a2a, &c, &o).unwrap().time_s.to_bits(), simulate(&a2a, &base, &o).unwrap().time_s.to_bits());
    }
}
