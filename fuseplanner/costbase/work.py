"""The `Work` record every kernel model returns, the `KernelModel` base class, and the access
patterns kernels share.

Kernel layout assumed by every model (and implemented by the kernels): the grid is
x = spatial tiles (fastest; dw_pw's clusters add their rank), y = filter tiles, z = images. Every
filter tile re-reads its spatial tiles' input windows from L2 (L1 serves some of those re-reads when
blocks of one window share an SM, `traffic.coresident_share`), and weights are re-read from L2 by
every spatial tile; both re-reads reach DRAM only when their reuse footprint exceeds L2 (see
`traffic`). Weight matrices are row-major [out, in] (PW/linear) and [C, kh, kw] (DW); a block
reads the rows of its filter tile, in chunks of tc input channels.

A model splits its arithmetic into a spatial part (depends on th, tw), a channel part (tf, tc) and a
cheap combination, and memoises the two parts per kernel group: the planner evaluates hundreds of
tiles per group, which share few distinct spatial and channel sizes.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from fuseplanner.core.ir import Tile
from fuseplanner.costbase.geometry import Geom
from fuseplanner.costbase.traffic import (
    plane_windows_sectors,
    row_sectors,
    row_union_sectors,
    sectors,
    span_union,
)

#: Bytes per element of the parameters that every kernel keeps in fp32 whatever the storage dtype:
#: biases (all kernels), and the weights of the dw kernel and of every fused kernel (their products
#: accumulate in fp32 from fp32 weights; only the pw/linear kernel stores weights in the storage dtype,
#: as mma operands). See the kernel sources (kernels/families/*/*.cu): `const float* w...`.
PARAM_BYTES = 4


class Work(NamedTuple):
    """What one kernel launch moves and computes (all batch-scaled; bytes are whole sectors)."""

    gma_read: float  # bytes read from L2 by the SMs
    gma_write: float  # bytes written to L2 by the SMs
    in_unique: float  # distinct input bytes (DRAM compulsory reads of the activation input)
    w_unique: float  # distinct weight + bias bytes
    res_unique: float  # distinct residual bytes that are not already the input (DRAM compulsory)
    out_unique: float  # distinct output bytes
    in_img: float  # input bytes of one image (reuse footprint of filter-tile re-reads)
    out_img: float  # output bytes of one image
    useful_flops: float  # FLOPs of the unfused layers
    cuda_flops: float  # FLOPs executed on CUDA cores (DW), redundant ones included
    mma_flops: float  # FLOPs of PW/linear products (tensor cores when the dtype allows), redundant included
    iters: int  # serial chunk iterations per block (each waits for one load)
    blocks: int
    nf: int  # filter tiles
    nsp: int  # spatial tiles per image
    w_read: float = 0.0  # the part of gma_read that is per-block weight reads of a fused kernel
    l1_hits: float = 0.0  # bytes the blocks' loads request beyond gma_read: window rows sharing sectors (L1 serves them)
    req_read: float = 0.0  # bytes the time model charges the loads (set by model.l1_filtered)
    ld_read: float = 0.0  # the same, per block (without the one-read-of-every-weight floor)
    in_read: float = 0.0  # fused kinds: the part of gma_read that is input windows read once per filter tile (model.coresident)
    w_l1: float = 0.0  # the part of w_read copied through L1 (fp32 DW filters and biases; the rest is packed PW weights)
    w_all: float = 0.0  # fused kinds: the part of w_read - w_l1 that every block reads, not only its filter tile's (W1)
    w_all_l2: float = 0.0  # fused kinds: what of w_all reaches L2 after its merging (model.l1_filtered), before L1 sharing
    cuda_issue: float = 0.0  # fused kinds: DW FLOPs as the block's busiest thread executes them (model.issued; 0: cuda_flops)
    mma_issue: float = 0.0  # fused kinds, and pw/linear with pw_shared_load_weight: PW FLOP-equivalents of the block's busiest GEMM unit (model.issued; 0: mma_flops)


_WORK_FIELDS = {name: i for i, name in enumerate(Work._fields)}


def _replace_work(self: Work, **changes: float) -> Work:
    """`Work._replace`, without the generic namedtuple machinery: the cost model replaces fields of
    a `Work` a few times per tile, and the planner's search ranks tens of thousands of tiles."""
    values = list(self)
    for name, value in changes.items():
        try:
            values[_WORK_FIELDS[name]] = value
        except KeyError:
            raise ValueError(f"Got unexpected field names: {[name]!r}") from None
    return tuple.__new__(Work, values)


Work._replace = _replace_work  # type: ignore[method-assign]


class KernelModel:
    """Traffic and work of one kernel kind over one group of ops, for any tile and batch."""

    #: Whether L2 merges the filter tiles' re-reads of an input window as `cost.model.coalesced` says
    #: (`cost.model.coresident`).
    MERGED_INPUT_REREADS = True
    #: Whether co-resident blocks share their input windows (`traffic.coresident_share`) only within the
    #: launch's first wave, not over the whole launch.
    FIRST_WAVE_SHARING = False
    #: Whether the time model caps the SM's issue rate (`cost.time.warp_rates`: the spec's
    #: `sm_issue_warps`, or `fused_sm_issue_warps` for a fused kind).
    ISSUE_CAPPED = True
    #: Whether each chunk iteration of a block adds the spec's `pw_chunk_cycles` to its chain
    #: (`cost.time.warp_rates`): the layer-by-layer pw/linear kernel's barrier and register-block
    #: staging per chunk of the reduction.
    CHUNK_STEPPED = False
    #: Whether a launch takes the spec's `fused_kernel_fixed_s` beyond the empty-launch floor
    #: (`cost.time.warp_rates`) rather than the layer-by-layer kernels' `kernel_fixed_s` (`fused_fixed`).
    FUSED_FIXED = False

    @classmethod
    def fused_fixed(cls, ops: tuple) -> bool:
        """Whether a launch over `ops` takes `fused_kernel_fixed_s`: `FUSED_FIXED` unless the kind's
        model says otherwise per launch."""
        return cls.FUSED_FIXED

    @classmethod
    def launch_class(cls, ops: tuple) -> str:
        """The launch's class for the graph context's per-launch terms (`core.kinds.LAUNCH_CLASSES`):
        `fused` when it takes `fused_kernel_fixed_s` (`fused_fixed`), else its first op's kind."""
        return "fused" if cls.fused_fixed(ops) else ops[0].kind

    def __init__(self, gs: tuple[Geom, ...], e: int) -> None:
        self.gs, self.e = gs, e
        self._sp: dict[tuple[int, int], Any] = {}
        self._ch: dict[tuple[int, int], Any] = {}
        self.setup()

    def setup(self) -> None:
        """Tile-independent quantities."""

    def spatial(self, th: int, tw: int) -> Any:
        raise NotImplementedError

    def channel(self, tf: int, tc: int) -> Any:
        raise NotImplementedError

    def combine(self, sp: Any, ch: Any, tile: Tile, b: int, residual: bool) -> Work:
        raise NotImplementedError

    def stores(self, w: Work, tile: Tile, b: int, precision: str, ks: int) -> Work:
        """`w` with the writes of the kernel's store instructions where they depend on its math path
        (`precision`) or cluster split (`ks`); unchanged by default."""
        return w

    def l1_reuse(self, w: Work, tile: Tile, ks: int, cache: int, line: int) -> Work:
        """`w` with the reads that a block's L1 (`cache` bytes of `line`-byte lines) serves again across
        its own channel chunks moved from `gma_read` to `l1_hits`; unchanged by default."""
        return w

    def issued(self, kind: str, ops: tuple, tile: Tile, dtype: str, precision: str, w: Work, ks: int, hw: Any) -> Work:
        """`w` with the FLOPs the launch's blocks issue on their critical path where the time model
        charges them beyond the useful FLOPs (`cost.model.issued`; `hw`: the GPU's `hw.spec.Hw`);
        unchanged by default."""
        return w

    #: Whether `bounded` gives a lower bound of the work (the tile search, `cost.best_tile`, then
    #: ranks every tile by it first and works out the exact `work` only for tiles that may still win).
    BOUNDED = False

    def bounded(self, sp: Any, ch: Any, tile: Tile, b: int, residual: bool) -> Work:
        """`combine` + `stores` with the request counts that cost the most to work out (per-instruction
        simulations) at a floor they never go below, every other field exact: no time, L2 bytes or
        DRAM bytes of the result exceeds the exact one's (they only grow with these counts). It must
        not depend on how the tile stores (`tiles.store_key`): tiles that differ only there share it."""
        raise NotImplementedError

    def counts(self, sp: Any, ch: Any) -> tuple[int, int, int, float, float]:
        """(spatial tiles per image, filter tiles, chunk iterations per block, CUDA-core FLOPs and
        PW/linear product FLOPs of one image) of the tile whose `spatial` and `channel` parts are `sp`
        and `ch`, as `combine` counts them."""
        raise NotImplementedError

    def floor(self, tile: Tile, b: int) -> Work:
        """A floor of the `work` of `tile` for `b` images, whatever the residual, precision, split or
        stores: its blocks, chunk iterations, filter and spatial tiles and FLOPs (`counts`), every
        byte count 0. The tile search (`cost.best_tile`) times it to rank tiles before working out
        any traffic: time only grows with the bytes."""
        nsp, nf, iters, cuda, mma = self.counts(*self._parts(tile))
        return Work(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, b * cuda, b * mma, iters, nsp * nf * b, nf, nsp)

    def _parts(self, tile: Tile) -> tuple[Any, Any]:
        """The tile's `spatial` and `channel` parts, memoised."""
        key = (tile.th, tile.tw)
        sp = self._sp.get(key)
        if sp is None:
            sp = self._sp[key] = self.spatial(tile.th, tile.tw)
        key = (tile.tf, tile.tc)
        ch = self._ch.get(key)
        if ch is None:
            ch = self._ch[key] = self.channel(tile.tf, tile.tc)
        return sp, ch

    def work(self, tile: Tile, b: int, residual: bool, *, precision: str = "fp32", ks: int = 1,
             exact: bool = True) -> Work:  # fmt: skip
        """The `Work` of `tile` for `b` images (`exact=False`: `bounded` where the model has it)."""
        sp, ch = self._parts(tile)
        if not exact and self.BOUNDED:
            return self.bounded(sp, ch, tile, b, residual)
        return self.stores(self.combine(sp, ch, tile, b, residual), tile, b, precision, ks)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def out_plane_sectors(g: Geom, tw: int, e: int, th: int = 1) -> float:
    """Sectors of one NCHW output plane accessed tile by tile (th x tw per block): per row segment, but
    where output rows are narrower than a sector a tile's rows share sectors and count once
    (`traffic.plane_windows_sectors`' distinct count of the tiles, which is the per-row-segment count
    otherwise). The residual reads of every kind and the layer-by-layer pw kernel's writes; the
    kernels that store item by item from a tile have their writes counted per warp instruction
    (`requests.tile_write_sectors`)."""
    nh, nw = cdiv(g.ho, th), cdiv(g.wo, tw)
    return plane_windows_sectors(g.ho, g.wo, 0, 0, th, tw, th, tw, nh, nw, e, g.ho * g.wo * e)[0]


def whole_map_out_sectors(g: Geom, tf: int, e: int) -> float:
    """Sectors of the NCHW output when one tile covers the map: a filter tile's tf output planes are
    one contiguous run (a 1x1 squeeze-excite map writes whole channel runs, not one sector per
    channel)."""
    return block_split_sectors(g.co * g.ho * g.wo, tf * g.ho * g.wo, e)


def out_tokens_sectors(g: Geom, tf: int, e: int) -> float:
    """Sectors of one token-major output [tokens, co] written tf columns per block."""
    return g.ho * row_sectors(g.co, 0, tf, tf, cdiv(g.co, tf), e, g.co * e)


def matrix_chunk_sectors(rows: int, cols: int, chunk: int, e: int) -> float:
    """Sectors of reading all `rows` rows of a row-major rows x cols matrix in column chunks of `chunk`."""
    return rows * row_sectors(cols, 0, chunk, chunk, cdiv(cols, chunk), e, cols * e)


def block_split_sectors(n: int, part: int, e: int) -> float:
    """Sectors of reading a contiguous array of n elements in consecutive parts of `part` elements."""
    return row_sectors(n, 0, part, part, cdiv(n, part), e, 0)


def window_sectors(g: Geom, hh: int, ww: int, th: int, tw: int, e: int) -> tuple[float, float]:
    """(distinct, requested) sectors of one input plane when every spatial tile reads its hh x ww
    window (halo included), for a DW-like access (windows of contiguous rows and columns, padding
    clipped; rows narrower than a sector share sectors, `traffic.plane_windows_sectors`)."""
    nh, nw = cdiv(g.ho, th), cdiv(g.wo, tw)
    return plane_windows_sectors(g.h, g.w, g.pt, g.pl, hh, ww, th * g.sh, tw * g.sw, nh, nw, e, g.h * g.w * e)


def window_unique(g: Geom, hh: int, ww: int, th: int, tw: int, e: int) -> float:
    """Distinct sectors of one plane that the windows of `window_sectors` cover (fractional: the
    tensor total is rounded by the caller)."""
    nh, nw = cdiv(g.ho, th), cdiv(g.wo, tw)
    rows = span_union(g.h, g.pt, hh, th * g.sh, nh)
    step = tw * g.sw
    cols = span_union(g.w, g.pl, ww, step, nw)
    if rows == g.h and cols == g.w:
        return g.h * g.w * e / 32
    return rows * row_union_sectors(g.w, g.pl, ww, step, nw, e, g.w * e)


def pw_in_sectors(g: Geom, th: int, tw: int, e: int) -> float:
    """Sectors of one input plane of a PW conv read tile by tile (strided pixels only); at stride 1 the
    tiles are unpadded th x tw windows (`window_sectors`: where rows are narrower than a sector, a
    tile's rows share sectors and one copy request asks for them together)."""
    if g.sh == g.sw == 1:
        return window_sectors(g, th, tw, th, tw, e)[0]
    nw = cdiv(g.wo, tw)
    win = (tw - 1) * g.sw + 1
    return g.ho * row_sectors(g.w, 0, win, tw * g.sw, nw, e, g.w * e)


def pw_in_unique(g: Geom, e: int) -> float:
    """Distinct sectors of one input plane of a PW conv (all of it at stride 1)."""
    if g.sh == 1 and g.sw == 1:
        return g.h * g.w * e / 32
    win = (g.wo - 1) * g.sw + 1
    return g.ho * row_sectors(g.w, 0, win, win, 1, e, g.w * e)


def tensor_bytes(nelems: int, e: int) -> float:
    """Bytes of a contiguous tensor rounded up to whole sectors."""
    return 32.0 * sectors(nelems * e)


def whole_bytes(nsectors: float) -> float:
    """Bytes of a (possibly fractional, row-averaged) sector count rounded up to whole sectors."""
    return 32.0 * math.ceil(nsectors - 1e-9)


def mma_tiles_issue(k: int, warps: int, groups: int, mi: int, ni: int, load_w: float) -> float:
    """FLOP-equivalents of `warps` warps each running `groups` groups of mi x ni mma tiles of 16 x 8 over
    k (a tile is 2 x 16 x 8 x k FLOPs), plus `load_w` per fragment load a k step: an A tile per row of
    tiles, half a B tile per column (the fused kernels' block GEMMs and the pw/linear kernel alike)."""
    return 2.0 * 16 * 8 * k * warps * groups * (mi * ni + load_w * (mi + 0.5 * ni))
