"""The layer-by-layer depthwise family (`dw`, dw.cu): a block computes tf channels x (th x tw)
output pixels; it stages the tf input planes of its halo window ((th-1)s+(k-1)d+1) x ((tw-1)s+(k-1)d+1)
and the tf k x k filters. tc == tf."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fuseplanner.core.ir import Op, Tile
from fuseplanner.kernels.registers import outputs_per_thread
from fuseplanner.kernels.tile_common import ACC_BYTES, _halo, _rup

#: Widest copy (bytes) of dw.cu's window staging: 8, not 16, since a staged row starts at a
#: column rounded down to the vector width and so holds up to 2 x (width - 1) columns it does not use.
DW_VECTOR_BYTES = 8


def dw_vector_elems(w: int, e: int) -> int:
    """Elements per copy of dw.cu's window staging when the input is aligned: the widest
    vector of at most DW_VECTOR_BYTES that divides a row of W elements of `e` bytes (1 when none does)."""
    return next((n // e for n in (8, 4) if n <= DW_VECTOR_BYTES and n >= 2 * e and w % (n // e) == 0), 1)


def dw_row_stride(ops: Sequence[Op], tw: int, e: int) -> int:
    """Elements between staged window rows in dw.cu (`LDX`) for a DW op's tiles `tw` outputs
    wide: the halo row staged as aligned vectors from a column rounded down to the vector width (at
    most VEC - 1 columns more on each side), so any vector width the launch uses fits."""
    vec = dw_vector_elems(ops[0].hw_in[1], e)
    return _rup(_halo("dw", ops, 1, tw)[1] + vec - 1, vec)


def dw_lbl_rows_per_item(tf: int, th: int, tw: int, threads: int) -> int:
    """Output rows one thread item of the layer-by-layer DW kernel covers (the V define of
    dw.cu): 4, 2 or 1, the most that divides th and splits the tile's items evenly over the
    block's threads. The launcher (`launch.py`) and the cost model (`cost.py`) both read it here."""
    return next((v for v in (4, 2) if th % v == 0 and (tf * (th // v) * tw) % threads == 0), 1)


class DwFamily:
    """The `dw` kernel: tiles, shared memory, cost model, launcher and source (see `family.KernelFamily`)."""

    name = "dw"
    kinds = ("dw",)
    fused = False
    uneven = False

    def source(self, kind: str) -> tuple[str, str]:
        return ("dw.cu", "dw_kernel")

    def spatial_sizes(self, kind: str, ho: int, wo: int) -> None:
        return None  # NCHW map tiles (`tiles._grid_sizes`)

    def chunk_sizes(self, tf: int, tcs: Sequence[int]) -> Sequence[int]:
        return (tf,)

    def tile_reason(self, kind: str, tile: Tile) -> str | None:
        if tile.tc != tile.tf:
            return f"dw tile needs tc == tf (got tc={tile.tc}, tf={tile.tf})"
        return None

    def shape_reason(self, kind: str, ops: Sequence[Op]) -> str | None:
        return None

    def smem(self, kind: str, ops: Sequence[Op], th: int, tw: int, tf: int, tc: int, e: int) -> int:
        hh = _halo(kind, ops, th, tw)[0]
        kh, kw = ops[0].kernel
        filters = _rup(tf * kh * kw * ACC_BYTES, 16)  # the window starts 16-byte aligned
        return tf * hh * dw_row_stride(ops, tw, e) * e + filters

    def accumulators(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str, precision: str) -> float:
        return outputs_per_thread(tile)

    def splits(self, kind: str) -> bool:
        return False

    def split_fits(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> bool:
        return False

    def pipeline_depth(self, kind: str, ops: Sequence[Op], tile: Tile, dtype: str) -> int:
        return 1  # single buffered

    def output_rows(self, kind: str, tile: Tile) -> int:
        return dw_lbl_rows_per_item(tile.tf, tile.th, tile.tw, tile.threads)

    def store_key(self, kind: str, tile: Tile) -> int:
        return self.output_rows(kind, tile)

    def cost_model(self, kind: str) -> type:
        from fuseplanner.kernels.families.dw.cost import DwModel

        return DwModel

    def preparer(self, kind: str) -> Callable:
        from fuseplanner.kernels.families.dw.launch import prepare_dw

        return prepare_dw


DW = DwFamily()
