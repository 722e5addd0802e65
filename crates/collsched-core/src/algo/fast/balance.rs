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

/// What a stream carries, byte by byte, in the order of its pieces (see `balance_server`):
/// the carrier's own bytes for other GPUs ("non-direct", parked at the receiver), its own
/// bytes for its peer, balanced-in non-direct bytes, balanced-in bytes for its peer. Kept
/// for every stream, so the counting of what each cut becomes (`Cuts::make_counted`) needs
/// no walk over the pieces, which one rank's balancing writes for its own server's tiles
/// only (`balance_for`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamSummary {
    /// End of the own non-direct bytes (they start the stream).
    pub own_nd: u64,
    /// End of the own bytes; the balanced-in bytes follow.
    pub own: u64,
    /// End of the balanced-in non-direct bytes.
    pub nd_end: u64,
    /// The stream's non-direct runs in `Balanced::runs`: own ones `begin..mid` (covering
    /// `0..own_nd`), balanced-in ones `mid..end` (covering `own..nd_end`).
    pub runs: (u32, u32, u32),
}

/// `len` non-direct bytes of one piece, for local receiver `j` (its owner).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Run {
    pub len: u64,
    pub j: u32,
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
    /// `targets[(s*N+d)*G+c]`: bytes carrier (s,c) sends to server d.
    pub targets: Vec<u64>,
    /// Tile totals `S[s][d]` (the server-level matrix; zero on the diagonal).
    pub server: Vec<u64>,
    /// Piece streams: `stream_range[(s*N+d)*G+c]` is a half-open range of piece ids
    /// (`piece`, `pieces_in`).
    pub stream_range: Vec<(u32, u32)>,
    /// Scratch bytes each rank uses to hold balanced-in pieces (the start of its receive region).
    pub balance_in: Vec<u64>,
    /// Per stream (indexed like `stream_range`), its summary.
    pub summary: Vec<StreamSummary>,
    /// The server whose tiles (sent or received) have pieces; `None`: every tile has.
    pub pieces_of: Option<usize>,
    /// Whether `summary` holds every stream's summary (see `Keep`).
    pub summarized: bool,
    /// Every server's pieces, moves and intra blocks, servers in order.
    lo: Part,
}

/// What the balancing of some servers appends: their pieces, moves and intra blocks, each
/// server's after those of the server balanced before it.
#[derive(Default)]
struct Part {
    pieces: Vec<Piece>,
    /// The streams' non-direct runs (`StreamSummary::runs`).
    runs: Vec<Run>,
    /// Each server's moves ordered by (a, c), then creation order.
    moves: Vec<Move>,
    /// The moves of the servers whose moves one rank's balancing keeps only as keys
    /// (`MoveKey`), servers in order.
    keys: Vec<u32>,
    /// Each server's same-server blocks, row-major.
    intra: Vec<IntraBlock>,
    /// Per server, in the order balanced: where its moves and its intra blocks end, and
    /// where its move keys end.
    ends: Vec<(usize, usize)>,
    key_ends: Vec<usize>,
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
    /// The non-direct run with id `id` (see `StreamSummary::runs`).
    #[inline(always)]
    pub fn run(&self, id: u32) -> Run {
        self.lo.runs[id as usize]
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
    /// Number of balancing moves, kept whole or as keys.
    pub fn num_moves(&self) -> usize {
        self.lo.moves.len() + self.lo.keys.len()
    }
    /// Every server's balancing moves, servers in order (each server's by (a, c)).
    pub fn all_moves(&self) -> &[Move] {
        &self.lo.moves
    }
    /// Server `s`'s moves (ordered by (a, c), then creation order); none for a server
    /// other than `pieces_of` (see `server_move_keys`).
    pub fn server_moves(&self, s: usize) -> &[Move] {
        let r = self.server_range(s);
        &self.lo.moves[r.0.0..r.1.0]
    }
    /// One rank's balancing: server `s`'s moves as keys `(a, c, d)` (`MoveKey`) in
    /// creation order, for a server other than `pieces_of` (else none).
    pub fn server_move_keys(&self, s: usize) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        let begin = if s == 0 { 0 } else { self.lo.key_ends[s - 1] };
        self.lo.keys[begin..self.lo.key_ends[s]].iter().map(|&k| MoveKey::unpack(k))
    }
    /// The range of server `s`'s same-server blocks in `intra` (row-major).
    pub fn server_intra(&self, s: usize) -> std::ops::Range<usize> {
        let r = self.server_range(s);
        r.0.1..r.1.1
    }
    /// Where server `s`'s moves and intra blocks begin and end.
    fn server_range(&self, s: usize) -> ((usize, usize), (usize, usize)) {
        let begin = if s == 0 { (0, 0) } else { self.lo.ends[s - 1] };
        (begin, self.lo.ends[s])
    }
    /// Same-server blocks with ids `r` (see `server_intra`).
    pub fn intra_in(&self, r: std::ops::Range<usize>) -> &[IntraBlock] {
        &self.lo.intra[r]
    }
    /// Same-server blocks, row-major.
    pub fn intra(&self) -> impl Iterator<Item = &IntraBlock> {
        self.lo.intra.iter()
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

/// What balancing keeps beside the tile totals, carrier targets, `balance_in`, moves and
/// same-server blocks, which it always makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Every tile's pieces: what a whole plan's assembly reads.
    Pieces,
    /// Every tile's pieces and every stream's summary (`Balanced::summary`), which the
    /// counting of one rank's expansion reads (`Cuts::make_counted`).
    PiecesAndSummaries,
    /// For one rank of server x: every stream's summary, pieces only for the tiles x sends
    /// or receives, whole moves only for x (the other servers' as keys,
    /// `Balanced::server_move_keys`): all that its counting and expansion read.
    Rank(usize),
}

/// `balance`, reusing `out`'s allocations (a caller planning in a loop may keep one):
/// every tile's pieces and every stream's summary.
pub fn balance_into(traffic: &Traffic, cluster: &Cluster, out: &mut Balanced) {
    balance_for(traffic, cluster, out, Keep::PiecesAndSummaries);
}

/// `balance_into`, keeping what `keep` says. The tile totals, targets, `balance_in`, the
/// number of moves and the same-server blocks are the same for every `keep`, and so are
/// the pieces and summaries it keeps.
pub fn balance_for(traffic: &Traffic, cluster: &Cluster, out: &mut Balanced, keep: Keep) {
    let pieces_of = match keep {
        Keep::Rank(x) => {
            // Move keys and the counting's owner sets hold local indices in 6 bits / 64-bit masks.
            assert!(cluster.gpus_per_server as usize <= super::cuts::MAX_COUNTED_GPUS, "balance_for: Keep::Rank with {} GPUs per server", cluster.gpus_per_server);
            Some(x)
        }
        _ => None,
    };
    let summaries = keep != Keep::Pieces;
    let shape = Shape::of(cluster);
    let Shape { n, g, .. } = shape;
    let p = n * g;
    let data = traffic.data();
    out.servers = n;
    out.gpus = g;
    refill(&mut out.targets, n * n * g, 0);
    refill(&mut out.server, n * n, 0);
    refill(&mut out.stream_range, n * n * g, (0, 0));
    refill(&mut out.balance_in, p, 0);
    if summaries {
        refill(&mut out.summary, n * n * g, StreamSummary::default());
    } else {
        out.summary.clear();
    }
    out.pieces_of = pieces_of;
    out.summarized = summaries;
    let part = &mut out.lo;
    part.pieces.clear();
    part.runs.clear();
    part.moves.clear();
    part.keys.clear();
    part.key_ends.clear();
    part.intra.clear();
    part.ends.clear();
    // `col_acc[col]` sums the column over the servers already done (each tile's pass adds
    // its own: the matrix is read once).
    refill(&mut part.col_acc, p, 0);
    if p == 0 {
        return;
    }
    let servers = out.targets.chunks_exact_mut(n * g).zip(out.server.chunks_exact_mut(n)).zip(out.stream_range.chunks_exact_mut(n * g)).zip(out.balance_in.chunks_exact_mut(g));
    let mut summaries = summaries.then(|| out.summary.chunks_exact_mut(n * g));
    for (s, (((targets, server), stream_range), balance_in)) in servers.enumerate() {
        let summary = summaries.as_mut().and_then(|it| it.next());
        balance_server(data, shape, s, ServerOut { targets, server, stream_range, balance_in, summary, pieces_of }, part, 0);
    }
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
    /// `n·g`, like `targets`, where summaries are kept.
    summary: Option<&'a mut [StreamSummary]>,
    /// See `balance_for`.
    pieces_of: Option<usize>,
}

/// Balance the tiles of source server `s` into `out` and `part`.
fn balance_server(data: &[u64], shape: Shape, s: usize, mut out: ServerOut, part: &mut Part, id_tag: u32) {
    let Shape { n, g, nics } = shape;
    let p = n * g;
    let Part { pieces, runs, moves, keys, intra, ends, key_ends, col_acc, temps: tmp } = part;
    // Upper bounds for one server (each block is cut at most a few times): the lists then
    // grow at most once per server, and not at all once reused.
    pieces.reserve(n * g * g + n * g);
    runs.reserve(n * g * g + n * g);
    moves.reserve(n * g * g / 2 + g);
    intra.reserve(g * g);
    refill(&mut tmp.row_acc, g, 0); // `row_acc[a]`: input offset of the next block of row (s,a)
    refill(&mut tmp.in_off, g * g, 0); // per tile: input offset of block a→j
    refill(&mut tmp.out_off, g * g, 0); // per tile: output offset of block a→j
    // Per-tile state, reused.
    refill(&mut tmp.rem, g * g, 0); // rem[a*g+j]: bytes of block a→j not yet placed
    refill(&mut tmp.off, g * g, 0); // consumed prefix of block a→j
    refill(&mut tmp.cap, g, 0); // carrier capacity left
    refill(&mut tmp.row, g, 0);
    refill(&mut tmp.excess, g, 0);
    refill(&mut tmp.move_count, g * g + 1, 0);
    // Pieces of one tile, per carrier, in four classes (own non-direct, own direct, moved non-direct, moved direct).
    tmp.per_carrier.resize_with(g, Default::default);
    let BalanceTemps { row_acc, col_run, in_off, out_off, rem, off, cap, row, excess, move_count, move_tmp, per_carrier } = tmp;
    let (row_acc, in_off, out_off, rem, off, cap, row, excess) =
        (&mut row_acc[..], &mut in_off[..], &mut out_off[..], &mut rem[..], &mut off[..], &mut cap[..], &mut row[..], &mut excess[..]);
    let per_carrier = &mut per_carrier[..g];
    let server_moves_start = moves.len();
    // Whole moves where the assembler reads them; else keys for counting their transfers.
    let whole = out.pieces_of.is_none_or(|x| x == s) || n > MoveKey::MAX_SERVERS;
    let mut sink = if whole { MovesOut::Whole(&mut *moves) } else { MovesOut::Keys(&mut *keys) };
    for d in 0..n {
        // One row-major pass over the tile: torch offsets, what is left of each block,
        // row sums. `col_run[j]` is the output offset of the next block into (d,j).
        col_run.clear();
        col_run.extend_from_slice(&col_acc[d * g..(d + 1) * g]);
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
        col_acc[d * g..(d + 1) * g].copy_from_slice(col_run);
        if d == s {
            for a in 0..g {
                for j in 0..g {
                    let len = data[(s * g + a) * p + d * g + j];
                    if len > 0 {
                        intra.push(IntraBlock { i: (s * g + a) as u32, j: (d * g + j) as u32, input_off: in_off[a * g + j], out_off: out_off[a * g + j], len });
                    }
                }
            }
            continue;
        }
        out.server[d] = total;
        let tgt = &mut out.targets[d * g..(d + 1) * g];
        carrier_targets(total, s, d, g, nics, tgt);
        let tgt = &*tgt;
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
                take(&tile_ctx, a, a, a, x, rem, off, cap, per_carrier, &mut sink, out.balance_in);
            }
        }
        // Light GPUs (row ≤ target) keep everything: moving their bytes away only adds scale-up traffic.
        for a in 0..g {
            if row[a] <= tgt[a] {
                excess[a] = 0;
                for j in 0..g {
                    let x = rem[a * g + j];
                    if x > 0 {
                        take(&tile_ctx, a, j, a, x, rem, off, cap, per_carrier, &mut sink, out.balance_in);
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
                    take(&tile_ctx, a, c, c, x, rem, off, cap, per_carrier, &mut sink, out.balance_in);
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
                    take(&tile_ctx, a, j, a, x, rem, off, cap, per_carrier, &mut sink, out.balance_in);
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
                    take(&tile_ctx, a, j, c, x, rem, off, cap, per_carrier, &mut sink, out.balance_in);
                }
            }
        }
        // Streams: own pieces before balanced-in ones (the first stage need not wait for
        // balancing), and within each, pieces for other GPUs before same-index ones (the
        // last stages then carry fewer bytes that need redistribution).
        let keep = out.pieces_of.is_none_or(|x| s == x || d == x);
        for (c, classes) in per_carrier.iter().enumerate() {
            let begin = pieces.len() as u32 | id_tag;
            if keep {
                for class in classes {
                    pieces.extend_from_slice(class);
                }
            }
            out.stream_range[d * g + c] = (begin, pieces.len() as u32 | id_tag);
            // The summary, from the classes (in cache): non-direct runs and the class ends.
            if let Some(summary) = out.summary.as_deref_mut() {
                let r0 = runs.len() as u32;
                let own_nd = push_runs(&classes[0], runs);
                let r1 = runs.len() as u32;
                let own = own_nd + classes[1].iter().map(|pc| pc.len).sum::<u64>();
                let nd_end = own + push_runs(&classes[2], runs);
                summary[d * g + c] = StreamSummary { own_nd, own, nd_end, runs: (r0, r1, runs.len() as u32) };
            }
        }
    }
    // Group this server's moves by (a, c) so each (a, c) pair is one balancing transfer
    // (counting sort: stable, no comparisons).
    if whole {
        group_moves(moves, server_moves_start, g, move_count, move_tmp);
    }
    ends.push((moves.len(), intra.len()));
    key_ends.push(keys.len());
}

/// Append `pieces`' runs (owner and length) to `runs`; their bytes.
#[inline]
fn push_runs(pieces: &[Piece], runs: &mut Vec<Run>) -> u64 {
    let mut bytes = 0;
    for pc in pieces {
        runs.push(Run { len: pc.len, j: pc.j });
        bytes += pc.len;
    }
    bytes
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
            MovesOut::Keys(k) => k.push(MoveKey::pack(a, c, t.d)),
        }
        o
    };
    let class = usize::from(j == c) + if a == c { 0 } else { 2 };
    pcs[c][class].push(Piece { a: a as u32, j: j as u32, len, src_off, out_off: t.out_off[k] + block_off });
}

/// Where `take` puts a server's moves.
enum MovesOut<'a> {
    Whole(&'a mut Vec<Move>),
    /// Only which (a, c) pair moves bytes for which destination server: what counting the
    /// server's balancing transfers reads (`MoveKey`), in a twelfth of a `Move`'s bytes.
    Keys(&'a mut Vec<u32>),
}

/// A move `(a, c, d)` packed in 32 bits (local indices below 64, servers below 2^20).
struct MoveKey;

impl MoveKey {
    const MAX_SERVERS: usize = 1 << 20;
    #[inline]
    fn pack(a: usize, c: usize, d: usize) -> u32 {
        debug_assert!(a < 64 && c < 64 && d < Self::MAX_SERVERS);
        (a as u32) << 26 | (c as u32) << 20 | d as u32
    }
    #[inline]
    fn unpack(k: u32) -> (u32, u32, u32) {
        (k >> 26, k >> 20 & 63, k & ((1 << 20) - 1))
    }
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
