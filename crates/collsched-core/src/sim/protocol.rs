//! The protocol each transfer of a collective-kernel plan uses (docs/simulator.md, "Hardware
//! model"). NCCL and RCCL move a collective's pieces either with their default protocol
//! (Simple: bulk stores into the peer's staging buffer, then a flag; the hardware model's
//! alpha, chunk fill and per-step synchronisation) or with a low-latency one (LL: every
//! 8-byte store carries 4 bytes of data and a flag the receiver polls, so there is no
//! separate synchronisation, but twice the bytes cross the wire). A transfer uses the
//! low-latency protocol when its unloaded cost is the lower of the two.
//!
//! The choice is made from fixed inputs only (the transfer's bytes, tier and whether it waits
//! on an earlier step, the cluster's integer constants) in integer nanoseconds, so it is the
//! same on every rank and every run; ties keep the default protocol.
use super::engine::{first_on_connection, is_staged};
use crate::plan::Plan;
use crate::topology::hardware::PPM;
use crate::topology::{Cluster, Tier};

/// Nanoseconds `bytes` take at `eff_ppm` of `peak` bytes/s when only `payload_ppm` of the
/// wire bytes carry data (rounded up; integer, so every rank computes the same value).
pub fn wire_ns(bytes: u64, peak: u64, eff_ppm: u32, payload_ppm: u32) -> u128 {
    let num = bytes as u128 * 1_000_000_000 * PPM as u128 * PPM as u128;
    let den = (peak as u128 * eff_ppm as u128 * payload_ppm as u128).max(1);
    num.div_ceil(den)
}

/// Per transfer of `plan` on `cluster` (whose terms are already the collective kernels',
/// `HardwareTerms::for_collective_kernels`): whether it uses the low-latency protocol.
/// Empty when none does: a point-to-point plan, or no tier with `ll_alpha_*`.
pub fn low_latency(plan: &Plan, cluster: &Cluster, barrier_steps: bool) -> Vec<bool> {
    let hw = cluster.hw;
    if !plan.is_collective_kernel() || !hw.has_low_latency_protocol() {
        return Vec::new();
    }
    let first = first_on_connection(plan);
    let choice: Vec<bool> = plan
        .transfers
        .iter()
        .enumerate()
        .map(|(id, t)| {
            let (ll_alpha, peak, eff, chunk) = match t.tier {
                Tier::ScaleOut => (hw.ll_alpha_scaleout_ns, cluster.nic_bw, hw.eff_scaleout_ppm, hw.chunk_scaleout_bytes),
                Tier::ScaleUp => (hw.ll_alpha_scaleup_ns, cluster.scaleup_bw(), hw.eff_scaleup_ppm, hw.chunk_scaleup_bytes),
                Tier::Local => return false,
            };
            if ll_alpha == 0 {
                return false;
            }
            let bytes = plan.transfer_bytes(t);
            let fill = if first[id] { wire_ns(bytes.min(chunk), peak, eff, PPM) } else { 0 };
            let sync = if is_staged(plan, t, barrier_steps) { hw.step_ns as u128 } else { 0 };
            let simple = cluster.alpha_ns(t.tier) as u128 + sync + fill + wire_ns(bytes, peak, eff, PPM);
            let mut wire = wire_ns(bytes, peak, eff, hw.ll_payload_ppm);
            if hw.ll_bw > 0 {
                wire = wire.max(wire_ns(bytes, hw.ll_bw, PPM, PPM));
            }
            let low = ll_alpha as u128 + wire;
            low < simple
        })
        .collect();
    if choice.iter().any(|&x| x) {
        choice
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_time_is_exact_and_rounds_up() {
        // 1 MB at 100 GB/s: 10 us; at half payload: 20 us; at 0.8 efficiency: 12.5 us.
        assert_eq!(wire_ns(1_000_000, 100_000_000_000, PPM, PPM), 10_000);
        assert_eq!(wire_ns(1_000_000, 100_000_000_000, PPM, PPM / 2), 20_000);
        assert_eq!(wire_ns(1_000_000, 100_000_000_000, 800_000, PPM), 12_500);
        assert_eq!(wire_ns(1, 3, PPM, PPM), 333_333_334);
        assert_eq!(wire_ns(0, 3, PPM, PPM), 0);
    }
}
