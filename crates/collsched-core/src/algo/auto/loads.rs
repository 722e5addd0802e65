//! One pass over the traffic matrix: the per-link loads the closed-form model reads
//! (the lower bound's terms per NIC, GPU and server, plus what each candidate's routing
//! puts on the links), with no plan built. O(P²) with a few additions per entry.
use crate::error::Result;
use crate::plan::Plan;
use crate::topology::{Cluster, Tier};

/// Loads of the matrix on the cluster's links (bytes), by who carries them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loads {
    pub n: usize,
    pub g: usize,
    pub servers: usize,
    /// Per rank: bytes to and from other servers, within the server (self excluded), to itself.
    pub so_out: Vec<u64>,
    pub so_in: Vec<u64>,
    pub su_out: Vec<u64>,
    pub su_in: Vec<u64>,
    pub diag: Vec<u64>,
    /// Largest same-server block (one scale-up link of a mesh carries it).
    pub su_block_max: u64,
    /// Per global NIC: scale-out bytes sent and received with direct routes (fanout).
    pub nic_up: Vec<u64>,
    pub nic_down: Vec<u64>,
    /// Per global NIC: bytes sent with rail-aligned routes (through the local GPU with the
    /// destination's local index: hierarchical, sabre_light); received as `nic_down`.
    pub rail_up: Vec<u64>,
    /// Per global NIC, for sabre_light's rail routes: the part of `rail_up` its GPUs send
    /// straight to remote GPUs of their own NIC group (the rest waits at a local proxy for
    /// its forwarding over scale-up), the largest forwarded message into one of its proxies
    /// (one mesh link carries it) and the most bytes forwarded into one of its proxies (its
    /// scale-up port receives them).
    pub group_direct: Vec<u64>,
    pub fwd_msg_max: Vec<u64>,
    pub fwd_in_max: Vec<u64>,
    /// Per global NIC, for torch's Gloo all-to-all (a pair's lower rank sends first, the
    /// higher rank's reply waits for it): bytes sent to higher / lower ranks, and received
    /// from lower / higher ranks (remote only).
    pub up_first: Vec<u64>,
    pub up_second: Vec<u64>,
    pub down_first: Vec<u64>,
    pub down_second: Vec<u64>,
    /// The most remote (same-server) bytes one rank sends plus receives.
    pub so_max: u64,
    pub su_max: u64,
    /// Per server: scale-out bytes sent and received (FAST's line sums).
    pub server_out: Vec<u64>,
    pub server_in: Vec<u64>,
    /// Per rank: bytes FAST's balancing moves off / onto it (per (server, destination server)
    /// tile, what it carries above / below the tile's mean over the server's GPUs).
    pub bal_out: Vec<u64>,
    pub bal_in: Vec<u64>,
    /// Per rank: bytes hierarchical's gather sends / receives over scale-up, and the largest
    /// gather message (one mesh link).
    pub gather_out: Vec<u64>,
    pub gather_in: Vec<u64>,
    pub gather_max: u64,
    /// Non-zero blocks (self blocks included), and twice the most non-zero off-diagonal
    /// blocks one rank sends (its messages, sent and received, when columns look like rows).
    pub nonzero: u64,
    pub degree: u64,
    /// The most bytes one rank sends plus receives (self block included once).
    pub rank_bytes_max: u64,
}

impl Loads {
    /// Loads of the row-major `n × n` matrix `data` on `cluster` (caller checks the sizes).
    /// Errors if a row, column or the total sums past 2^64 bytes.
    pub fn new(data: &[u64], n: usize, cluster: &Cluster) -> Result<Loads> {
        let g = cluster.gpus_per_server as usize;
        let servers = cluster.servers as usize;
        let nics = servers * cluster.nics_per_server as usize;
        let mut l = Loads {
            n,
            g,
            servers,
            so_out: vec![0; n],
            so_in: vec![0; n],
            su_out: vec![0; n],
            su_in: vec![0; n],
            diag: vec![0; n],
            nic_up: vec![0; nics],
            nic_down: vec![0; nics],
            rail_up: vec![0; nics],
            group_direct: vec![0; nics],
            fwd_msg_max: vec![0; nics],
            fwd_in_max: vec![0; nics],
            up_first: vec![0; nics],
            up_second: vec![0; nics],
            down_first: vec![0; nics],
            down_second: vec![0; nics],
            server_out: vec![0; servers],
            server_in: vec![0; servers],
            bal_out: vec![0; n],
            bal_in: vec![0; n],
            gather_out: vec![0; n],
            gather_in: vec![0; n],
            ..Loads::default()
        };
        // Global NIC per rank, once (the cluster's lookup divides three times per call).
        let nic_table: Vec<usize> = (0..n as u32).map(|r| cluster.global_nic_of(r) as usize).collect();
        let nic = |r: usize| nic_table[r];
        let mut col = vec![0u64; n];
        // Column sums over the rows of earlier servers (the remote senders below each column),
        // and over the rows of the column's own server.
        let mut col_lower = vec![0u64; n];
        let mut col_own = vec![0u64; n];
        // Per row of the current server: bytes to each server (the tiles balancing evens
        // out), to each local index, and its non-zero blocks.
        let mut tiles = vec![0u64; g * servers];
        let mut fold = vec![0u64; g * g];
        let mut nz = vec![0u64; g];
        let mut fwd_in = vec![0u64; g];
        let mut server_means = vec![0u64; servers];
        let mut row_nz_max = 0u64;
        // Sums wrap until the entries show they cannot have (checked after the rows): `largest`
        // is the OR of all entries, at least the largest and less than twice it.
        let mut largest = 0u64;
        for (s, rows) in data.chunks_exact(g * n).enumerate() {
            let block = s * g..(s + 1) * g;
            col_lower[block.clone()].copy_from_slice(&col[block.clone()]);
            largest |= server_pass(g, rows, &mut col, &mut tiles, &mut fold, &mut nz);
            for j in block {
                col_own[j] = col[j].wrapping_sub(col_lower[j]);
            }
            // Per row, O(g + servers): what the pass's partial sums give.
            for (a, row) in rows.chunks_exact(n).enumerate() {
                let i = s * g + a;
                let tile = &tiles[a * servers..(a + 1) * servers];
                let own = &row[s * g..(s + 1) * g];
                for (k, &b) in own.iter().enumerate() {
                    if k != a {
                        l.su_block_max = l.su_block_max.max(b);
                    }
                }
                let d = row[i];
                l.nonzero += nz[a];
                row_nz_max = row_nz_max.max(nz[a] - u64::from(d != 0));
                l.diag[i] = d;
                let own_sum = tile[s];
                let total = tile.iter().fold(0u64, |x, &y| x.wrapping_add(y));
                l.so_out[i] = total.wrapping_sub(own_sum);
                let lower = tile[..s].iter().fold(0u64, |x, &y| x.wrapping_add(y));
                l.up_second[nic(i)] = l.up_second[nic(i)].wrapping_add(lower);
                l.up_first[nic(i)] = l.up_first[nic(i)].wrapping_add(l.so_out[i].wrapping_sub(lower));
                l.su_out[i] = own_sum.wrapping_sub(d);
                // Hierarchical's gather: to local GPU k, everything for local index k (k ≠ a).
                for (k, &b) in fold[a * g..(a + 1) * g].iter().enumerate() {
                    if k != a {
                        l.gather_out[i] = l.gather_out[i].wrapping_add(b);
                        l.gather_in[s * g + k] = l.gather_in[s * g + k].wrapping_add(b);
                        l.gather_max = l.gather_max.max(b);
                    }
                    // Rail: the remote part of it leaves through the NIC of local GPU k.
                    let at = nic(s * g + k);
                    let remote = b.wrapping_sub(own[k]);
                    l.rail_up[at] = l.rail_up[at].wrapping_add(remote);
                    // sabre_light: within the NIC group straight, else via the proxy with index k.
                    if at == nic(i) {
                        l.group_direct[at] = l.group_direct[at].wrapping_add(remote);
                    } else {
                        fwd_in[k] = fwd_in[k].wrapping_add(remote);
                        l.fwd_msg_max[at] = l.fwd_msg_max[at].max(remote);
                    }
                }
            }
            for (k, x) in fwd_in.iter_mut().enumerate() {
                let at = nic(s * g + k);
                l.fwd_in_max[at] = l.fwd_in_max[at].max(std::mem::take(x));
            }
            l.finish_server(s, &tiles, &mut server_means);
        }
        if 2 * largest as u128 * (n * n) as u128 > u64::MAX as u128 {
            crate::traffic::check_sums(n, data)?;
        }
        for j in 0..n {
            let s = j / g;
            let own = col_own[j];
            l.so_in[j] = col[j] - own;
            l.su_in[j] = own - l.diag[j];
            l.nic_down[nic(j)] += l.so_in[j];
            l.server_in[s] += l.so_in[j];
            l.nic_up[nic(j)] += l.so_out[j];
            l.server_out[s] += l.so_out[j];
            l.rank_bytes_max = l.rank_bytes_max.max(l.so_out[j] + l.su_out[j] + col[j]);
            l.so_max = l.so_max.max(l.so_out[j] + l.so_in[j]);
            l.su_max = l.su_max.max(l.su_out[j] + l.su_in[j]);
            l.down_first[nic(j)] += col_lower[j];
            l.down_second[nic(j)] += l.so_in[j] - col_lower[j];
        }
        // Messages: a rank receives from about as many peers as it sends to.
        l.degree = 2 * row_nz_max;
        Ok(l)
    }

    /// The same from little-endian bytes (8 per entry).
    pub fn from_le_bytes(bytes: &[u8], n: usize, cluster: &Cluster) -> Result<Loads> {
        let data: Vec<u64> = bytes.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
        Loads::new(&data, n, cluster)
    }

    /// Balancing of server `s` once all its rows are in `tiles` (g rows × servers): per
    /// destination server, each GPU's bytes above / below the mean over the server's GPUs.
    /// Row-wise over contiguous tiles; the mean by a shift when g is a power of two.
    fn finish_server(&mut self, s: usize, tiles: &[u64], mean: &mut [u64]) {
        let (g, servers) = (self.g, self.servers);
        mean.iter_mut().for_each(|m| *m = 0);
        for a in 0..g {
            for (m, &t) in mean.iter_mut().zip(&tiles[a * servers..(a + 1) * servers]) {
                *m = m.wrapping_add(t);
            }
        }
        if g.is_power_of_two() {
            let shift = g.trailing_zeros();
            mean.iter_mut().for_each(|m| *m >>= shift);
        } else {
            mean.iter_mut().for_each(|m| *m /= g as u64);
        }
        mean[s] = 0; // the server's own tile is not balanced
        for a in 0..g {
            let row = &tiles[a * servers..(a + 1) * servers];
            let (mut above, mut below) = (0u64, 0u64);
            for (d, (&t, &m)) in row.iter().zip(mean.iter()).enumerate() {
                if d != s {
                    above = above.wrapping_add(t.saturating_sub(m));
                    below = below.wrapping_add(m.saturating_sub(t));
                }
            }
            self.bal_out[s * g + a] = above;
            self.bal_in[s * g + a] = below;
        }
    }

    /// The busiest server line (scale-out bytes one server sends or receives).
    pub fn server_line(&self) -> u64 {
        self.server_out.iter().chain(&self.server_in).copied().max().unwrap_or(0)
    }
}

/// One pass over one server's `g` rows (`rows`, g × n, row-major), a g × g tile at a time:
/// the tile's column sums added into `col`, each row's tile sum into `tiles` (g × servers),
/// each row's blocks added up element-wise into `fold` (g × g: what it sends to each local
/// index) and its non-zero entries into `nz` (g); returns the OR of all entries.
///
/// Why this shape: with a compile-time `G` the tile's column sums stay in registers (the
/// column vector is read and written once per server, not once per row) and every sum is
/// over contiguous u64 that the compiler vectorises. A non-zero count `b != 0` on u64
/// needs five SSE2 operations per two entries; `(b + 2^32 − 1) >> 32` is the same for
/// entries below 2^32 in two, and the rare server block with a larger entry is recounted.
fn server_pass(g: usize, rows: &[u64], col: &mut [u64], tiles: &mut [u64], fold: &mut [u64], nz: &mut [u64]) -> u64 {
    let any = match g {
        8 => tiles_fixed::<8>(rows, col, tiles, fold, nz),
        4 => tiles_fixed::<4>(rows, col, tiles, fold, nz),
        2 => tiles_fixed::<2>(rows, col, tiles, fold, nz),
        1 => tiles_fixed::<1>(rows, col, tiles, fold, nz),
        _ => tiles_any(g, rows, col, tiles, fold, nz),
    };
    if any >> 32 != 0 {
        for (c, row) in nz.iter_mut().zip(rows.chunks_exact(col.len())) {
            *c = row.iter().map(|&b| u64::from(b != 0)).sum();
        }
    }
    any
}

/// `server_pass` for `G` GPUs per server (the non-zero count valid where all entries < 2^32).
fn tiles_fixed<const G: usize>(rows: &[u64], col: &mut [u64], tiles: &mut [u64], fold: &mut [u64], nz: &mut [u64]) -> u64 {
    const LOW: u64 = (1 << 32) - 1;
    let n = col.len();
    let servers = n / G;
    let (mut acc, mut cnt, mut any) = ([[0u64; G]; G], [[0u64; 2]; G], [0u64; G]);
    for (d, cols) in col.chunks_exact_mut(G).enumerate() {
        let mut blk = [0u64; G];
        for a in 0..G {
            let chunk: &[u64; G] = rows[a * n + d * G..][..G].try_into().expect("G entries");
            let mut sum = 0u64;
            for k in 0..G {
                let b = chunk[k];
                blk[k] = blk[k].wrapping_add(b);
                acc[a][k] = acc[a][k].wrapping_add(b);
                cnt[a][k % 2] += b.wrapping_add(LOW) >> 32;
                any[k] |= b;
                sum = sum.wrapping_add(b);
            }
            tiles[a * servers + d] = sum;
        }
        for (c, b) in cols.iter_mut().zip(blk) {
            *c = c.wrapping_add(b);
        }
    }
    for a in 0..G {
        fold[a * G..(a + 1) * G].copy_from_slice(&acc[a]);
        nz[a] = cnt[a][0] + cnt[a][1];
    }
    any.iter().fold(0, |x, &y| x | y)
}

/// `server_pass` for any other server size, row by row (not vectorised; exact non-zero count).
fn tiles_any(g: usize, rows: &[u64], col: &mut [u64], tiles: &mut [u64], fold: &mut [u64], nz: &mut [u64]) -> u64 {
    let servers = col.len() / g;
    let mut any = 0u64;
    fold.fill(0);
    for (a, row) in rows.chunks_exact(col.len()).enumerate() {
        for (d, (chunk, cols)) in row.chunks_exact(g).zip(col.chunks_exact_mut(g)).enumerate() {
            let mut sum = 0u64;
            for ((&b, c), f) in chunk.iter().zip(cols).zip(&mut fold[a * g..(a + 1) * g]) {
                *c = c.wrapping_add(b);
                *f = f.wrapping_add(b);
                any |= b;
                sum = sum.wrapping_add(b);
            }
            tiles[a * servers + d] = sum;
        }
        nz[a] = row.iter().map(|&b| u64::from(b != 0)).sum();
    }
    any
}

/// Scale-out bytes a plan sends and receives per global NIC: (up, down). Tests compare
/// `Loads` with the plans of the algorithms whose routes it models.
pub fn plan_nic_loads(plan: &Plan, cluster: &Cluster) -> (Vec<u64>, Vec<u64>) {
    let nics = (cluster.servers * cluster.nics_per_server) as usize;
    let (mut up, mut down) = (vec![0u64; nics], vec![0u64; nics]);
    for t in plan.transfers.iter().filter(|t| t.tier == Tier::ScaleOut) {
        let b = plan.transfer_bytes(t);
        up[cluster.global_nic_of(t.src) as usize] += b;
        down[cluster.global_nic_of(t.dst) as usize] += b;
    }
    (up, down)
}
