"""The geometry of masked and ragged attention: which key chunks each query tile visits.

A causal or window mask is a band of keys per query (`Band`); a varlen mask with expected
lengths is `Ragged`. From them: the share of the dense work a kernel does when it skips the
chunks no query of a tile sees (`band_fraction`, `ragged_fraction`), and how unevenly that
work falls on the SMs' block slots (`band_imbalance`, `ragged_imbalance`, by the block
scheduler's list scheduling, `block_makespan`).

    >>> band_fraction(256, 256, 64, 64, None, 0)   # causal: tiles see 64, 128, 192, 256 keys
    Fraction(5, 8)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ncdc.language.diagram import Diagram
from ncdc.model.graph import Kernel
from ncdc.model.masks import MaskRule, TileClass, read_mask_rule, rule_band, tile_class_grid
from ncdc.model.values import Plan
from ncdc.units import ceil_div

if TYPE_CHECKING:
    from fractions import Fraction


class Band(NamedTuple):
    """Keys j that query i may see under a kernel's causal and window masks: i + lo <= j
    <= i + hi, None for an unbounded side (the masks' intersection, at the model's sizes)."""

    query: str
    key: str
    lo: int | None
    hi: int | None


def mask_band(kernel: Kernel, sizes: Mapping[str, int]) -> Band | None:
    """The band of the causal and window masks, and of a mask rule's select
    (ncdc.model.masks.rule_band), whose key axis the kernel reduces (the streamed key axis of
    attention) and whose query axis it weaves, else None. A kernel of contractions that
    reduces nothing and weaves both axes (attention's fused backward: dQ over the queries,
    dK and dV over the keys) skips the tile pairs the band leaves too."""
    band = None
    # an axis no op runs over (a packed varlen mask's count of sequences) is not reduced work
    reduced = [a for a in kernel.reduced if any(a in op.axes or a in op.over for op in kernel.ops)]
    both = not reduced and any(op.kind == "contract" for op in kernel.ops)
    for query, key, lo, hi in _bands(kernel, sizes):
        if query not in kernel.woven or not (key in kernel.reduced or both and key in kernel.woven):
            continue
        if band is not None and (band.query, band.key) == (query, key):
            lo = lo if band.lo is None else band.lo if lo is None else max(lo, band.lo)
            hi = hi if band.hi is None else band.hi if hi is None else min(hi, band.hi)
        band = Band(str(query), str(key), lo, hi)
    return band


def _bands(kernel: Kernel, sizes: Mapping[str, int]) -> list[Band]:
    """Each mask's band (its key tiles outside are skipped), in the kernel's order."""
    out = []
    for op in kernel.ops:
        if op.kind != "mask" or op.fn not in ("causal", "window"):
            continue
        query, key = op.params["query"], op.params["key"]
        shift = sizes[key] - sizes[query] if op.params.get("align", "end") == "end" else 0
        lo = shift - op.params["left"] if op.fn == "window" else None
        hi = shift + op.params["right"] if op.fn == "window" else shift
        out.append(Band(query, key, lo, hi))
    rule = read_mask_rule(kernel)
    if rule is not None and rule.query is not None:
        lo, hi = rule_band(rule)
        if lo is not None or hi is not None:
            out.append(Band(rule.query, rule.key, lo, hi))
    return out


class Ragged(NamedTuple):
    """The expected lengths of a kernel's varlen mask (the lengths input's `expected`):
    `rows` holds, per entry of the lengths' batch axes, the lengths of its packed sequences
    (`packed`) or its one padded length; every row covers as many (batch..., head) slices."""

    query: str
    key: str
    packed: bool
    rows: tuple[tuple[int, ...], ...]


def ragged_lengths(diagram: Diagram, kernel: Kernel) -> Ragged | None:
    """The `Ragged` of the kernel's varlen mask when its lengths state expected values."""
    for op in kernel.ops:
        if op.fn != "varlen":
            continue
        t = diagram.tensor(op.params["lengths"])
        if not t.expected:
            return None
        packed = any(a not in op.axes for a in t.axes)
        per = diagram.axes[t.axes[-1]] if packed else 1
        rows = tuple(t.expected[i : i + per] for i in range(0, len(t.expected), per))
        return Ragged(op.params["query"], op.params["key"], packed, rows)
    return None


class Groups(NamedTuple):
    """The runs of rows a kernel's grouped contraction splits its rows axis into: each
    group's rows (the offsets' `expected` values, else an even split) and the rows after
    the last group (0s in the result). A block tile holds rows of one run."""

    rows: str
    counts: tuple[int, ...]
    tail: int

    def tiles(self, g: Any) -> Any:
        """Block tiles of `g` rows the runs take (each run its own, the last one partly
        filled): what a grid over the plain axis takes, plus up to one a group. The tiles
        of the rows after the last run only store (an empty sum): not counted, unless
        they are all there is."""
        if not self.used:
            return ceil_div(max(self.tail, 1), g)
        n: Any = 0
        for c in self.counts:
            n = n + ceil_div(c, g)
        return n

    @property
    def used(self) -> int:
        """Groups with rows: the slices of the weights the kernel reads."""
        return sum(1 for c in self.counts if c)


def grouped_rows(diagram: Diagram, kernel: Kernel) -> Groups | None:
    """The `Groups` of the kernel's grouped contraction, or None without one."""
    op = next((op for op in kernel.ops if op.grouped), None)
    if op is None:
        return None
    rows = op.params["rows"]
    size, ends = diagram.axes[rows], diagram.tensor(op.params["offsets"])
    groups = diagram.axes[op.params["group"]]
    if ends.expected:
        counts = [end - start for start, end in group_spans(ends.expected, size)]
        return Groups(rows, tuple(counts), size - sum(counts))
    even = [size // groups + (1 if e < size % groups else 0) for e in range(groups)]
    return Groups(rows, tuple(even), 0)


def group_spans(ends: Iterable[float], rows: int) -> list[tuple[int, int]]:
    """Each group's rows `[start, end)` as the kernels take them from a grouped
    contraction's offsets: an end below the one before counts as that one (an empty
    group), one past the rows as their end (a run refuses both, naming the entry)."""
    spans, start = [], 0
    for value in ends:
        end = int(min(max(value, start), rows))
        spans.append((start, end))
        start = end
    return spans


def dense_varlen_notes(plan: Plan) -> list[str]:
    """One line per varlen mask priced dense because its lengths state no expected values,
    and per grouped contraction priced as an even split for want of expected offsets."""
    d = plan.graph.diagram
    out = []
    for kp in plan.kernels:
        for op in kp.kernel.ops:
            if op.fn == "varlen" and not d.tensor(op.params["lengths"]).expected:
                name = op.params["lengths"]
                out.append(
                    f"note: {kp.kernel.name}: the lengths {name} are data, priced dense (every "
                    f"key seen, an upper bound); state them for the model: inputs: {{{name}: "
                    f"{{..., expected: [...]}}}}"
                )
            if op.grouped and not d.tensor(op.params["offsets"]).expected:
                name = op.params["offsets"]
                out.append(
                    f"note: {kp.kernel.name}: the offsets {name} are data, priced as an even "
                    f"split of {op.params['rows']} over the {d.axes[op.params['group']]} "
                    f"groups; state them for the model: inputs: {{{name}: {{..., expected: "
                    "[...]}}"
                )
    return out


@functools.lru_cache(maxsize=1024)
def ragged_spans(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    lengths: tuple[int, ...], packed: bool,
) -> tuple[tuple[int, int], ...]:  # fmt: skip
    """The first and last key chunk each query tile visits under the band and a varlen
    mask of `lengths` (`Visible` in ncdc_attention.cuh): packed, query i sees the keys of its
    own sequence (none past the last); padded (one length), the keys below it. (0, -1) for a
    tile that sees no key.

        >>> # causal, packed: sequences [0, 100), none, [100, 101), [101, 201); tile 3's
        >>> # first query (192) is in the last sequence, its last (255) past it
        >>> ragged_spans(256, 256, 64, 64, None, 0, (100, 0, 1, 100), True)
        ((0, 0), (0, 1), (1, 2), (1, 3))
        >>> ragged_spans(256, 256, 64, 64, None, None, (70,), False)  # padded: 70 keys
        ((0, 1), (0, 1), (0, 1), (0, 1))
    """
    starts = [0]
    for n in lengths:
        starts.append(starts[-1] + max(n, 0))
    total = starts[-1]
    x_end = keys if packed else min(keys, max(0, lengths[0]))

    def sequence(i: int) -> tuple[int, int]:
        for s in range(len(lengths)):
            if starts[s] <= i < starts[s + 1]:
                return starts[s], starts[s + 1]
        return total, total

    out = []
    for t in range(ceil_div(queries, g_q)):
        a, b = t * g_q, min((t + 1) * g_q, queries) - 1
        first = -keys if lo is None else a + lo
        last = 2 * keys if hi is None else b + hi
        if packed:
            first = max(first, sequence(a)[0])
            last = min(last, sequence(b)[1] - 1)
        first, last = min(max(first, 0), x_end), max(min(last, x_end - 1), -1)
        out.append((0, -1) if last < first else (first // s_x, last // s_x))
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def ragged_fraction(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    rows: tuple[tuple[int, ...], ...], packed: bool,
) -> float:  # fmt: skip
    """`band_fraction` under a varlen mask of expected lengths: the keys the tiles of each
    row load (whole chunks, the last one cut at the key axis), over tiles x keys, averaged
    over the rows.

        >>> # (64 + 128 + 128 + 192) / (4 x 256)
        >>> ragged_fraction(256, 256, 64, 64, None, 0, ((100, 0, 1, 100),), True)
        0.5
    """
    tiles = ceil_div(queries, g_q)
    loaded = 0
    for lengths in rows:
        for c0, c1 in ragged_spans(queries, keys, g_q, s_x, lo, hi, lengths, packed):
            if c1 >= c0:
                loaded += min(keys, (c1 + 1) * s_x) - c0 * s_x
    return loaded / (tiles * keys * len(rows))


@functools.lru_cache(maxsize=256)
def ragged_imbalance(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    rows: tuple[tuple[int, ...], ...], packed: bool, batches: int, slots: int,
) -> float:  # fmt: skip
    """The busiest block slot's work over the mean slot's under a varlen mask of expected
    lengths (`band_imbalance` over `ragged_spans`): the blocks of each row's slices in
    launch order, query tile fastest (the longest first under a causal or window mask, as
    ncdc launches them), list-scheduled onto `slots`.

        >>> # one head, tiles of 1, 2, 2, 3 chunks launched 3, 2, 2, 1 on 2 slots: 3 + 1, 2 + 2
        >>> ragged_imbalance(256, 256, 64, 64, None, 0, ((100, 0, 1, 100),), True, 1, 2)
        1.0
        >>> # on 4 slots: the busiest does 3 chunks, the mean 2
        >>> ragged_imbalance(256, 256, 64, 64, None, 0, ((100, 0, 1, 100),), True, 1, 4)
        1.5
    """
    per_row = max(1, batches // len(rows))
    copies = min(per_row, max(1, 4096 // max(len(rows) * ceil_div(queries, g_q), 1)))
    order = []
    for lengths in rows:
        spans = list(ragged_spans(queries, keys, g_q, s_x, lo, hi, lengths, packed))
        if hi is not None:
            spans.reverse()
        order += [max(0, c1 - c0 + 1) for c0, c1 in spans] * copies
    total = sum(order)
    if not total:
        return 1.0
    return max(1.0, block_makespan(order, slots) * min(slots, len(order)) / total)


def band_tiles(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None
) -> tuple[tuple[int, int], ...]:
    """(key chunks, keys loaded) of each query tile under the band i + lo <= j <= i + hi:
    tile t (queries t g_q .. its last, clipped to the axis) loads the chunks of s_x keys from
    the one holding its first query's first key to the one holding its last query's last
    key, as the kernel does (`Visible` in ncdc_attention.cuh); the last chunk stops at the
    key axis's end.

        >>> band_tiles(256, 256, 64, 64, None, 0)     # causal: 1, 2, 3, 4 chunks
        ((1, 64), (2, 128), (3, 192), (4, 256))
        >>> band_tiles(256, 256, 64, 64, -63, 0)      # a window of 64 keys: 1 or 2 chunks
        ((1, 64), (2, 128), (2, 128), (2, 128))
    """
    out = []
    for t in range(ceil_div(queries, g_q)):
        a, b = t * g_q, min((t + 1) * g_q, queries) - 1
        first = 0 if lo is None else min(max(a + lo, 0), keys)
        last = keys - 1 if hi is None else max(min(b + hi, keys - 1), -1)
        if last < first:
            out.append((0, 0))
            continue
        c0, c1 = first // s_x, last // s_x
        out.append((c1 - c0 + 1, min(keys, (c1 + 1) * s_x) - c0 * s_x))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def band_fraction(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None
) -> Fraction:
    """Share of the dense (query tile, key) work a kernel does under the band i + lo <= j
    <= i + hi when it skips the key chunks no query of a tile sees (`band_tiles`): the
    keys loaded summed over the tiles, over tiles x keys. A sliding window's share falls
    as the keys grow: its work grows with the window, not with the keys.

        >>> band_fraction(256, 256, 64, 64, -63, 0)
        Fraction(7, 16)
        >>> round(float(band_fraction(32768, 32768, 128, 64, -4095, 0)), 4)  # Mistral's
        0.1208
    """
    from fractions import Fraction  # only masked kernels need it: not on every start-up

    tiles = band_tiles(queries, keys, g_q, s_x, lo, hi)
    return Fraction(sum(n for _, n in tiles), len(tiles) * keys)


@functools.lru_cache(maxsize=64)  # a search asks for the same tiles again
def rule_fraction(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None, rule: MaskRule
) -> Fraction:
    """`band_fraction` for a kernel that also skips the key chunks inside the band that a
    mask rule drops for every query of the tile (`tile_class` MASKED: the Hopper attention
    kernel's tile classes). StreamingLLM's 4 sinks and 1020-key window leave the chunks
    between them:

        >>> from ncdc.model.masks import Call, Const, Pos
        >>> i, j = Pos("q"), Pos("x")
        >>> near = Call("gt", (j, Call("sub", (i, Const(1020)))))
        >>> keep = Call("and", (Call("le", (j, i)), Call("or", (near, Call("lt", (j, Const(4)))))))
        >>> rule = MaskRule("q", "x", keep)
        >>> float(band_fraction(8192, 8192, 128, 128, None, 0))
        0.5078125
        >>> float(rule_fraction(8192, 8192, 128, 128, None, 0, rule))
        0.145263671875
    """
    from fractions import Fraction

    import numpy as np

    spans = band_spans(queries, keys, g_q, s_x, lo, hi)
    first, last = np.array(spans).T[:, :, None]
    chunk = np.arange(ceil_div(keys, s_x))
    width = np.minimum((chunk + 1) * s_x, keys) - chunk * s_x
    kept = _rule_grid(rule, queries, keys, g_q, s_x) != TileClass.MASKED
    seen = (chunk >= first) & (chunk <= last) & kept
    total = int((seen * width).sum())
    return Fraction(total, len(spans) * keys)


def _rule_grid(rule: MaskRule, queries: int, keys: int, g_q: int, s_x: int) -> Any:
    """The rule's class of every tile of g_q queries by s_x keys (`tile_class_grid`)."""
    import numpy as np

    def spans(n: int, size: int) -> Any:
        first = np.arange(0, n, size)
        return np.stack([first, np.minimum(first + size, n) - 1], axis=1)

    return tile_class_grid(rule, spans(queries, g_q), spans(keys, s_x))


def tile_kinds(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    rule: MaskRule | None = None,
) -> tuple[int, int]:  # fmt: skip
    """(key tiles visited, of them masked) by the Hopper attention kernel over every query
    tile (ncdc_attention_hopper.cuh, `key_tiles` and `tile_kind`): a tile some row of the
    block does not see whole under the band i + lo <= j <= i + hi, or one a mask rule may
    drop a pair of (`tile_class` PARTIAL), runs masked; one the rule drops whole is not
    visited.

        >>> tile_kinds(256, 256, 128, 64, None, 0)   # causal: the diagonal's 2 a block
        (6, 4)
        >>> tile_kinds(256, 256, 128, 64, -63, 0)    # a window of 64 keys: 3 each, masked
        (5, 5)
    """
    import numpy as np

    def clamp(v: Any, a: int, b: int) -> Any:
        return np.maximum(a, np.minimum(b, v))

    a = np.arange(0, queries, g_q)[:, None]
    b = np.minimum(a + g_q, queries) - 1
    top_first = 0 * a if lo is None else clamp(a + lo, 0, keys)
    bottom_first = 0 * a if lo is None else clamp(b + lo, 0, keys)
    top_last = keys - 1 + 0 * a if hi is None else clamp(a + hi, -1, keys - 1)
    bottom_last = keys - 1 + 0 * a if hi is None else clamp(b + hi, -1, keys - 1)
    c0, c1 = top_first // s_x, bottom_last // s_x
    clear0 = np.minimum(c1 + 1, np.maximum(c0, -(-bottom_first // s_x)))
    clear1 = np.maximum(clear0, np.minimum(c1 + 1, (top_last + 1) // s_x))
    chunk = np.arange(ceil_div(keys, s_x))[None, :]
    classes = TileClass.KEPT if rule is None else _rule_grid(rule, queries, keys, g_q, s_x)
    seen = (bottom_last >= top_first) & (chunk >= c0) & (chunk <= c1)
    seen &= classes != TileClass.MASKED
    edge = (chunk < clear0) | (chunk >= clear1) | (classes != TileClass.KEPT)
    visited, masked = int(seen.sum()), int((seen & edge).sum())
    return visited, masked


def causal_fraction(queries: int, keys: int, g_q: int, s_x: int) -> Fraction:
    """Share of the dense (query tile, key) work a causal kernel does when it skips the key
    chunks that every query of a tile masks.

    Key j is masked for query i when j > i + (keys - queries) (the diagonal aligned at the
    end). Query tile t (g_q queries, the last one clipped to the axis) sees keys up to
    `last` = its last query + keys - queries, so it visits chunks 0 .. last // s_x of s_x
    keys (none if last < 0) and loads min(keys, chunks x s_x) keys. The result is those
    keys summed over the tiles, over tiles x keys (1 when nothing is skipped).

        >>> causal_fraction(256, 256, 64, 64)   # tiles see 64, 128, 192, 256 of 4 x 256
        Fraction(5, 8)
        >>> causal_fraction(1, 4096, 16, 64)    # one decode query sees every key
        Fraction(1, 1)
    """
    return band_fraction(queries, keys, g_q, s_x, None, keys - queries)


def block_makespan(works: list[int], slots: int) -> int:
    """Work units the busiest of `slots` block slots does when blocks of `works`, taken in
    launch order, each go to the slot that frees first (the block scheduler's greedy list
    scheduling). Equal blocks give ceil(len / slots) x work; unequal ones (the query tiles
    of a causal kernel) a tail longer than the mean.

        >>> block_makespan([4, 3, 2, 1], 2)   # slots do 4 + 1 and 3 + 2
        5
        >>> block_makespan([1, 2, 3, 4], 2)   # 1 + 3 and 2 + 4: the longest block last
        6
    """
    import heapq

    free = [0] * max(1, min(slots, len(works)))
    for w in works:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


def causal_imbalance(
    queries: int, keys: int, g_q: int, s_x: int, batches: int, slots: int, longest_first: bool
) -> float:
    """The busiest block slot's causal work over the mean slot's: query tile t visits its
    own number of key chunks (`causal_fraction`), the blocks of each (batch, head) launched
    query tile fastest (ncdc launches the longest first). 1 when the tiles balance.

        >>> round(causal_imbalance(4096, 4096, 128, 64, 1, 108, True), 3)   # 32 tiles, 1 head
        1.939
        >>> round(causal_imbalance(4096, 4096, 128, 64, 32, 108, True), 3)  # 32 heads, A100
        1.112
    """
    return band_imbalance(queries, keys, g_q, s_x, None, keys - queries, batches, slots,
                          longest_first)  # fmt: skip


@functools.lru_cache(maxsize=256)
def band_imbalance(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None,
    batches: int, slots: int, longest_first: bool, split_chunks: int = 0,
) -> float:  # fmt: skip
    """`causal_imbalance` under the band i + lo <= j <= i + hi (`band_tiles`). With
    `split_chunks`, the keys are split across blocks in ranges of that many chunks (grid z,
    outermost): block (tile, split) visits the chunks of its tile in its range.

        >>> # 4 tiles x 8 splits of 8 chunks; tile 0's last split has 5 of them (to key 3903)
        >>> round(band_imbalance(256, 4096, 64, 64, None, 3840, 1, 132, True, 8), 3)
        1.024
        >>> # 8 tiles x 4 splits of 2: the busiest block does 2 chunks, the mean 36 / 32
        >>> round(band_imbalance(512, 512, 64, 64, None, 0, 1, 132, True, 2), 3)
        1.778
    """
    spans = band_spans(queries, keys, g_q, s_x, lo, hi)
    if longest_first:
        spans.reverse()
    chunks = max(1, ceil_div(keys, s_x))
    per = split_chunks or chunks
    splits = ceil_div(chunks, per)
    works = [
        [max(0, min(c1, (z + 1) * per - 1) - max(c0, z * per) + 1) for c0, c1 in spans]
        for z in range(splits)
    ]
    total = sum(map(sum, works))
    if not total:
        return 1.0
    # past a few thousand blocks the tail is a small share: simulate one slice of the batch
    copies = min(batches, max(1, 4096 // max(len(spans) * splits, 1)))
    order = [w for split in works for w in split * copies]
    busiest = block_makespan(order, slots)
    return max(1.0, busiest * min(slots, len(order)) / (total * copies))


def band_spans(
    queries: int, keys: int, g_q: int, s_x: int, lo: int | None, hi: int | None
) -> list[tuple[int, int]]:
    """The first and last key chunk each query tile visits (`band_tiles`); (0, -1) for one
    that sees no key.

        >>> band_spans(256, 256, 64, 64, -63, 0)
        [(0, 0), (0, 1), (1, 2), (2, 3)]
    """
    out = []
    for t in range(ceil_div(queries, g_q)):
        a, b = t * g_q, min((t + 1) * g_q, queries) - 1
        first = 0 if lo is None else min(max(a + lo, 0), keys)
        last = keys - 1 if hi is None else max(min(b + hi, keys - 1), -1)
        out.append((0, -1) if last < first else (first // s_x, last // s_x))
    return out
