//! Plan producers. Each all-to-all algorithm is one module with
//! `pub fn plan(traffic, cluster, opts) -> Result<Plan>`; `plan_all_to_all` dispatches by name.
use crate::error::Result;
use crate::invalid;
use crate::plan::{Options, Plan};
use crate::topology::Cluster;
use crate::traffic::Traffic;

pub mod auto;
pub mod collective;
pub mod balanced_direct;
pub mod fanout;
pub mod fast;
pub mod hierarchical;
pub mod sabre;
pub mod spreadout;

/// Every all-to-all algorithm name `plan_all_to_all` accepts, with one line each.
pub const ALL_TO_ALL_ALGORITHMS: &[(&str, &str)] = &[
    ("fanout", "all pairs at once (NCCL/RCCL/torch all_to_all_single)"),
    ("spreadout", "P-1 shifted one-to-one rounds (MPI)"),
    ("hierarchical", "aggregate to the destination's local index, rail-aligned scale-out, local delivery (2DH/PXN)"),
    ("balanced_direct", "FAST's intra-server balancing, then all server pairs at once (FLASH-A)"),
    ("fast", "FAST: balancing, Birkhoff-von Neumann one-to-one scale-out stages, pipelined redistribution"),
    ("sabre_skewed", "SABRE three-phase greedy NIC balancing for heavy skew"),
    ("sabre_light", "SABRE two-phase pipelined 2D algorithm for light skew"),
    ("sabre", "SABRE's selector: MTM threshold between sabre_skewed and sabre_light"),
    ("auto", "collsched's selector: choose from the matrix (closed form, backend-aware; native = torch's own call), then plan the winner"),
];

/// Plan an all-to-all(v) of `traffic` on `cluster` with the named algorithm.
pub fn plan_all_to_all(traffic: &Traffic, cluster: &Cluster, algorithm: &str, opts: &Options) -> Result<Plan> {
    cluster.validate()?;
    if traffic.n() != cluster.num_gpus() as usize {
        return invalid!(
            "traffic matrix is {0}×{0} but cluster {1} has {2} GPUs ({3} servers × {4})",
            traffic.n(),
            cluster.name,
            cluster.num_gpus(),
            cluster.servers,
            cluster.gpus_per_server
        );
    }
    let mut plan = match algorithm {
        "fanout" => fanout::plan(traffic, cluster, opts),
        "spreadout" => spreadout::plan(traffic, cluster, opts),
        "hierarchical" => hierarchical::plan(traffic, cluster, opts),
        "balanced_direct" => balanced_direct::plan(traffic, cluster, opts),
        "fast" => fast::plan(traffic, cluster, opts),
        "sabre" => sabre::plan(traffic, cluster, opts),
        "sabre_skewed" => sabre::plan_skewed(traffic, cluster, opts),
        "sabre_light" => sabre::plan_light(traffic, cluster, opts),
        "auto" => auto::plan(traffic, cluster, opts),
        _ => {
            let names: Vec<&str> = ALL_TO_ALL_ALGORITHMS.iter().map(|a| a.0).collect();
            return invalid!("unknown all-to-all algorithm '{algorithm}' (known: {})", names.join(", "));
        }
    }?;
    plan.input_hash = input_hash(traffic, cluster, algorithm, opts);
    Ok(plan)
}

/// Hash of everything a plan is computed from; equal inputs give equal plans.
pub fn input_hash(traffic: &Traffic, cluster: &Cluster, algorithm: &str, opts: &Options) -> u64 {
    let mut h = crate::plan::hash::Fnv64::new();
    h.write_u64(traffic.hash());
    h.write(cluster.spec().as_bytes());
    h.write(algorithm.as_bytes());
    for (k, v) in opts {
        h.write(k.as_bytes());
        h.write(b"=");
        h.write(v.as_bytes());
        h.write(b";");
    }
    h.finish()
}
