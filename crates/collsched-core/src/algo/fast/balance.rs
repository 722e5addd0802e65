//! Intra-server balancing (FAST §4.1): for every tile (source server s,
//! destination server d ≠ s) equalise what each NIC of s (and each GPU on it)
//! carries to d, moving bytes over scale-up from heavy to light GPUs. After
//! balancing, carrier GPU (s,c) sends its share to its peer (d,c): the
//! "merged peer transfer", one-to-one at GPU and NIC level.
//!
//! Every carried piece is a contiguous part of one original block i→j, so it is
//! one Segment wherever it travels.
use crate::topology::Cluster;
use crate::traffic::Traffic;

/// A contiguous part of block (s,a)→(d,j), carried to server d by one carrier GPU of s.
/// 32 bytes (two per cache line): whether the carrier holds it in its Scratch is `a != carrier`.
/// Offsets are absolute (precomputed here, where the matrix is read in order, so the
/// assembler never touches the P×P offset tables at random).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Local index of the block's sender in server s.
    pub a: u32,
    /// Local index of the block's receiver in server d.
    pub j: u32,
    pub len: u64,
    /// Where the carrier holds it: its Input (when a == carrier) or its Scratch.
    pub src_off: u64,
    /// Offset in the Output of (d,j).
    pub out_off: u64,
}

/// One balancing move: a piece handed from GPU (s,a) to carrier (s,c) over scale-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub s: u32,
    pub a: u32,
    pub c: u32,
    pub d: u32,
    pub j: u32,
    /// Offset in the Input of (s,a).
    pub input_off: u64,
    pub len: u64,
    /// Destination offset in the carrier's Scratch.
    pub scratch_off: u64,
}

/// A same-server block (self copy or scale-up pair), with its torch offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntraBlock {
    pub i: u32,
    pub j: u32,
    pub input_off: u64,
    pub out_off: u64,
    pub len: u64,
}

/// The balanced form of a matrix: per (s, d, carrier) targets and piece streams.
#[derive(Default)]
pub struct Balanced {
    pub servers: usize,
    pub gpus: usize,
    pub nics: usize,
    /// `targets[(s*N+d)*G+c]`: bytes carrier (s,c) sends to server d (one rank's balancing:
    /// only the tiles its server sends or receives, see `rank_server`; `carrier_target`
    /// gives any).
    pub targets: Vec<u64>,
    /// Tile totals `S[s][d]` (the server-level matrix; zero on the diagonal).
    pub server: Vec<u64>,
    /// Piece streams: `stream_range[(s*N+d)*G+c]` is a half-open range of piece ids
    /// (`piece`, `pieces_in`).
    pub stream_range: Vec<(u32, u32)>,
    /// Scratch bytes each rank uses to hold balanced-in pieces (the start of its receive region).
    pub balance_in: Vec<u64>,
    /// `None`: every tile is balanced. `Some(x)`: one rank's balancing (`balance_rank`):
    /// only the tiles server x sends or receives have targets and pieces, and only x's
    /// moves, `balance_in` and same-server blocks are kept.
    pub rank_server: Option<usize>,
    /// The pieces, moves and intra blocks, servers in order.
    lo: Part,
}

/// What balancing appends: pieces, moves and intra blocks, each server's after those of
/// the server balanced before it.
#[derive(Default)]
struct Part {
    pieces: Vec<Piece>,
    /// Each server's moves ordered by (a, c), then creation order.
    moves: Vec<Move>,
    /// Each server's same-server blocks, row-major.
    intra: Vec<IntraBlock>,
    /// Column sums of the matrix over the servers before the one being balanced.
    col_acc: Vec<u64>,
    temps: BalanceTemps,
}

impl Balanced {
    #[inline]
    pub fn tile(&self, s: usize, d: usize) -> usize {
        s * self.servers + d
    }
    pub fn stream(&self, s: usize, d: usize, c: usize) -> &[Piece] {
        let (b, e) = self.stream_range[self.tile(s, d) * self.gpus + c];
        self.pieces_in(b, e)
    }
    /// The piece with id `id` (see `stream_range`).
    #[inline(always)]
    pub fn piece(&self, id: u32) -> &Piece {
        &self.lo.pieces[id as usize]
    }
    /// Pieces with ids `b..e` (one stream's range, or part of it).
    pub fn pieces_in(&self, b: u32, e: u32) -> &[Piece] {
        &self.lo.pieces[b as usize..e as usize]
    }
    /// Number of pieces in all streams.
    pub fn num_pieces(&self) -> usize {
        self.lo.pieces.len()
    }
    /// Balancing moves ordered by (s, a, c), then creation order, as slices (each server's
    /// moves within one).
    pub fn moves(&self) -> impl Iterator<Item = &[Move]> {
        std::iter::once(&self.lo.moves[..])
    }
    /// Number of balancing moves kept.
    pub fn num_moves(&self) -> usize {
        self.lo.moves.len()
    }
    /// The balancing moves kept, servers in order (each server's by (a, c)).
    pub fn all_moves(&self) -> &[Move] {
        &self.lo.moves
    }
    /// Same-server blocks kept, row-major.
    pub fn intra(&self) -> &[IntraBlock] {
        &self.lo.intra
    }
    pub fn num_intra(&self) -> usize {
        self.lo.intra.len()
    }
}

/// Per-carrier targets of one tile with total `r`: equal per NIC (remainder rotated by
/// s+d so no NIC always gets the extra byte), then equal per GPU on each NIC.
/// With one NIC per GPU this is ⌊r/G⌋ or ⌈r/G⌉ per GPU.
pub fn carrier_targets(r: u64, s: usize, d: usize, gpus: usize, nics: usize, out: &mut [u64]) {
    let k = nics as u64;
    let base = r / k;
    let rem = r % k;
    let rot = ((s + d) % nics) as u64;
    for nic in 0..nics {
        let idx = (nic as u64 + k - rot) % k;
        let nic_target = base + u64::from(idx < rem);
        // GPUs on this NIC: nic, nic+K, nic+2K, ...
        let count = (gpus - nic).div_ceil(nics);
        let gb = nic_target / count as u64;
        let grem = nic_target % count as u64;
        for (i, c) in (nic..gpus).step_by(nics).enumerate() {
            out[c] = gb + u64::from((i as u64) < grem);
        }
    }
}

/// Carrier `c`'s entry of `carrier_targets` alone.
#[inline]
pub fn carrier_target(r: u64, s: usize, d: usize, gpus: usize, nics: usize, c: usize) -> u64 {
    let (k, nic) = (nics as u64, c % nics);
    let idx = (nic as u64 + k - ((s + d) % nics) as u64) % k;
    let nic_target = r / k + u64::from(idx < r % k);
    let count = (gpus - nic).div_ceil(nics) as u64;
    nic_target / count + u64::from(((c / nics) as u64) < nic_target % count)
}

/// Temporaries of `balance_into`, kept with the result so a reused `Balanced` allocates nothing.
#[derive(Default)]
pub struct BalanceTemps {
    row_acc: Vec<u64>,
    col_run: Vec<u64>,
    in_off: Vec<u64>,
    out_off: Vec<u64>,
    rem: Vec<u64>,
    off: Vec<u64>,
    cap: Vec<u64>,
    row: Vec<u64>,
    excess: Vec<u64>,
    move_count: Vec<usize>,
    move_tmp: Vec<Move>,
    per_carrier: Vec<[Vec<Piece>; 4]>,
    /// One rank's balancing: a tile of another server balanced alone (see `balance_rank`).
    tile_bal_in: Vec<u64>,
}

/// Clear `v` and fill it with `len` copies of `x`, keeping its allocation.
#[inline]
pub(crate) fn refill<T: Clone>(v: &mut Vec<T>, len: usize, x: T) {
    v.clear();
    v.resize(len, x);
}

/// Balance every cross-server tile of `traffic` on `cluster`.
pub fn balance(traffic: &Traffic, cluster: &Cluster) -> Balanced {
    let mut out = Balanced::default();
    balance_into(traffic, cluster, &mut out);
    out
}

/// Empty `out` for `cluster`, keeping its allocations.
fn reset(out: &mut Balanced, shape: Shape, rank_server: Option<usize>) {
    let Shape { n, g, nics } = shape;
    out.servers = n;
    out.gpus = g;
    out.nics = nics;
    out.rank_server = rank_server;
    refill(&mut out.targets, n * n * g, 0);
    // One rank's balancing keeps the totals `server_totals` made.
    if rank_server.is_none() {
        refill(&mut out.server, n * n, 0);
    }
    refill(&mut out.stream_range, n * n * g, (0, 0));
    refill(&mut out.balance_in, n * g, 0);
    let part = &mut out.lo;
    part.pieces.clear();
    part.moves.clear();
    part.intra.clear();
    // `col_acc[col]` sums the column over the servers already done (each tile's pass adds
    // its own: the matrix is read once).
    refill(&mut part.col_acc, n * g, 0);
}

/// `balance`, reusing `out`'s allocations (a caller planning in a loop may keep one).
pub fn balance_into(traffic: &Traffic, cluster: &Cluster, out: &mut Balanced) {
    let shape = Shape::of(cluster);
    let Shape { n, g, .. } = shape;
    reset(out, shape, None);
    if n * g == 0 {
        return;
    }
    let servers = out.targets.chunks_exact_mut(n * g).zip(out.server.chunks_exact_mut(n)).zip(out.stream_range.chunks_exact_mut(n * g)).zip(out.balance_in.chunks_exact_mut(g));
    for (s, (((targets, server), stream_range), balance_in)) in servers.enumerate() {
        balance_server(traffic.data(), shape, s, ServerOut { targets, server, stream_range, balance_in }, &mut out.lo);
    }
}

/// The tile totals alone (`Balanced::server`, the Birkhoff schedule's input), in one pass
/// over the matrix: what every rank computes before its own balancing (`balance_rank`).
pub fn server_totals(traffic: &Traffic, cluster: &Cluster, out: &mut Balanced) {
    let shape = Shape::of(cluster);
    let Shape { n, g, .. } = shape;
    out.servers = n;
    out.gpus = g;
    refill(&mut out.server, n * n, 0);
    let (p, data) = (n * g, traffic.data());
    for s in 0..n {
        let totals = &mut out.server[s * n..(s + 1) * n];
        for a in 0..g {
            let row = &data[(s * g + a) * p..(s * g + a + 1) * p];
            for (t, blocks) in totals.iter_mut().zip(row.chunks_exact(g)) {
                *t += blocks.iter().sum::<u64>();
            }
        }
        totals[s] = 0;
    }
}

/// One rank's balancing, for server `x` (after `server_totals`, whose totals it keeps):
/// the tiles x sends, its same-server blocks, moves and `balance_in`, as `balance_into`
/// makes them; and the tiles x receives, each balanced alone from its rows (a tile's
/// balancing reads only its own blocks). Those tiles' pieces carry their true Output
/// offsets (column prefix sums of x's columns, carried tile by tile), and Input and Scratch
/// offsets at the sender that are right only relative to each other within a carrier's
/// stream: a rank plan keeps only the receiver's side of what it receives. Likewise the
/// Output offsets of what x sends hold only x's rows' part of each column's prefix.
/// Reads the matrix's rows of x and columns of x.
pub fn balance_rank(traffic: &Traffic, cluster: &Cluster, x: usize, out: &mut Balanced) {
    let shape = Shape::of(cluster);
    let Shape { n, g, nics } = shape;
    assert!(out.servers == n && out.gpus == g && out.server.len() == n * n, "balance_rank: run server_totals for this cluster first");
    reset(out, shape, Some(x));
    let data = traffic.data();
    // A tile of another server: its Scratch offsets from 0.
    let mut bal_in = std::mem::take(&mut out.lo.temps.tile_bal_in);
    for s in 0..n {
        if s == x {
            let range = x * n * g..(x + 1) * n * g;
            let sout = ServerOut {
                targets: &mut out.targets[range.clone()],
                server: &mut out.server[x * n..(x + 1) * n],
                stream_range: &mut out.stream_range[range],
                balance_in: &mut out.balance_in[x * g..(x + 1) * g],
            };
            balance_server(data, shape, x, sout, &mut out.lo);
            continue;
        }
        // Tile s → x alone: its sender's offsets from 0, the true column offsets.
        let Part { pieces, col_acc, temps: tmp, .. } = &mut out.lo;
        tmp.prepare(g);
        let total = read_tile(data, shape, s, x, &mut col_acc[x * g..(x + 1) * g], tmp);
        debug_assert_eq!(total, out.server[s * n + x]);
        refill(&mut bal_in, g, 0);
        let streams = (s * n + x) * g..(s * n + x + 1) * g;
        let tgt = &mut out.targets[streams.clone()];
        carrier_targets(total, s, x, g, nics, tgt);
        split_tile(shape, s, x, tgt, tmp, pieces, &mut MovesOut::Dropped, &mut bal_in, &mut out.stream_range[streams]);
    }
    out.lo.temps.tile_bal_in = bal_in;
}

#[derive(Clone, Copy)]
struct Shape {
    n: usize,
    g: usize,
    nics: usize,
}

impl Shape {
    fn of(cluster: &Cluster) -> Shape {
        Shape { n: cluster.servers as usize, g: cluster.gpus_per_server as usize, nics: cluster.nics_per_server as usize }
    }
}

/// One server's entries of the shared per-tile and per-rank arrays.
struct ServerOut<'a> {
    /// `n·g`: per destination server d and carrier c.
    targets: &'a mut [u64],
    /// `n`: tile totals of row s.
    server: &'a mut [u64],
    /// `n·g`, like `targets`.
    stream_range: &'a mut [(u32, u32)],
    /// `g`: per local rank.
    balance_in: &'a mut [u64],
}

impl BalanceTemps {
    /// Sized for `g` GPUs per server; a server's row offsets start at 0.
    fn prepare(&mut self, g: usize) {
        refill(&mut self.row_acc, g, 0); // `row_acc[a]`: input offset of the next block of row (s,a)
        refill(&mut self.in_off, g * g, 0); // per tile: input offset of block a→j
        refill(&mut self.out_off, g * g, 0); // per tile: output offset of block a→j
        // Per-tile state, reused.
        refill(&mut self.rem, g * g, 0); // rem[a*g+j]: bytes of block a→j not yet placed
        refill(&mut self.off, g * g, 0); // consumed prefix of block a→j
        refill(&mut self.cap, g, 0); // carrier capacity left
        refill(&mut self.row, g, 0);
        refill(&mut self.excess, g, 0);
        refill(&mut self.move_count, g * g + 1, 0);
        // Pieces of one tile, per carrier, in four classes (own non-direct, own direct, moved non-direct, moved direct).
        self.per_carrier.resize_with(g, Default::default);
    }
}

/// One row-major pass over tile (s, d): torch offsets (`row_acc` per row of s, `cols` per
/// column of d, both advanced past the tile), what is left of each block, row sums. Returns
/// the tile's total.
#[inline(always)]
fn read_tile(data: &[u64], shape: Shape, s: usize, d: usize, cols: &mut [u64], tmp: &mut BalanceTemps) -> u64 {
    let Shape { n, g, .. } = shape;
    let p = n * g;
    let BalanceTemps { row_acc, col_run, in_off, out_off, rem, off, row, .. } = tmp;
    // `col_run[j]` is the output offset of the next block into (d,j).
    col_run.clear();
    col_run.extend_from_slice(cols);
    let mut total = 0u64;
    for a in 0..g {
        let src = (s * g + a) * p + d * g;
        let mut r = 0;
        for j in 0..g {
            let k = a * g + j;
            let v = data[src + j];
            out_off[k] = col_run[j];
            col_run[j] += v;
            in_off[k] = row_acc[a];
            row_acc[a] += v;
            rem[k] = v;
            off[k] = 0;
            r += v;
        }
        row[a] = r;
        total += r;
    }
    cols.copy_from_slice(col_run);
    total
}

/// Split tile (s, d), read by `read_tile`, over its carriers' targets `tgt` and write the
/// carriers' streams (`streams`, per carrier) after `pieces`; moves go to `sink`, Scratch
/// offsets advance `bal_in` (per local rank of s).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn split_tile(shape: Shape, s: usize, d: usize, tgt: &[u64], tmp: &mut BalanceTemps, pieces: &mut Vec<Piece>, sink: &mut MovesOut, bal_in: &mut [u64], streams: &mut [(u32, u32)]) {
    let g = shape.g;
    let BalanceTemps { in_off, out_off, rem, off, cap, row, excess, per_carrier, .. } = tmp;
    let (in_off, out_off, rem, off, cap, row, excess) = (&in_off[..], &out_off[..], &mut rem[..], &mut off[..], &mut cap[..], &row[..], &mut excess[..]);
    let per_carrier = &mut per_carrier[..g];
    cap.copy_from_slice(tgt);
    for pc in per_carrier.iter_mut() {
        for v in pc.iter_mut() {
            v.clear();
        }
    }
    let tile_ctx = TileCtx { s, d, g, in_off, out_off };
    // A: every GPU keeps its same-index block (it lands directly in the peer's Output).
    for a in 0..g {
        let x = rem[a * g + a].min(cap[a]);
        if x > 0 {
            take(&tile_ctx, a, a, a, x, rem, off, cap, per_carrier, sink, bal_in);
        }
    }
    // Light GPUs (row ≤ target) keep everything: moving their bytes away only adds scale-up traffic.
    for a in 0..g {
        if row[a] <= tgt[a] {
            excess[a] = 0;
            for j in 0..g {
                let x = rem[a * g + j];
                if x > 0 {
                    take(&tile_ctx, a, j, a, x, rem, off, cap, per_carrier, sink, bal_in);
                }
            }
        } else {
            excess[a] = row[a] - tgt[a];
        }
    }
    // B: a heavy GPU hands a light carrier c the bytes destined to (d,c): same-index
    // preference, so they need no redistribution at the receiver.
    for a in 0..g {
        if excess[a] == 0 {
            continue;
        }
        for c in 0..g {
            if c == a || cap[c] == 0 || excess[a] == 0 {
                continue;
            }
            let x = rem[a * g + c].min(cap[c]).min(excess[a]);
            if x > 0 {
                excess[a] -= x;
                take(&tile_ctx, a, c, c, x, rem, off, cap, per_carrier, sink, bal_in);
            }
        }
    }
    // C: a heavy GPU keeps what fits its own target.
    for a in 0..g {
        for j in 0..g {
            if cap[a] == 0 {
                break;
            }
            let x = rem[a * g + j].min(cap[a]);
            if x > 0 {
                take(&tile_ctx, a, j, a, x, rem, off, cap, per_carrier, sink, bal_in);
            }
        }
    }
    // D: the rest of each heavy GPU goes to carriers with room, in index order.
    let mut c = 0;
    for a in 0..g {
        for j in 0..g {
            while rem[a * g + j] > 0 {
                while cap[c] == 0 {
                    c += 1;
                }
                let x = rem[a * g + j].min(cap[c]);
                take(&tile_ctx, a, j, c, x, rem, off, cap, per_carrier, sink, bal_in);
            }
        }
    }
    // Streams: own pieces before balanced-in ones (the first stage need not wait for
    // balancing), and within each, pieces for other GPUs before same-index ones (the
    // last stages then carry fewer bytes that need redistribution).
    for (c, classes) in per_carrier.iter().enumerate() {
        let begin = pieces.len() as u32;
        for class in classes {
            pieces.extend_from_slice(class);
        }
        streams[c] = (begin, pieces.len() as u32);
    }
}

/// Balance the tiles of source server `s` into `out` and `part`.
fn balance_server(data: &[u64], shape: Shape, s: usize, out: ServerOut, part: &mut Part) {
    let Shape { n, g, nics } = shape;
    let p = n * g;
    let Part { pieces, moves, intra, col_acc, temps: tmp } = part;
    // Upper bounds for one server (each block is cut at most a few times): the lists then
    // grow at most once per server, and not at all once reused.
    pieces.reserve(n * g * g + n * g);
    moves.reserve(n * g * g / 2 + g);
    intra.reserve(g * g);
    tmp.prepare(g);
    let server_moves_start = moves.len();
    let mut sink = MovesOut::Whole(&mut *moves);
    for d in 0..n {
        let total = read_tile(data, shape, s, d, &mut col_acc[d * g..(d + 1) * g], tmp);
        if d == s {
            for a in 0..g {
                for j in 0..g {
                    let len = data[(s * g + a) * p + d * g + j];
                    if len > 0 {
                        intra.push(IntraBlock { i: (s * g + a) as u32, j: (d * g + j) as u32, input_off: tmp.in_off[a * g + j], out_off: tmp.out_off[a * g + j], len });
                    }
                }
            }
            continue;
        }
        out.server[d] = total;
        let tgt = &mut out.targets[d * g..(d + 1) * g];
        carrier_targets(total, s, d, g, nics, tgt);
        split_tile(shape, s, d, tgt, tmp, pieces, &mut sink, out.balance_in, &mut out.stream_range[d * g..(d + 1) * g]);
    }
    // Group this server's moves by (a, c) so each (a, c) pair is one balancing transfer
    // (counting sort: stable, no comparisons).
    group_moves(moves, server_moves_start, g, &mut tmp.move_count, &mut tmp.move_tmp);
}

/// Where the blocks of the tile being balanced start (read by `take`).
struct TileCtx<'a> {
    s: usize,
    d: usize,
    g: usize,
    in_off: &'a [u64],
    out_off: &'a [u64],
}

/// Hand `len` bytes of block a→j (next in its order) to carrier c: a piece of c's stream,
/// and a balancing move when c is not the sender. Inlined: it runs once per piece.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn take(t: &TileCtx, a: usize, j: usize, c: usize, len: u64, rem: &mut [u64], off: &mut [u64], cap: &mut [u64], pcs: &mut [[Vec<Piece>; 4]], moves: &mut MovesOut, bal_in: &mut [u64]) {
    debug_assert!(len > 0);
    let g = t.g;
    let k = a * g + j;
    let block_off = off[k];
    off[k] += len;
    rem[k] -= len;
    cap[c] -= len;
    let input_off = t.in_off[k] + block_off;
    let src_off = if a == c {
        input_off
    } else {
        // `bal_in`: the server's entries, per local rank.
        let o = bal_in[c];
        bal_in[c] += len;
        match moves {
            MovesOut::Whole(m) => m.push(Move { s: t.s as u32, a: a as u32, c: c as u32, d: t.d as u32, j: j as u32, input_off, len, scratch_off: o }),
            MovesOut::Dropped => {}
        }
        o
    };
    let class = usize::from(j == c) + if a == c { 0 } else { 2 };
    pcs[c][class].push(Piece { a: a as u32, j: j as u32, len, src_off, out_off: t.out_off[k] + block_off });
}

/// Where `take` puts a server's moves.
enum MovesOut<'a> {
    Whole(&'a mut Vec<Move>),
    /// Another server's tile, balanced alone for one rank: its moves are not the rank's.
    Dropped,
}

/// Stable counting sort of `moves[start..]` by (a, c).
fn group_moves(moves: &mut [Move], start: usize, g: usize, count: &mut [usize], tmp: &mut Vec<Move>) {
    if moves.len() - start < 2 {
        return;
    }
    count.iter_mut().for_each(|x| *x = 0);
    for m in &moves[start..] {
        count[m.a as usize * g + m.c as usize + 1] += 1;
    }
    for k in 1..count.len() {
        count[k] += count[k - 1];
    }
    tmp.clear();
    tmp.extend_from_slice(&moves[start..]);
    for m in tmp.iter() {
        let k = m.a as usize * g + m.c as usize;
        moves[start + count[k]] = *m;
        count[k] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `carrier_target` is `carrier_targets`' entry, for any NIC sharing and remainder.
    #[test]
    fn one_carrier_target_is_the_lists_entry() {
        for (gpus, nics) in [(1, 1), (4, 4), (4, 2), (3, 2), (8, 3), (6, 1)] {
            let mut t = vec![0; gpus];
            for r in [0u64, 1, 5, 7, 1000, 1001, 12_345_677] {
                for (s, d) in [(0, 1), (2, 1), (3, 5)] {
                    carrier_targets(r, s, d, gpus, nics, &mut t);
                    for (c, &want) in t.iter().enumerate() {
                        assert_eq!(carrier_target(r, s, d, gpus, nics, c), want, "r {r} s {s} d {d} gpus {gpus} nics {nics} c {c}");
                    }
                }
            }
        }
    }

    #[test]
    fn targets_split_nics_then_gpus() {
        let mut t = vec![0; 4];
        carrier_targets(10, 0, 1, 4, 4, &mut t);
        assert_eq!(t.iter().sum::<u64>(), 10);
        assert!(t.iter().all(|&x| x == 2 || x == 3));
        // Two NICs, four GPUs: NIC 0 = GPUs 0,2; NIC 1 = GPUs 1,3.
        carrier_targets(10, 0, 0, 4, 2, &mut t);
        assert_eq!(t[0] + t[2], 5);
        assert_eq!(t[1] + t[3], 5);
        // Three GPUs on two NICs: NIC 0 has GPUs 0 and 2.
        let mut t3 = vec![0; 3];
        carrier_targets(9, 0, 0, 3, 2, &mut t3);
        assert_eq!(t3[0] + t3[2], 5);
        assert_eq!(t3[1], 4);
    }
}
