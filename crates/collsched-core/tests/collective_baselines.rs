//! Ring and tree baselines: every plan is executed on concrete data (a tiny
//! reference interpreter below, independent of the producers) and checked
//! against the collective's definition, and goes through the verifier.
use collsched_core::algo::collective::plan;
use collsched_core::plan::{verify::verify, Options};
use collsched_core::{Buf, Cluster, Collective, Op, Plan, Tier};
use proptest::prelude::*;

/// Deterministic pseudo-random bytes.
fn data(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Element-wise wrapping sum of little-endian unsigned integers of `elem` bytes.
fn add_into(dst: &mut [u8], src: &[u8], elem: usize) {
    for (d, s) in dst.chunks_mut(elem).zip(src.chunks(elem)) {
        let mut carry = 0u16;
        for k in 0..elem {
            let v = d[k] as u16 + s[k] as u16 + carry;
            d[k] = v as u8;
            carry = v >> 8;
        }
    }
}

/// Run the plan in (step, id) order on concrete buffers; check the plan's
/// structural rules on the way. Returns every rank's output.
fn execute(p: &Plan, inputs: &[Vec<u8>], elem: usize) -> Vec<Vec<u8>> {
    let n = p.num_ranks() as usize;
    let mut bufs: Vec<[Vec<u8>; 3]> = (0..n)
        .map(|r| [inputs[r].clone(), vec![0u8; p.collective.output_size(r as u32) as usize], vec![0u8; p.scratch_bytes[r] as usize]])
        .collect();
    let mut order: Vec<usize> = (0..p.transfers.len()).collect();
    order.sort_by_key(|&i| (p.transfers[i].step, i));
    for (i, t) in p.transfers.iter().enumerate() {
        for &d in p.deps_of(t) {
            assert!((d as usize) < i, "transfer {i} depends on later transfer {d}");
            assert!(p.transfers[d as usize].step <= t.step, "transfer {i} (step {}) depends on {d} in a later step", t.step);
        }
        let want = if t.src == t.dst { Tier::Local } else if t.src / p.gpus_per_server == t.dst / p.gpus_per_server { Tier::ScaleUp } else { Tier::ScaleOut };
        assert_eq!(t.tier, want, "transfer {i} has the wrong tier");
        assert!(t.seg_end > t.seg_begin, "transfer {i} is empty");
    }
    for i in order {
        let t = p.transfers[i];
        // Gather first (a message is a snapshot of the sender's segments), then scatter.
        let payload: Vec<Vec<u8>> = p.segments_of(&t).iter().map(|s| bufs[t.src as usize][s.src_buf as usize][s.src_off as usize..(s.src_off + s.len) as usize].to_vec()).collect();
        for (s, bytes) in p.segments_of(&t).iter().zip(payload) {
            let dst = &mut bufs[t.dst as usize][s.dst_buf as usize][s.dst_off as usize..(s.dst_off + s.len) as usize];
            match t.op {
                Op::Copy => dst.copy_from_slice(&bytes),
                Op::ReduceSum => {
                    assert_eq!(s.dst_off as usize % elem, 0, "transfer {i}: reduction not element-aligned");
                    assert_eq!(s.len as usize % elem, 0, "transfer {i}: reduction not element-aligned");
                    add_into(dst, &bytes, elem)
                }
            }
        }
    }
    bufs.into_iter().map(|[_, o, _]| o).collect()
}

fn expected(c: &Collective, inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let n = inputs.len();
    match *c {
        Collective::AllGather { .. } => {
            let all: Vec<u8> = inputs.concat();
            vec![all; n]
        }
        Collective::ReduceScatter { shard_bytes, elem_bytes, .. } => {
            let mut sum = vec![0u8; n * shard_bytes as usize];
            for x in inputs {
                add_into(&mut sum, x, elem_bytes as usize);
            }
            sum.chunks(shard_bytes.max(1) as usize).map(|c| c.to_vec()).chain(std::iter::repeat(Vec::new())).take(n).collect()
        }
        Collective::AllReduce { bytes, elem_bytes, .. } => {
            let mut sum = vec![0u8; bytes as usize];
            for x in inputs {
                add_into(&mut sum, x, elem_bytes as usize);
            }
            vec![sum; n]
        }
        Collective::AllToAll { .. } => unreachable!(),
    }
}

fn check(kind: &str, algo: &str, ranks: u32, bytes: u64, elem: u32, cluster: Option<&Cluster>, chunks: u64) -> Plan {
    check_channels(kind, algo, ranks, bytes, elem, cluster, chunks, None)
}

/// `check` with the ring's `channels` option (None: the default).
#[allow(clippy::too_many_arguments)]
fn check_channels(kind: &str, algo: &str, ranks: u32, bytes: u64, elem: u32, cluster: Option<&Cluster>, chunks: u64, channels: Option<u64>) -> Plan {
    let mut o = Options::new();
    if chunks != 1 {
        o.insert("chunks".into(), chunks.to_string());
    }
    if let Some(ch) = channels {
        o.insert("channels".into(), ch.to_string());
    }
    let p = plan(kind, algo, ranks, bytes, elem, cluster, &o).unwrap();
    let inputs: Vec<Vec<u8>> = (0..ranks).map(|r| data(r as u64 + 7 * bytes, p.collective.input_size(r) as usize)).collect();
    let got = execute(&p, &inputs, elem as usize);
    assert_eq!(got, expected(&p.collective, &inputs), "{kind} {algo} ranks={ranks} bytes={bytes} elem={elem} chunks={chunks} channels={channels:?}");
    if let Err(e) = verify(&p) {
        panic!("{kind} {algo} ranks={ranks} bytes={bytes}: verifier rejects: {e}");
    }
    p
}

#[test]
fn small_cases_are_exact() {
    for kind in ["allgather", "reduce_scatter", "allreduce"] {
        for algo in ["ring", "tree"] {
            for ranks in 1..=9 {
                for (bytes, elem) in [(8u64, 4u32), (12, 2), (1, 1), (0, 4), (40, 8)] {
                    for chunks in [1, 3] {
                        check(kind, algo, ranks, bytes, elem, None, chunks);
                    }
                }
            }
        }
    }
}

#[test]
fn ring_allgather_shape() {
    let p = check("allgather", "ring", 8, 1024, 1, None, 1);
    // P local copies + P(P-1) hops over P-1 steps after the copies.
    assert_eq!(p.transfers.len(), 8 + 8 * 7);
    assert_eq!(p.num_steps(), 8);
    // Every rank sends (P-1) shards: the ring's bandwidth-optimal volume.
    let sent: u64 = p.transfers.iter().filter(|t| t.src == 0 && t.dst != 0).map(|t| p.transfer_bytes(t)).sum();
    assert_eq!(sent, 7 * 1024);
}

#[test]
fn ring_on_cluster_crosses_servers_once_per_server() {
    let c = Cluster::parse("h100:2").unwrap();
    for kind in ["allgather", "reduce_scatter", "allreduce"] {
        let p = check_channels(kind, "ring", 16, 64, 4, Some(&c), 2, Some(1));
        let pairs: std::collections::BTreeSet<(u32, u32)> = p.transfers.iter().filter(|t| t.tier == Tier::ScaleOut).map(|t| (t.src, t.dst)).collect();
        assert_eq!(pairs.into_iter().collect::<Vec<_>>(), vec![(7, 8), (15, 0)], "{kind}");
    }
}

#[test]
fn default_channels_are_capped_where_a_server_has_more_nics_than_nccl_builds_rings() {
    // Two NVL72 racks: 72 NICs per server, so one ring per NIC would be 72 channels; the
    // default stops at 64 and the plan is still a correct allgather (checked against the data).
    let c = Cluster::parse("gb200:2").unwrap();
    let p = check("allgather", "ring", c.num_gpus(), 64 * 1024, 4, Some(&c), 1);
    let from_rank0 = p.transfers.iter().filter(|t| t.src == 0 && t.dst != 0).count();
    assert_eq!(from_rank0, 143 * 64, "rank 0 forwards P - 1 shards on each of 64 channels");
}

#[test]
fn tree_sends_everything_through_the_root() {
    let p = check("allreduce", "tree", 7, 64, 4, None, 1);
    let into_root: u64 = p.transfers.iter().filter(|t| t.dst == 0 && t.src != 0).map(|t| p.transfer_bytes(t)).sum();
    assert_eq!(into_root, 2 * 64, "the root hears from its two children only");
    assert!(p.transfers.iter().filter(|t| t.op == Op::ReduceSum).all(|t| t.dst == (t.src - 1) / 2));
    assert!(p.segments.iter().all(|s| s.dst_buf != Buf::Input), "never writes an input");
}

#[test]
fn plans_are_deterministic() {
    let c = Cluster::parse("mi250:2").unwrap();
    let o = Options::new();
    let a = plan("allreduce", "ring", 16, 4096, 2, Some(&c), &o).unwrap();
    let b = plan("allreduce", "ring", 16, 4096, 2, Some(&c), &o).unwrap();
    assert_eq!(a.hash(), b.hash());
    assert_ne!(a.input_hash, plan("allreduce", "ring", 16, 4098, 2, Some(&c), &o).unwrap().input_hash);
}

/// Content hashes (input hash zeroed) of single-ring plans before channels existed:
/// `channels = 1` must reproduce them exactly.
const SINGLE_RING_PINS: &[(&str, &str, u64, u32, u64, &str)] = &[
        ("h100:2", "allgather", 1000, 1, 1, "ed06e3bf987ac8b8"),
        ("h100:2", "allgather", 1000, 1, 3, "5fd3fc1609e9aa39"),
        ("h100:2", "reduce_scatter", 96, 4, 1, "2fd86fa6fcb10003"),
        ("h100:2", "reduce_scatter", 96, 4, 3, "95c9121a7f4bbb86"),
        ("h100:2", "allreduce", 4096, 2, 1, "a0a4985024f5e895"),
        ("h100:2", "allreduce", 4096, 2, 3, "c09e7b8df3d6e7b9"),
        ("mi300x:1", "allgather", 1000, 1, 1, "074ddb06de1a1dda"),
        ("mi300x:1", "allgather", 1000, 1, 3, "be62dd6547304858"),
        ("mi300x:1", "reduce_scatter", 96, 4, 1, "3f292d3ed4e5fe84"),
        ("mi300x:1", "reduce_scatter", 96, 4, 3, "69e0b38b2bcd4530"),
        ("mi300x:1", "allreduce", 4096, 2, 1, "5d0fb0bc95466644"),
        ("mi300x:1", "allreduce", 4096, 2, 3, "ba233627f4aa9f1f"),
        ("mi300x:2", "allgather", 1000, 1, 1, "ed06e3bf987ac8b8"),
        ("mi300x:2", "allgather", 1000, 1, 3, "5fd3fc1609e9aa39"),
        ("mi300x:2", "reduce_scatter", 96, 4, 1, "2fd86fa6fcb10003"),
        ("mi300x:2", "reduce_scatter", 96, 4, 3, "95c9121a7f4bbb86"),
        ("mi300x:2", "allreduce", 4096, 2, 1, "a0a4985024f5e895"),
        ("mi300x:2", "allreduce", 4096, 2, 3, "c09e7b8df3d6e7b9"),
        ("h100:3,nics=4", "allgather", 1000, 1, 1, "ea46817864cf599f"),
        ("h100:3,nics=4", "allgather", 1000, 1, 3, "a37fe0d0767e8818"),
        ("h100:3,nics=4", "reduce_scatter", 96, 4, 1, "df6380eaa45ad8b8"),
        ("h100:3,nics=4", "reduce_scatter", 96, 4, 3, "7c462b012efa9bf3"),
        ("h100:3,nics=4", "allreduce", 4096, 2, 1, "a5258ecbd78d1d2c"),
        ("h100:3,nics=4", "allreduce", 4096, 2, 3, "9ef321f3175d1f2f"),
];

#[test]
fn one_channel_reproduces_the_single_ring_plans() {
    for &(spec, kind, bytes, elem, chunks, want) in SINGLE_RING_PINS {
        let c = Cluster::parse(spec).unwrap();
        let mut p = check_channels(kind, "ring", c.num_gpus(), bytes, elem, Some(&c), chunks, Some(1));
        p.input_hash = 0;
        assert_eq!(format!("{:016x}", p.hash()), want, "{spec} {kind} chunks={chunks}");
    }
}

#[test]
fn default_channels_follow_nics_and_mesh() {
    let n = |spec: &str, kind: &str| {
        let c = Cluster::parse(spec).unwrap();
        let p = check(kind, "ring", c.num_gpus(), 4096, 4, Some(&c), 1);
        (p.meta.get("channels").cloned().unwrap_or_else(|| "1".into()), p)
    };
    assert_eq!(n("h100:4", "allgather").0, "8");
    assert_eq!(n("h100:2,nics=4", "allreduce").0, "4");
    assert_eq!(n("mi300x:1", "reduce_scatter").0, "7", "a full mesh of 8 holds 7 disjoint rings");
    assert_eq!(n("h100:1", "allreduce").0, "1", "one switch server: one ring loads every port");
    // Across servers every channel leaves a server through its own NIC.
    let (_, p) = n("h100:4", "allgather");
    let c = Cluster::parse("h100:4").unwrap();
    let out_nics: std::collections::BTreeSet<u32> = p.transfers.iter().filter(|t| t.tier == Tier::ScaleOut && c.server_of(t.src) == 0).map(|t| c.nic_of(t.src)).collect();
    assert_eq!(out_nics.len(), 8);
}

#[test]
fn channels_option_is_checked() {
    let c = Cluster::parse("h100:2").unwrap();
    let mut o = Options::new();
    for (v, msg) in [("0", "between 1 and 64"), ("65", "between 1 and 64"), ("x", "channels")] {
        o.insert("channels".into(), v.into());
        let e = plan("allgather", "ring", 16, 64, 1, Some(&c), &o).unwrap_err().to_string();
        assert!(e.contains(msg), "{v}: {e}");
    }
    o.insert("channels".into(), "2".into());
    let e = plan("allgather", "tree", 16, 64, 1, Some(&c), &o).unwrap_err().to_string();
    assert!(e.contains("'ring' only"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn random_plans_compute_their_collective(kind in 0usize..3, tree in any::<bool>(), ranks in 1u32..20, elems in 0u64..40, elem_pow in 0u32..4, chunks in 1u64..5) {
        let kind = ["allgather", "reduce_scatter", "allreduce"][kind];
        let elem = 1u32 << elem_pow;
        check(kind, if tree { "tree" } else { "ring" }, ranks, elems * elem as u64, elem, None, chunks);
    }
    #[test]
    fn random_multi_channel_rings(kind in 0usize..3, servers in 1u32..4, gpus in 1u32..9, nics in 1u32..9, mesh in any::<bool>(), elems in 0u64..40, elem_pow in 0u32..3, chunks in 1u64..3, channels in 1u64..10) {
        let kind = ["allgather", "reduce_scatter", "allreduce"][kind];
        let nics = nics.min(gpus);
        let fabric = if mesh { "mesh" } else { "switch" };
        let c = Cluster::parse(&format!("h100:{servers},gpus={gpus},nics={nics},fabric={fabric}")).unwrap();
        let elem = 1u32 << elem_pow;
        check_channels(kind, "ring", c.num_gpus(), elems * elem as u64, elem, Some(&c), chunks, Some(channels));
        check(kind, "ring", c.num_gpus(), elems * elem as u64, elem, Some(&c), chunks);
    }
    #[test]
    fn random_plans_on_clusters(kind in 0usize..3, tree in any::<bool>(), servers in 1u32..4, gpus in 1u32..5, elems in 1u64..20) {
        let kind = ["allgather", "reduce_scatter", "allreduce"][kind];
        let c = Cluster::parse(&format!("h100:{servers},gpus={gpus}")).unwrap();
        check(kind, if tree { "tree" } else { "ring" }, c.num_gpus(), elems * 4, 4, Some(&c), 2);
    }
}
