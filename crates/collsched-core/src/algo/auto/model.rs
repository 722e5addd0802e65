//! The closed-form model: each candidate's transfer time from the matrix's link loads
//! (`Loads`), and the size of the plan it would make (transfers, steps, messages, staged
//! bytes), which the backend's constants turn into host overhead. No plan is built.
//!
//! Transfer times follow the simulator's links: a NIC (or switch port, or mesh link)
//! that carries L bytes at bandwidth B needs alpha + L/B. Phased algorithms add the
//! phases their dependencies serialise (balancing and redistribution over scale-up,
//! FAST's rounds' alphas); how much of each phase shows is fitted against the simulator
//! (`tests/auto_diag.rs`: `phase_features`, `native_features`; least squares on the relative
//! error over seed 20260401, checked on seeds 7, 11 and 3), per candidate.
use super::backend::Backend;
use super::loads::Loads;
use crate::topology::{Cluster, ScaleUp};

/// The plan a candidate would make, in the units the backend charges for.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Shape {
    /// Transfers of the whole plan (planning cost); 0 for `native`.
    pub transfers: f64,
    pub steps: f64,
    /// Messages the busiest rank sends plus receives.
    pub messages: f64,
    /// Bytes the busiest rank gathers, scatters or copies locally.
    pub staged: f64,
}

/// Fitted weights of the phases of the balancing candidates, in the order (balancing,
/// redistribution, their excess on one mesh link, alpha_scaleup, alpha_scaleout), added to
/// the server line's time.
const BALANCED_DIRECT: [f64; 6] = [0.334, 0.438, 0.343, 0.075, 0.272, 0.543];
const SABRE_SKEWED: [f64; 6] = [0.832, 0.98, 0.409, 0.289, 0.387, 0.773];
/// FAST pipelines redistribution behind later rounds: (balancing, alpha_scaleup,
/// alpha_scaleout, rounds × alpha_scaleout).
const FAST: [f64; 4] = [0.346, -0.127, -0.255, 1.033];
/// FAST cuts stages to at most 1/8 of the busiest line (`fast::MIN_PIPELINE_STAGES`) and
/// no smaller than 4 × alpha_scaleout × NIC bandwidth per NIC (its default `min_stage_bytes`).
const FAST_PIPELINE: f64 = 8.0;
const FAST_MIN_STAGE_ALPHAS: f64 = 4.0;
/// Under the point-to-point rendezvous, what FAST's stage-by-stage coupling adds, as a share
/// of the server line's time: the simulator's FAST with `rendezvous=1` against `=0` on
/// mi300x:2–4 (105 matrices: uniform, Zipf, hot receivers, 1–256 MiB per GPU, seed 7) is
/// 4.3% slower in the median (10–90%: 1.5–7.1%); `docs/results/2026-11-28-auto-rendezvous.md`.
const FAST_RENDEZVOUS: f64 = 0.045;

struct Fabric {
    a_loc: f64,
    a_up: f64,
    a_out: f64,
    nic: f64,
    nics: f64,
    copy: f64,
    /// One scale-up link (a switch port, a mesh or ring link) and a GPU's whole scale-up bandwidth.
    link: f64,
    gpu_up: f64,
    /// Whether one pair's bytes use one dedicated link (mesh) rather than the GPU's port.
    per_pair: bool,
    /// The hardware model's start-up terms (`Cluster::hw`; 0 when neutral): per-stage
    /// synchronisation, per-peer cost (seconds), pipeline chunk per tier (bytes), and the
    /// incast rule (downlinks with more than `incast_flows` senders of at least
    /// `incast_min` bytes deliver `incast_goodput`).
    step: f64,
    peer: f64,
    chunk_out: f64,
    chunk_up: f64,
    incast_flows: u32,
    incast_goodput: f64,
    incast_min: f64,
    /// Point-to-point rendezvous (`HardwareTerms::rendezvous`): a step's receive is posted only
    /// once the receiver's previous step is done.
    rendezvous: bool,
    /// Every hardware term neutral (the fluid model): `hardware_s` is 0 without computing it.
    neutral: bool,
}

impl Fabric {
    fn new(c: &Cluster) -> Fabric {
        let (link, per_pair) = match c.scaleup {
            ScaleUp::Switch { port_bw } => (port_bw, false),
            ScaleUp::FullMesh { link_bw } | ScaleUp::HybridCubeMesh { link_bw } => (link_bw, true),
            // A ring spreads a GPU's bytes over both directions: its whole bandwidth.
            ScaleUp::Ring { .. } => (c.gpu_scaleup_bw(), false),
        };
        // Links at the rate the backend reaches (the simulator's hardware model; the peak
        // when the cluster's terms are neutral).
        let (hw, up) = (c.hw, c.hw.eff_scaleup());
        let eff = |peak: u64, e: f64| if e == 1.0 { peak as f64 } else { peak as f64 * e };
        Fabric {
            a_loc: c.alpha_local_ns as f64 * 1e-9,
            a_up: c.alpha_scaleup_ns as f64 * 1e-9,
            a_out: c.alpha_scaleout_ns as f64 * 1e-9,
            nic: eff(c.nic_bw, hw.eff_scaleout()),
            nics: c.nics_per_server as f64,
            copy: c.local_copy_bw as f64,
            link: eff(link, up),
            gpu_up: eff(c.gpu_scaleup_bw().max(1), up),
            per_pair,
            step: hw.step_ns as f64 * 1e-9,
            peer: hw.peer_ns as f64 * 1e-9,
            chunk_out: hw.chunk_scaleout_bytes as f64,
            chunk_up: hw.chunk_scaleup_bytes as f64,
            incast_flows: hw.incast_flows,
            incast_goodput: hw.incast_goodput(),
            incast_min: hw.incast_min_bytes as f64,
            rendezvous: hw.rendezvous,
            neutral: hw.is_neutral(),
        }
    }
}

fn most(v: &[u64]) -> u64 {
    v.iter().copied().max().unwrap_or(0)
}

/// alpha + bytes / bw, or 0 when nothing moves.
fn phase(alpha: f64, bytes: u64, bw: f64) -> f64 {
    if bytes == 0 {
        0.0
    } else {
        alpha + bytes as f64 / bw
    }
}

/// The NICs with `up` sent and `down` received per NIC.
fn nic_time(f: &Fabric, up: &[u64], down: &[u64]) -> f64 {
    let worst = up.iter().chain(down).copied().max().unwrap_or(0);
    phase(f.a_out, worst, f.nic)
}

/// How much of a NIC's request-then-reply chain shows beyond its direct load when each
/// pair's two directions move in turn (fitted against the simulator's pair-serialised
/// fanout, `tests/auto_diag.rs` `native_features`: the chain counts every reply as if it
/// waited for every request, but a pair's reply starts as soon as its own request is in).
const NATIVE_CHAIN: f64 = 0.25;

/// torch's all-to-all: fanout's NIC loads, but where a pair's two directions move one
/// after the other (Gloo, `half_duplex` = 1), a NIC also waits for its sends to higher
/// ranks before their replies arrive, and for the requests of lower ranks before it
/// replies: a chain of `first + second` bytes, of which `NATIVE_CHAIN` shows, and a
/// second alpha (the reply's own latency) wherever such a chain exists.
fn native_nic_time(f: &Fabric, l: &Loads, half_duplex: f64) -> f64 {
    let mut worst = 0.0f64;
    for k in 0..l.nic_up.len() {
        let direct = l.nic_up[k].max(l.nic_down[k]) as f64;
        let chain = ((l.up_first[k] + l.down_second[k]).max(l.down_first[k] + l.up_second[k])) as f64;
        let bytes = direct + half_duplex * NATIVE_CHAIN * (chain - direct).max(0.0);
        let alphas = if chain > direct { 1.0 + half_duplex } else { 1.0 };
        if bytes > 0.0 {
            worst = worst.max(alphas * f.a_out + bytes / f.nic);
        }
    }
    worst
}

/// Every block straight to its destination at once: scale-out on the NICs, scale-up on
/// the ports (or the pair's mesh link), self blocks on the copy engine.
fn direct(f: &Fabric, l: &Loads, half_duplex: f64) -> f64 {
    let out = if half_duplex > 0.0 { native_nic_time(f, l, half_duplex) } else { nic_time(f, &l.nic_up, &l.nic_down) };
    out.max(direct_inside(f, l, half_duplex))
}

/// `direct` without the NICs: the scale-up exchange and the self blocks.
fn direct_inside(f: &Fabric, l: &Loads, half_duplex: f64) -> f64 {
    let up = if f.per_pair {
        phase(f.a_up, l.su_block_max, f.link / (1.0 + half_duplex))
    } else {
        let worst = l.su_out.iter().zip(&l.su_in).map(|(&o, &i)| o.max(i) as f64 + half_duplex * o.min(i) as f64).fold(0.0, f64::max);
        if worst > 0.0 {
            f.a_up + worst / f.link
        } else {
            0.0
        }
    };
    up.max(phase(f.a_loc, most(&l.diag), f.copy))
}

/// FAST's scale-out rounds: the Birkhoff stages (about servers − 1 for a dense server
/// matrix) cut to pipeline pieces.
fn fast_rounds(f: &Fabric, l: &Loads) -> f64 {
    let line = l.server_line() as f64;
    (line / fast_stage_cap(f, line)).ceil() + l.servers.saturating_sub(2) as f64
}

/// FAST's largest pipeline stage of a server line of `line` bytes (bytes per server).
fn fast_stage_cap(f: &Fabric, line: f64) -> f64 {
    (line / FAST_PIPELINE).max(FAST_MIN_STAGE_ALPHAS * f.a_out * f.nic * f.nics).max(1.0)
}

/// Predicted transfer time (seconds) of `candidate` on the simulator's cluster model.
pub fn transfer_s(candidate: &str, l: &Loads, c: &Cluster, half_duplex: f64) -> f64 {
    Terms::new(l, c).transfer_s(candidate, l, half_duplex)
}

/// What several candidates share, computed once per matrix.
pub struct Terms {
    f: Fabric,
    line: u64,
    /// fanout's time (every block straight to its destination), and its part inside the servers.
    direct: f64,
    inside: f64,
    /// FAST's bound: the busiest server line over its NICs.
    srv: f64,
    /// Balancing and redistribution over a GPU's scale-up bandwidth.
    bal: f64,
    red: f64,
}

impl Terms {
    /// The phases the fitted weights multiply, by name (`tests/auto_diag.rs` dumps them):
    /// the server line's time, balancing and redistribution over a GPU's scale-up, the
    /// same on one mesh link beyond that (0 on a switch), the alphas, FAST's rounds × alpha.
    pub fn phases(&self, l: &Loads) -> Vec<(&'static str, f64)> {
        let f = &self.f;
        let (bal_mesh, red_mesh) = self.mesh_excess();
        vec![
            ("srv", self.srv),
            ("bal", self.bal),
            ("red", self.red),
            ("bal_mesh", bal_mesh),
            ("red_mesh", red_mesh),
            ("a_up", f.a_up),
            ("a_out", f.a_out),
            ("rounds_a_out", fast_rounds(f, l) * f.a_out),
            ("direct", self.direct),
            ("inside", self.inside),
            ("rail", nic_time(f, &l.rail_up, &l.nic_down)),
            ("gather", self.gather(l)),
        ]
    }

    /// Gathering each local index's bytes at the GPU of that index (hierarchical's first phase).
    fn gather(&self, l: &Loads) -> f64 {
        let f = &self.f;
        if f.per_pair {
            phase(f.a_up, l.gather_max, f.link)
        } else {
            phase(f.a_up, most(&l.gather_out).max(most(&l.gather_in)), f.link)
        }
    }

    /// sabre_light's scale-out: rail-aligned, but a proxy sends the blocks forwarded to it
    /// only once its forwarding messages are in (one batch per source, all nodes), so its
    /// NIC sends its GPUs' own group-direct bytes meanwhile and the forwarded ones after:
    /// per NIC max(direct, forwarding) + forwarded, and what it receives. No fitted weight
    /// (the forwarding's own alpha is the scale-up one).
    fn rail_after_forwarding(&self, l: &Loads) -> f64 {
        let f = &self.f;
        let mut worst = 0.0f64;
        for q in 0..l.rail_up.len() {
            let wait = if f.per_pair { phase(f.a_up, l.fwd_msg_max[q], f.link) } else { phase(f.a_up, l.fwd_in_max[q], f.link) };
            let forwarded = (l.rail_up[q] - l.group_direct[q]) as f64 / f.nic;
            worst = worst.max((l.group_direct[q] as f64 / f.nic).max(wait) + forwarded).max(l.nic_down[q] as f64 / f.nic);
        }
        if worst > 0.0 {
            worst + f.a_out
        } else {
            0.0
        }
    }

    /// sabre_light under the rendezvous: the forwarded bytes (its second step) into a GPU
    /// wait until that GPU's first step is done (its group-direct bytes and the forwarding
    /// into its proxies), and every server receives from every other: the second step starts
    /// after the slowest first step, then the largest forwarded load follows.
    fn rail_after_rendezvous(&self, l: &Loads) -> f64 {
        let f = &self.f;
        let (mut first, mut forwarded) = (0.0f64, 0.0f64);
        for q in 0..l.rail_up.len() {
            let wait = if f.per_pair { phase(f.a_up, l.fwd_msg_max[q], f.link) } else { phase(f.a_up, l.fwd_in_max[q], f.link) };
            first = first.max(l.group_direct[q] as f64 / f.nic).max(wait);
            forwarded = forwarded.max((l.rail_up[q] - l.group_direct[q]) as f64 / f.nic);
        }
        if first + forwarded > 0.0 {
            first + forwarded + f.a_out
        } else {
            0.0
        }
    }

    /// FAST with one other server: a GPU that balancing tops up has nothing else to send
    /// meanwhile, so it sends its own scale-out bytes while the balancing arrives and the
    /// balanced ones after (its NIC share each): per such GPU max(own, balancing in) +
    /// balanced, and the two alphas. With more servers other tiles' stages fill the wait.
    fn balanced_after_arrival(&self, l: &Loads) -> f64 {
        let f = &self.f;
        if l.servers != 2 {
            return 0.0;
        }
        let share = f.nic * f.nics / l.g as f64;
        let mut worst = 0.0f64;
        for (&own, &topped) in l.so_out.iter().zip(&l.bal_in).filter(|x| *x.1 > 0) {
            worst = worst.max((own as f64 / share).max(topped as f64 / f.gpu_up) + topped as f64 / share);
        }
        if worst > 0.0 {
            worst + f.a_up + f.a_out
        } else {
            0.0
        }
    }

    /// On a mesh a GPU's balancing and redistribution moves each ride one pair's link, not
    /// the GPU's whole scale-up bandwidth: the extra time if one link carried them.
    fn mesh_excess(&self) -> (f64, f64) {
        if !self.f.per_pair {
            return (0.0, 0.0);
        }
        let ratio = self.f.gpu_up / self.f.link - 1.0;
        (self.bal * ratio, self.red * ratio)
    }

    pub fn new(l: &Loads, c: &Cluster) -> Terms {
        let f = Fabric::new(c);
        let line = l.server_line();
        let g = l.g as f64;
        Terms {
            direct: direct(&f, l, 0.0),
            inside: direct_inside(&f, l, 0.0),
            srv: f.a_out + line as f64 / (f.nics * f.nic),
            bal: most(&l.bal_out).max(most(&l.bal_in)) as f64 / f.gpu_up,
            red: (most(&l.so_in) as f64).max(most(&l.server_in) as f64 / g) * (g - 1.0) / g / f.gpu_up,
            line,
            f,
        }
    }

    /// The hardware model's start-up terms along `candidate`'s critical path (the simulator's
    /// `startup_extra`, summed): every stage after the first pays the per-stage synchronisation,
    /// every new connection one pipeline-chunk fill of its typical message; the busiest rank's
    /// other peers in a step add the per-peer cost once. Plus fanout's incast (when a NIC
    /// downlink gathers more large senders than `incast_flows`, its bytes arrive at
    /// `incast_goodput`) and the rendezvous (`rendezvous_s`). 0 on a cluster with neutral terms.
    pub fn hardware_s(&self, candidate: &str, shape: &Shape, l: &Loads) -> f64 {
        let f = &self.f;
        if f.neutral {
            return 0.0;
        }
        let remote = l.servers > 1;
        let (chunk, rate) = if remote { (f.chunk_out, f.nic) } else { (f.chunk_up, f.link) };
        // The busiest rank's typical message: its bytes over its messages.
        let msgs = (shape.messages / 2.0).max(1.0);
        let block = l.rank_bytes_max as f64 / 2.0 / msgs;
        let peers = match candidate {
            "native" | "fanout" => msgs,
            _ => (msgs / shape.steps.max(1.0)).max(1.0),
        };
        let stages = match candidate {
            "spreadout" => (l.n.saturating_sub(1)).max(1) as f64,
            "native" | "fanout" => 1.0,
            _ => shape.steps.max(1.0),
        };
        // The fill is paid once per connection: per round by spreadout (a new peer each
        // round); by FAST once per remote server, one after the other along a GPU's chain of
        // stages (each decomposition stage opens a connection to another server; its first
        // piece, a pipeline stage's share, pays the fill), once by the others (their later
        // pieces of a pair stream behind the first). The planners that aggregate by server
        // send one scale-out message per remote server and GPU (the balanced line's share, or
        // the rail's), all at once: one fill of that message, not of the matrix's block.
        let other_servers = l.servers.saturating_sub(1).max(1) as f64;
        let (fills, message) = match candidate {
            "spreadout" => (stages, block),
            "fast" if remote && self.line > 0 => (other_servers, fast_stage_cap(f, self.line as f64) / l.g as f64),
            "balanced_direct" | "sabre_skewed" if remote => (1.0, self.line as f64 / l.g as f64 / other_servers),
            "hierarchical" if remote => (1.0, most(&l.rail_up) as f64 / (l.g as f64 / f.nics).max(1.0) / other_servers),
            _ => (1.0, block),
        };
        let fill = if chunk > 0.0 && rate > 0.0 { message.min(chunk) / rate } else { 0.0 };
        let mut t = (stages - 1.0) * f.step + fills * fill + (peers - 1.0).max(0.0) * f.peer;
        if matches!(candidate, "native" | "fanout") && remote && f.incast_flows > 0 && block >= f.incast_min {
            // Remote senders into one NIC: its GPUs' remote peers (dense: every remote rank).
            let senders = (l.n - l.g) as f64 * (l.g as f64 / f.nics).max(1.0);
            if senders > f.incast_flows as f64 {
                t += most(&l.nic_down) as f64 / f.nic * (1.0 / f.incast_goodput - 1.0);
            }
        }
        t + self.rendezvous_s(candidate, l)
    }

    /// The point-to-point rendezvous (`HardwareTerms::rendezvous`) on the phased candidates:
    /// a step's receive is posted only when its receiver finished its previous step, so the
    /// phases that the fitted weights let overlap (fitted on the fluid model, where senders run
    /// ahead) no longer do. The scale-out into a GPU waits for that GPU's balancing (all of it
    /// shows, not the weight's share); balanced_direct's and sabre_skewed's redistribution out
    /// of a GPU's server waits for the scale-out of the GPU it delivers to (all of it shows).
    /// FAST's redistribution of a stage hides behind the next stage's scale-out on both ends,
    /// as without the rendezvous, but each pipeline stage now waits for its receiver's
    /// previous stage, whose start its own receiver delayed: a share of the line time
    /// (`FAST_RENDEZVOUS`, fitted). sabre_light's forwarded bytes wait for their receiver's
    /// first step (its group-direct bytes and its forwarding): `rail_after_rendezvous`.
    /// SpreadOut's rounds each wait for their largest block: in the g − 1 rounds where a GPU's
    /// own partner is in its server, other pairs of the round still cross the network, so
    /// those rounds cost a remote block each (the mean one: a lower estimate) beyond the NIC's
    /// own bytes. 0 without the rendezvous, never negative.
    fn rendezvous_s(&self, candidate: &str, l: &Loads) -> f64 {
        let f = &self.f;
        if !f.rendezvous || self.line == 0 {
            return 0.0;
        }
        let hidden = |w_bal: f64, w_red: f64| (1.0 - w_bal).max(0.0) * self.bal + (1.0 - w_red).max(0.0) * self.red;
        match candidate {
            "balanced_direct" => hidden(BALANCED_DIRECT[0], BALANCED_DIRECT[1]),
            "sabre_skewed" => hidden(SABRE_SKEWED[0], SABRE_SKEWED[1]),
            "fast" => hidden(FAST[0], 1.0) + FAST_RENDEZVOUS * self.srv,
            "sabre_light" => (self.rail_after_rendezvous(l).max(self.inside) - self.rail_after_forwarding(l).max(self.inside)).max(0.0),
            "spreadout" => {
                let remote_pairs = (l.n * (l.n - l.g)) as f64;
                let block = l.so_out.iter().map(|&b| b as f64).sum::<f64>() / remote_pairs;
                let gpu_rate = f.nic * (f.nics / l.g as f64).min(1.0);
                (l.g - 1) as f64 * block / gpu_rate
            }
            _ => 0.0,
        }
    }

    pub fn transfer_s(&self, candidate: &str, l: &Loads, half_duplex: f64) -> f64 {
        let (f, line) = (&self.f, self.line);
        // Without scale-out traffic every planner makes fanout's direct exchange.
        if line == 0 && !matches!(candidate, "native" | "spreadout" | "hierarchical") {
            return self.direct;
        }
        let (bal_mesh, red_mesh) = self.mesh_excess();
        let balanced = |w: &[f64; 6]| self.srv + w[0] * self.bal + w[1] * self.red + w[2] * bal_mesh + w[3] * red_mesh + w[4] * f.a_up + w[5] * f.a_out;
        match candidate {
            "fanout" => self.direct,
            "native" if half_duplex == 0.0 => self.direct,
            "native" => direct(f, l, half_duplex),
            "spreadout" => {
                // Its rounds run one after the other: fanout's bytes on the same links, plus an
                // alpha per round (a lower estimate: a round also waits for its largest block,
                // which the per-step overhead of its P steps outweighs on every backend).
                let rounds = l.n.saturating_sub(1) as f64;
                let alpha = if l.servers > 1 { f.a_out } else { f.a_up };
                if self.direct == 0.0 { 0.0 } else { self.direct + rounds * alpha }
            }
            "hierarchical" => self.gather(l) + nic_time(f, &l.rail_up, &l.nic_down),
            "balanced_direct" => balanced(&BALANCED_DIRECT).max(self.balanced_after_arrival(l)),
            "sabre_skewed" => balanced(&SABRE_SKEWED),
            "fast" => {
                let w = FAST;
                let fitted = self.srv.max(self.srv + w[0] * self.bal + w[1] * f.a_up + w[2] * f.a_out + w[3] * fast_rounds(f, l) * f.a_out);
                fitted.max(self.balanced_after_arrival(l))
            }
            // Its scale-up exchange is fanout's; its scale-out is rail-aligned only.
            "sabre_light" => self.rail_after_forwarding(l).max(self.inside),
            _ => f64::NAN,
        }
    }
}

/// The size of the plan `candidate` would make (fitted ratios where it depends on the
/// producer's choices; exact for fanout, spreadout and native).
pub fn shape(candidate: &str, l: &Loads, c: &Cluster) -> Shape {
    let f = Fabric::new(c);
    let (n, g, s) = (l.n as f64, l.g as f64, l.servers as f64);
    let (nz, deg, diag) = (l.nonzero as f64, l.degree as f64, most(&l.diag) as f64);
    // Staged bytes: the self block plus shares of a carrier's scale-out bytes (the server
    // line over its GPUs), the busiest rank's remote and same-server bytes, fitted to each
    // producer's multi-segment messages over the seeded cases (least mean |log| error).
    let carrier = 2.0 * l.server_line() as f64 / g;
    let staged = |w: [f64; 3]| diag + w[0] * carrier + w[1] * l.so_max as f64 + w[2] * l.su_max as f64;
    // Hierarchical's messages when dense: gathers inside the server, rail messages per server pair.
    let hier = n * (g - 1.0) + s * (s - 1.0) * g + n;
    match candidate {
        "native" => Shape { transfers: 0.0, steps: 1.0, messages: 2.0 * (n - 1.0), staged: diag },
        "fanout" => Shape { transfers: nz, steps: 1.0, messages: deg, staged: diag },
        "spreadout" => Shape { transfers: nz, steps: n, messages: deg, staged: diag },
        "hierarchical" => Shape { transfers: 0.93 * hier, steps: 2.0, messages: 2.0 * (g - 1.0) + 2.0 * (s - 1.0), staged: staged([0.30, 1.05, 1.0]) },
        "balanced_direct" => Shape { transfers: 1.4 * nz, steps: 3.0, messages: 1.5 * deg, staged: staged([0.80, 0.05, 0.1]) },
        "fast" => {
            let rounds = fast_rounds(&f, l);
            Shape { transfers: 1.16 * (nz + rounds * n), steps: rounds + 2.0, messages: 1.2 * deg + 2.0 * rounds, staged: staged([0.40, 0.05, 0.2]) }
        }
        "sabre_skewed" => Shape { transfers: nz, steps: 3.0, messages: deg, staged: staged([0.55, 0.80, 0.0]) },
        // Its messages batch blocks only for several remote servers (a forward to a proxy)
        // or several local sources (a proxy's batch): otherwise nothing is staged.
        "sabre_light" => {
            let batches = l.servers > 2 || l.g > 2;
            Shape { transfers: nz, steps: 2.0, messages: deg, staged: if batches { staged([0.0, 0.90, 0.0]) } else { diag } }
        }
        _ => Shape::default(),
    }
}

/// Host overhead (seconds) of running `candidate` with plan `shape` on `backend`
/// (`planning_ns`: its planning cost per transfer; unused for native).
pub fn overhead_s(candidate: &str, shape: &Shape, backend: &Backend, planning_ns: f64) -> f64 {
    let us = 1e-6;
    let per_message = shape.messages * backend.message_us * us;
    let copies = shape.staged / (1u64 << 20) as f64 * backend.copy_us_per_mib * us;
    if candidate == "native" {
        return backend.native_call_us * us + per_message + copies;
    }
    backend.call_us * us + shape.transfers * planning_ns * 1e-9 + shape.steps * backend.step_us * us + per_message + copies
}
