//! Lower bound on the completion time of an all-to-all(v), valid for ANY plan
//! simulated on the cluster model (FAST Theorem 1, appendix A, generalised).
//!
//! FAST's bound lets intra-server traffic move for free and divides each
//! server's cross-server bytes by its NIC capacity. We keep that term and add
//! terms for the scale-up fabric and for a GPU's own ports. Every term assumes
//! nothing about routing: bytes may be relayed through any GPU, and
//! intra-server bytes may even detour through another server, which is why the
//! scale-up terms take the smaller of "no detour" and "best possible detour".
//! Each non-empty term adds its tier's alpha: in the model no byte of a tier
//! moves before one alpha of that tier has passed.
use crate::error::Result;
use crate::invalid;
use crate::topology::{Cluster, ScaleUp};
use crate::traffic::Traffic;

/// The bound and the terms it is the maximum of.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// Seconds: no plan completes faster.
    pub seconds: f64,
    /// Name of the binding term, e.g. "scale-out send of server 3".
    pub term: String,
    /// Every non-zero term, in a fixed order (servers, then GPUs).
    pub terms: Vec<(String, f64)>,
}

/// Minimum number of scale-up hops between local GPUs `a != b`.
pub fn scaleup_hops(cluster: &Cluster, a: u32, b: u32) -> u32 {
    let g = cluster.gpus_per_server;
    match cluster.scaleup {
        ScaleUp::Switch { .. } | ScaleUp::FullMesh { .. } => 1,
        ScaleUp::Ring { .. } => {
            let d = (b + g - a) % g;
            d.min(g - d)
        }
        ScaleUp::HybridCubeMesh { .. } => {
            if cluster.scaleup_adjacent(a, b) {
                1
            } else {
                2
            }
        }
    }
}

/// Total capacity of the directed scale-up links of one server (bytes/s), for
/// the byte-hop term of non-switch fabrics.
fn fabric_capacity(cluster: &Cluster) -> f64 {
    let g = cluster.gpus_per_server as f64;
    // gpu_scaleup_bw is the sum of a GPU's outgoing links, so the fabric holds g of them.
    g * cluster.gpu_scaleup_bw() as f64
}

fn diameter(cluster: &Cluster) -> u32 {
    let g = cluster.gpus_per_server;
    (0..g).flat_map(|a| (0..g).filter(move |&b| b != a).map(move |b| (a, b))).map(|(a, b)| scaleup_hops(cluster, a, b)).max().unwrap_or(0)
}

pub fn lower_bound(traffic: &Traffic, cluster: &Cluster) -> Result<Bound> {
    cluster.validate()?;
    let p = cluster.num_gpus() as usize;
    if traffic.n() != p {
        return invalid!("traffic matrix is {0}×{0} but cluster {1} has {p} GPUs", traffic.n(), cluster.name);
    }
    let g = cluster.gpus_per_server as usize;
    let servers = cluster.servers;
    let a_up = cluster.alpha_scaleup_ns as f64 * 1e-9;
    let a_out = cluster.alpha_scaleout_ns as f64 * 1e-9;
    let server_nic = cluster.server_nic_bw() as f64;
    let nic = cluster.nic_bw as f64;
    // One GPU per server has no scale-up fabric at all.
    let up = if g > 1 { cluster.gpu_scaleup_bw() as f64 } else { 0.0 };

    // Per-GPU sums: scale-up out/in and scale-out out/in.
    let mut su_out = vec![0f64; p];
    let mut su_in = vec![0f64; p];
    let mut so_out = vec![0f64; p];
    let mut so_in = vec![0f64; p];
    let mut hop_bytes = vec![0f64; servers as usize];
    // Hybrid cube-mesh: bytes crossing between the two quads, per server and direction.
    let mut cross_quads = vec![[0f64; 2]; servers as usize];
    for i in 0..p {
        for j in 0..p {
            let b = traffic.get(i, j);
            if b == 0 || i == j {
                continue;
            }
            let b = b as f64;
            if i / g == j / g {
                su_out[i] += b;
                su_in[j] += b;
                hop_bytes[i / g] += b * scaleup_hops(cluster, (i % g) as u32, (j % g) as u32) as f64;
                let (qa, qb) = ((i % g) / 4, (j % g) / 4);
                if qa != qb {
                    cross_quads[i / g][qa.min(1)] += b;
                }
            } else {
                so_out[i] += b;
                so_in[j] += b;
            }
        }
    }
    let server_sum = |v: &[f64], s: usize| v[s * g..(s + 1) * g].iter().sum::<f64>();

    // `min over D of max((x + D)/n, (s - k·D)/u)`: the best a plan can do by
    // detouring D bytes of a scale-up load `s` (each detoured byte saving `k`
    // units of it) through the server's NICs (capacity n), which already carry `x`.
    // With one server there is nowhere to detour.
    let with_detour = |s: f64, u: f64, x: f64, k: f64| -> f64 {
        let direct = a_up + s / u;
        if servers <= 1 {
            return direct;
        }
        direct.min(a_up.min(a_out) + (s + k * x) / (u + k * server_nic))
    };
    let mut terms: Vec<(String, f64)> = Vec::new();
    let mut push = |name: String, v: f64| {
        if v > 0.0 {
            terms.push((name, v));
        }
    };
    let switch = matches!(cluster.scaleup, ScaleUp::Switch { .. });
    let (cap, diam) = (fabric_capacity(cluster), diameter(cluster) as f64);
    for (s, &hops) in hop_bytes.iter().enumerate() {
        let (xo, xi) = (server_sum(&so_out, s), server_sum(&so_in, s));
        if xo > 0.0 {
            push(format!("scale-out send of server {s}"), a_out + xo / server_nic);
        }
        if xi > 0.0 {
            push(format!("scale-out receive of server {s}"), a_out + xi / server_nic);
        }
        if !switch && hops > 0.0 {
            // Byte-hops: every intra-server byte crosses at least its minimum hop count;
            // a detour uses both the server's uplinks and downlinks.
            let t = with_detour(hops, cap, xo.max(xi), diam);
            push(format!("scale-up byte-hops of server {s}"), t);
        }
        if let ScaleUp::HybridCubeMesh { link_bw } = cluster.scaleup {
            // Cut between the quads {0..3} and {4..7}: only the four links i↔i^4 cross it.
            let cut = 4.0 * link_bw as f64;
            for (dir, &bytes) in cross_quads[s].iter().enumerate() {
                if bytes > 0.0 {
                    let t = with_detour(bytes, cut, if dir == 0 { xo } else { xi }.max(0.0), 1.0);
                    push(format!("scale-up quad cut of server {s} ({})", if dir == 0 { "0-3 → 4-7" } else { "4-7 → 0-3" }), t);
                }
            }
        }
    }
    for r in 0..p {
        let s = r / g;
        let (xo, xi) = (server_sum(&so_out, s), server_sum(&so_in, s));
        if su_out[r] > 0.0 {
            push(format!("scale-up send of GPU {r}"), with_detour(su_out[r], up, xo, 1.0));
        }
        if su_in[r] > 0.0 {
            push(format!("scale-up receive of GPU {r}"), with_detour(su_in[r], up, xi, 1.0));
        }
        if servers > 1 {
            // Everything a GPU sends leaves over its scale-up ports or its (possibly shared) NIC.
            let alpha = if su_out[r] > 0.0 || up > 0.0 { a_up.min(a_out) } else { a_out };
            let out = su_out[r] + so_out[r];
            if so_out[r] > 0.0 {
                push(format!("egress of GPU {r}"), alpha + out / (up + nic));
            }
            let inn = su_in[r] + so_in[r];
            if so_in[r] > 0.0 {
                push(format!("ingress of GPU {r}"), alpha + inn / (up + nic));
            }
        }
    }
    let (term, seconds) = terms
        .iter()
        .fold((String::from("none (no bytes cross any link)"), 0.0f64), |acc, (n, v)| if *v > acc.1 { (n.clone(), *v) } else { acc });
    Ok(Bound { seconds, term, terms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::generators;

    #[test]
    fn fast_theorem_one_on_switch_cluster() {
        // h200: 8 GPUs, 8 NICs × 50 GB/s. Balanced 1 MB per pair on 2 servers:
        // each server sends 8 × 8 × 1 MB = 64 MB across at 400 GB/s.
        let c = Cluster::parse("h200:2").unwrap();
        let t = generators::balanced(16, 1_000_000).unwrap();
        let b = lower_bound(&t, &c).unwrap();
        let expect = 6e-6 + 64e6 / 400e9;
        assert!((b.seconds - expect).abs() < 1e-12, "{b:?}");
        assert!(b.term.starts_with("scale-out"), "{}", b.term);
    }

    #[test]
    fn single_server_scaleup_bound_is_exact() {
        let c = Cluster::parse("h200:1").unwrap();
        let t = generators::balanced(8, 1_000_000).unwrap();
        let b = lower_bound(&t, &c).unwrap();
        assert!((b.seconds - (3e-6 + 7e6 / 450e9)).abs() < 1e-12, "{b:?}");
    }

    #[test]
    fn ring_byte_hops_bind() {
        let c = Cluster::parse("mi250:1").unwrap(); // ring of 8, 50 GB/s links
        let t = generators::balanced(8, 1_000_000).unwrap();
        let b = lower_bound(&t, &c).unwrap();
        // 8 GPUs × (1+1+2+2+3+3+4) hop-MB over 16 directed links of 50 GB/s.
        assert!((b.seconds - (3e-6 + 128e6 / 800e9)).abs() < 1e-12, "{b:?}");
        assert!(b.term.contains("byte-hops"));
    }

    #[test]
    fn rejects_wrong_size() {
        let c = Cluster::parse("h200:1").unwrap();
        assert!(lower_bound(&Traffic::zeros(4), &c).is_err());
        let z = lower_bound(&Traffic::zeros(8), &c).unwrap();
        assert_eq!(z.seconds, 0.0);
    }
}
