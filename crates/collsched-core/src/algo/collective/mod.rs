//! Baseline producers for allgather / reduce-scatter / allreduce: the ring
//! (NCCL's default) and a single-root binary tree (reduce to rank 0, then
//! broadcast). They are the yardsticks ForestColl's forests are compared with.
//!
//! Sizes: `bytes` is the per-rank shard for allgather and reduce-scatter (the
//! `shard_bytes` of `Collective::AllGather`/`ReduceScatter`) and the whole
//! buffer for allreduce. Reductions split data only at multiples of
//! `elem_bytes`, so no element is ever cut in two.
//!
//! Options: `chunks` (default 1) splits every shard into that many pieces that
//! are pipelined one step apart (piece j of a hop runs in step `hop + j`).
//! `channels` (ring only) runs that many rings side by side, each carrying an
//! equal element-aligned part of the data, as NCCL's channels do; the default
//! is what NCCL/RCCL would use on the cluster (`channels::default_channels`:
//! one ring per NIC across servers, one per disjoint cycle of a full mesh).
//! `channels = 1` is the single ring 0 → 1 → … → P-1.
use crate::error::Result;
use crate::invalid;
use crate::plan::{option_u64, Collective, Options, Plan, PlanBuilder};
use crate::topology::{Cluster, Tier};

pub mod channels;
pub mod ring;
pub mod tree;

/// The collectives these producers plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    AllGather,
    ReduceScatter,
    AllReduce,
}

impl Kind {
    pub fn parse(s: &str) -> Result<Kind> {
        match s {
            "allgather" | "all_gather" => Ok(Kind::AllGather),
            "reduce_scatter" | "reducescatter" => Ok(Kind::ReduceScatter),
            "allreduce" | "all_reduce" => Ok(Kind::AllReduce),
            _ => invalid!("unknown collective '{s}' (known: allgather, reduce_scatter, allreduce)"),
        }
    }
}

/// Every baseline algorithm name `plan` accepts, with one line each.
pub const COLLECTIVE_ALGORITHMS: &[(&str, &str)] = &[
    ("ring", "P-1 hops around one ring per channel (reduce-scatter then allgather for allreduce), NCCL's default"),
    ("tree", "single-root binary tree at rank 0: gather/reduce up, then broadcast/scatter down"),
];

const KNOWN_OPTIONS: &[&str] = &["chunks", "channels"];

/// Most channels a ring plan may have (NCCL builds at most 64).
const MAX_CHANNELS: u64 = 64;

/// What every producer needs: rank count, tier rule, pipelining depth.
pub(crate) struct Ctx {
    pub ranks: u32,
    pub gpus_per_server: u32,
    pub chunks: u64,
    pub elem: u64,
}

impl Ctx {
    pub fn tier(&self, a: u32, b: u32) -> Tier {
        if a == b {
            Tier::Local
        } else if a / self.gpus_per_server == b / self.gpus_per_server {
            Tier::ScaleUp
        } else {
            Tier::ScaleOut
        }
    }
    /// Split `[0, len)` into at most `chunks` element-aligned pieces `(offset, len)`, none empty.
    pub fn pieces(&self, len: u64) -> Vec<(u64, u64)> {
        split_aligned(len, self.elem, self.chunks)
    }
}

/// Split `len` bytes (a multiple of `elem`) into at most `parts` element-aligned,
/// non-empty pieces whose sizes differ by at most one element (larger ones first).
pub fn split_aligned(len: u64, elem: u64, parts: u64) -> Vec<(u64, u64)> {
    let elems = len / elem;
    let parts = parts.max(1);
    let (base, extra) = (elems / parts, elems % parts);
    let mut out = Vec::new();
    let mut off = 0;
    for i in 0..parts {
        let n = base + u64::from(i < extra);
        if n > 0 {
            out.push((off * elem, n * elem));
        }
        off += n;
    }
    out
}

/// Plan `kind` ("allgather", "reduce_scatter", "allreduce") with `algorithm`
/// ("ring", "tree") over `ranks` ranks. With a cluster, tiers come from its
/// servers; without one, all ranks count as one server.
pub fn plan(kind: &str, algorithm: &str, ranks: u32, bytes: u64, elem_bytes: u32, cluster: Option<&Cluster>, opts: &Options) -> Result<Plan> {
    let kind = Kind::parse(kind)?;
    if ranks == 0 {
        return invalid!("a collective needs at least one rank");
    }
    if elem_bytes == 0 {
        return invalid!("elem_bytes must be positive");
    }
    for k in opts.keys() {
        if !KNOWN_OPTIONS.contains(&k.as_str()) {
            return invalid!("unknown option '{k}' for collective algorithm '{algorithm}' (known: {})", KNOWN_OPTIONS.join(", "));
        }
    }
    let chunks = option_u64(opts, "chunks", 1)?;
    if chunks == 0 || chunks > 1 << 16 {
        return invalid!("option 'chunks' must be between 1 and 65536, got {chunks}");
    }
    if algorithm != "ring" && opts.contains_key("channels") {
        return invalid!("option 'channels' applies to algorithm 'ring' only, not '{algorithm}'");
    }
    let channels = option_u64(opts, "channels", channels::default_channels(cluster))?;
    if channels == 0 || channels > MAX_CHANNELS {
        return invalid!("option 'channels' must be between 1 and {MAX_CHANNELS}, got {channels}");
    }
    let gpus_per_server = match cluster {
        Some(c) => {
            c.validate()?;
            if c.num_gpus() != ranks {
                return invalid!("{ranks} ranks but cluster {} has {} GPUs ({} servers × {})", c.name, c.num_gpus(), c.servers, c.gpus_per_server);
            }
            c.gpus_per_server
        }
        None => ranks,
    };
    let elem = elem_bytes as u64;
    let collective = match kind {
        Kind::AllGather => Collective::AllGather { ranks, shard_bytes: bytes },
        Kind::ReduceScatter => Collective::ReduceScatter { ranks, shard_bytes: bytes, elem_bytes },
        Kind::AllReduce => Collective::AllReduce { ranks, bytes, elem_bytes },
    };
    if kind != Kind::AllGather && !bytes.is_multiple_of(elem) {
        return invalid!("{bytes} bytes is not a multiple of the element size {elem_bytes}");
    }
    if (ranks as u64).checked_mul(bytes).is_none_or(|t| t > u64::MAX / 4) {
        return invalid!("{ranks} ranks × {bytes} bytes overflows");
    }
    // Allgather moves bytes, not elements: any byte boundary is a valid split.
    let ctx = Ctx { ranks, gpus_per_server, chunks, elem: if kind == Kind::AllGather { 1 } else { elem } };
    let mut b = PlanBuilder::new(algorithm, collective, gpus_per_server);
    let rings = || channels::ring_orders(ranks, cluster, channels);
    match (algorithm, kind) {
        ("ring", Kind::AllGather) => ring::allgather(&ctx, &rings(), bytes, &mut b),
        ("ring", Kind::ReduceScatter) => ring::reduce_scatter(&ctx, &rings(), bytes, &mut b),
        ("ring", Kind::AllReduce) => ring::allreduce(&ctx, &rings(), bytes, &mut b),
        ("tree", Kind::AllGather) => tree::allgather(&ctx, bytes, &mut b),
        ("tree", Kind::ReduceScatter) => tree::reduce_scatter(&ctx, bytes, &mut b),
        ("tree", Kind::AllReduce) => tree::allreduce(&ctx, bytes, &mut b),
        _ => {
            let names: Vec<&str> = COLLECTIVE_ALGORITHMS.iter().map(|a| a.0).collect();
            return invalid!("unknown collective algorithm '{algorithm}' (known: {})", names.join(", "));
        }
    }
    b.set_meta("chunks", chunks);
    if algorithm == "ring" && channels > 1 {
        // (absent for one channel, so single-ring plans hash as before)
        b.set_meta("channels", channels);
    }
    b.set_input_hash(input_hash(kind, algorithm, ranks, bytes, elem_bytes, cluster, opts));
    Ok(b.finish())
}

fn input_hash(kind: Kind, algorithm: &str, ranks: u32, bytes: u64, elem_bytes: u32, cluster: Option<&Cluster>, opts: &Options) -> u64 {
    let mut h = crate::plan::hash::Fnv64::new();
    h.write(format!("{kind:?};{algorithm};{ranks};{bytes};{elem_bytes};").as_bytes());
    if let Some(c) = cluster {
        h.write(c.spec().as_bytes());
    }
    for (k, v) in opts {
        h.write(format!("{k}={v};").as_bytes());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn split_is_aligned_and_complete() {
        assert_eq!(split_aligned(10, 2, 3), vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(split_aligned(4, 4, 3), vec![(0, 4)]);
        assert!(split_aligned(0, 4, 3).is_empty());
        for (len, elem, parts) in [(1000u64, 4u64, 7u64), (12, 3, 12), (99, 1, 5)] {
            let p = split_aligned(len, elem, parts);
            assert_eq!(p.iter().map(|x| x.1).sum::<u64>(), len);
            assert!(p.iter().all(|x| x.0 % elem == 0 && x.1 % elem == 0 && x.1 > 0));
        }
    }
    #[test]
    fn rejects_bad_input() {
        let o = Options::new();
        assert!(plan("allgather", "ring", 0, 8, 1, None, &o).is_err());
        assert!(plan("allreduce", "ring", 4, 10, 4, None, &o).unwrap_err().to_string().contains("multiple"));
        assert!(plan("allgather", "bogus", 4, 8, 1, None, &o).unwrap_err().to_string().contains("unknown collective algorithm"));
        assert!(plan("alltoall", "ring", 4, 8, 1, None, &o).unwrap_err().to_string().contains("unknown collective"));
        let mut bad = Options::new();
        bad.insert("warp".into(), "1".into());
        assert!(plan("allgather", "ring", 4, 8, 1, None, &bad).unwrap_err().to_string().contains("unknown option"));
        let c = Cluster::parse("h100:2").unwrap();
        assert!(plan("allgather", "ring", 4, 8, 1, Some(&c), &o).unwrap_err().to_string().contains("16 GPUs"));
    }
}
