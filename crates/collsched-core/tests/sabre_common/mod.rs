//! Shared test helpers: byte-level execution of a plan and structural checks.
#![allow(dead_code)]
use collsched_core::plan::{Buf, Options, Plan};
use collsched_core::traffic::generators::Rng;
use collsched_core::{Cluster, Traffic};

const UNSET: u32 = u32::MAX;

/// Execute a plan on tagged bytes in `order`; panics naming the first problem.
pub fn execute(plan: &Plan, traffic: &Traffic, order: &[usize]) {
    let n = traffic.n();
    let mut input: Vec<Vec<u32>> = Vec::with_capacity(n);
    let mut tag = 0u32;
    for i in 0..n {
        let len = traffic.row_sum(i) as usize;
        input.push((tag..tag + len as u32).collect());
        tag += len as u32;
    }
    let mut output: Vec<Vec<u32>> = (0..n).map(|j| vec![UNSET; traffic.col_sum(j) as usize]).collect();
    let mut scratch: Vec<Vec<u32>> = plan.scratch_bytes.iter().map(|&b| vec![UNSET; b as usize]).collect();
    for &id in order {
        let t = plan.transfers[id];
        for s in plan.segments_of(&t) {
            let (o, l) = (s.src_off as usize, s.len as usize);
            let data: Vec<u32> = match s.src_buf {
                Buf::Input => input[t.src as usize][o..o + l].to_vec(),
                Buf::Scratch => scratch[t.src as usize][o..o + l].to_vec(),
                Buf::Output => output[t.src as usize][o..o + l].to_vec(),
            };
            assert!(data.iter().all(|&x| x != UNSET), "transfer {id} reads bytes that have not arrived");
            let (o, l) = (s.dst_off as usize, s.len as usize);
            let dst = match s.dst_buf {
                Buf::Input => panic!("transfer {id} writes an input buffer"),
                Buf::Scratch => &mut scratch[t.dst as usize][o..o + l],
                Buf::Output => &mut output[t.dst as usize][o..o + l],
            };
            if s.dst_buf == Buf::Output {
                assert!(dst.iter().all(|&x| x == UNSET), "transfer {id} writes output bytes twice");
            }
            dst.copy_from_slice(&data);
        }
    }
    let send = traffic.send_offsets();
    let recv = traffic.recv_offsets();
    for i in 0..n {
        for j in 0..n {
            let (a, b, l) = (send[i * n + j] as usize, recv[i * n + j] as usize, traffic.get(i, j) as usize);
            assert_eq!(&output[j][b..b + l], &input[i][a..a + l], "block {i}->{j} wrong at its destination");
        }
    }
}

/// Structural checks, execution in step order and in a seeded dependency-only order,
/// and the verifier once it is available.
pub fn check(plan: &Plan, traffic: &Traffic, cluster: &Cluster, seed: u64) {
    for (id, t) in plan.transfers.iter().enumerate() {
        assert_eq!(t.tier, cluster.tier(t.src, t.dst), "transfer {id} has the wrong tier");
        assert!(t.seg_end > t.seg_begin, "transfer {id} is empty");
        for &d in plan.deps_of(t) {
            assert!((d as usize) < id, "transfer {id} depends on a later transfer");
            assert!(plan.transfers[d as usize].step <= t.step, "transfer {id} is in an earlier step than its dependency");
        }
    }
    let mut by_step: Vec<usize> = (0..plan.transfers.len()).collect();
    by_step.sort_by_key(|&i| (plan.transfers[i].step, i));
    execute(plan, traffic, &by_step);
    // Random topological order over the deps alone.
    let m = plan.transfers.len();
    let mut waiting: Vec<usize> = plan.transfers.iter().map(|t| t.dep_range().len()).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); m];
    for (id, t) in plan.transfers.iter().enumerate() {
        for &d in plan.deps_of(t) {
            users[d as usize].push(id);
        }
    }
    let mut ready: Vec<usize> = (0..m).filter(|&i| waiting[i] == 0).collect();
    let mut rng = Rng::new(seed);
    let mut order = Vec::with_capacity(m);
    while !ready.is_empty() {
        let k = rng.below(ready.len() as u64) as usize;
        let id = ready.swap_remove(k);
        order.push(id);
        for &u in &users[id] {
            waiting[u] -= 1;
            if waiting[u] == 0 {
                ready.push(u);
            }
        }
    }
    assert_eq!(order.len(), m);
    execute(plan, traffic, &order);
    match collsched_core::plan::verify::verify(plan) {
        Ok(_) => {}
        Err(e) => panic!("verifier rejects the plan: {e}"),
    }
}

pub fn opts(kv: &[(&str, &str)]) -> Options {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

pub fn cluster(servers: u32, gpus: u32, nics: u32) -> Cluster {
    Cluster::parse(&format!("h200:{servers},gpus={gpus},nics={nics}")).unwrap()
}

pub fn sparse_matrix(n: usize, max: u64, density_pct: u64, seed: u64) -> Traffic<'static> {
    let mut rng = Rng::new(seed);
    let data = (0..n * n).map(|_| if rng.below(100) < density_pct { rng.below(max + 1) } else { 0 }).collect();
    Traffic::new(n, data).unwrap()
}
