"""The CPU backend: hand-written kernels in tests/emulator_kernels/ run under the emulator and
are checked against NumPy and against the PTX ISA's documented layouts."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ncdc.backends import cpu
from ncdc.errors import CheckFailed, CompileError, NcdcError
from tests import support

KERNELS = support.EMULATOR_KERNELS
HAS_ASAN = shutil.which("g++") is not None


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("emu-cache")


@pytest.fixture(scope="session")
def basics(cache: Path) -> cpu.EmulatedModule:
    return cpu.build(KERNELS / "basics.cu", cache_dir=cache)


@pytest.fixture(scope="session")
def memory(cache: Path) -> cpu.EmulatedModule:
    return cpu.build(KERNELS / "memory.cu", cache_dir=cache)


@pytest.fixture(scope="session")
def mma(cache: Path) -> cpu.EmulatedModule:
    return cpu.build(KERNELS / "mma.cu", cache_dir=cache)


# ---- reference conversions, written independently of the emulator ------------------------


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), r)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def fp8_table(exp_bits: int, bias: int, has_inf: bool) -> np.ndarray:
    """The value of every fp8 code 0..255 (IEEE-like, or e4m3's "only S.1111.111 is NaN")."""
    man_bits = 7 - exp_bits
    vals = np.empty(256)
    for c in range(256):
        e, m = (c >> man_bits) & ((1 << exp_bits) - 1), c & ((1 << man_bits) - 1)
        if has_inf and e == (1 << exp_bits) - 1:
            v = np.inf if m == 0 else np.nan
        elif not has_inf and e == (1 << exp_bits) - 1 and m == (1 << man_bits) - 1:
            v = np.nan
        elif e == 0:
            v = m / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
        vals[c] = -v if c & 0x80 else v
    return vals


E4M3 = fp8_table(4, 7, has_inf=False)
E5M2 = fp8_table(5, 15, has_inf=True)


def to_fp8_bits(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Round to nearest, ties to the even code, saturating to the largest finite value."""
    pos = table[:128]
    finite = np.isfinite(pos)
    mags, codes = pos[finite], np.arange(128)[finite]
    out = np.empty(x.shape, np.uint8)
    for i, v in enumerate(x.astype(np.float64)):
        if np.isnan(v):
            out[i] = 0x7F
            continue
        a = min(abs(v), mags.max())
        d = np.abs(mags - a)
        best = codes[d == d.min()]
        code = best[0] if len(best) == 1 else best[best % 2 == 0][0]
        out[i] = code | (0x80 if np.signbit(v) else 0)
    return out


# ---- barriers, warp collectives, atomics, traffic ------------------------------------------


def test_barrier_orders_shared_memory(basics: cpu.EmulatedModule) -> None:
    x = np.arange(3 * 256, dtype=np.int32)
    y = np.zeros_like(x)
    basics.launch("barrier_mirror", 3, 256, [x, y])
    expected = np.roll(x.reshape(3, 256)[:, ::-1] * 3 + 1, -1, axis=1)
    np.testing.assert_array_equal(y.reshape(3, 256), expected)


def test_shuffles_ballot_any_all(basics: cpu.EmulatedModule) -> None:
    out = np.zeros(2 * 8 * 32, np.int32)
    fout = np.zeros(64, np.float32)
    ballots = np.zeros(64 + 8, np.uint32)
    basics.launch("shuffles", 1, 64, [out, fout, ballots])
    lane = np.arange(32)
    seg = lane & ~7
    for warp in range(2):
        v = lane * 10 + warp * 1000
        rows = out.reshape(2, 8, 32)[warp]
        np.testing.assert_array_equal(rows[0], v[(lane * 7 + 3) % 32])
        np.testing.assert_array_equal(rows[1], v[lane ^ 5])
        np.testing.assert_array_equal(rows[2], v[np.where(lane + 3 < 32, lane + 3, lane)])
        np.testing.assert_array_equal(rows[3], v[np.where(lane >= 3, lane - 3, lane)])
        np.testing.assert_array_equal(rows[4], v[seg + 2])
        xor9 = lane ^ 9
        np.testing.assert_array_equal(rows[5], v[np.where(xor9 >= seg + 8, lane, xor9)])
        np.testing.assert_array_equal(rows[6], v[np.where(lane + 3 >= seg + 8, lane, lane + 3)])
        np.testing.assert_array_equal(rows[7], v[np.where(lane - 3 < seg, lane, lane - 3)])
        np.testing.assert_array_equal(fout[warp * 32 : warp * 32 + 32], 512.0)
        np.testing.assert_array_equal(ballots[warp * 32 : warp * 32 + 32], (31 - lane) * 3)
        b, any_, all_, all2 = ballots[64 + warp * 4 : 68 + warp * 4]
        assert b == sum(1 << i for i in range(0, 32, 3))
        assert (any_, all_, all2) == (1, 0, 1)


def test_copy_traffic_is_exact(basics: cpu.EmulatedModule) -> None:
    n = 1000
    src = np.arange(n, dtype=np.float32)
    dst = np.zeros_like(src)
    t = basics.launch("copy_f32", 3, 128, [src, dst, np.int32(n)])
    np.testing.assert_array_equal(dst, src)
    assert t == cpu.Traffic(4 * n, 4 * n)
    dst[:] = 0
    t = basics.launch("copy_v16", (n // 4 + 63) // 64, 64, [src, dst, n])
    np.testing.assert_array_equal(dst, src)
    assert t == cpu.Traffic(4 * n, 4 * n)


def test_atomics_from_many_blocks(basics: cpu.EmulatedModule) -> None:
    blocks, threads = 16, 128
    n = blocks * threads
    vals = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    fsum, isum = np.zeros(1, np.float32), np.zeros(1, np.int32)
    usum, imax = np.zeros(1, np.uint32), np.full(1, -1, np.int32)
    fmax, fmin_neg = np.full(1, -np.inf, np.float32), np.full(1, -np.inf, np.float32)
    t = basics.launch("atomics", blocks, threads, [vals, fsum, isum, usum, imax, fmax, fmin_neg])
    assert fsum[0] == n and isum[0] == n * (n - 1) // 2 and usum[0] == 2 * n
    assert imax[0] == (np.arange(n) * 7 % 1001).max()
    assert fmax[0] == vals.max() and fmin_neg[0] == np.float32(-1000.0) - vals.min()
    # one 4-byte load per thread, plus 6 global atomics each reading and writing 4 bytes
    assert t == cpu.Traffic(4 * n + 6 * 4 * n, 6 * 4 * n)


def test_dynamic_shared_memory(basics: cpu.EmulatedModule) -> None:
    x = np.random.default_rng(2).standard_normal(4 * 96).astype(np.float32)
    y = np.zeros_like(x)
    basics.launch("dyn_reverse", 4, 96, [x, y], dynamic_smem=96 * 4)
    np.testing.assert_array_equal(y.reshape(4, 96), x.reshape(4, 96)[:, ::-1])


def test_scalars_by_value(basics: cpu.EmulatedModule) -> None:
    out = np.zeros(5, np.float64)
    basics.launch("scalars", 1, 1, [out, np.int32(-7), 2**40, np.float32(1.5), 0.25, np.uint8(200)])
    np.testing.assert_array_equal(out, [-7, 2**40, 1.5, 0.25, 200])


def test_argument_errors(basics: cpu.EmulatedModule) -> None:
    out = np.zeros(5, np.float64)
    with pytest.raises(NcdcError, match="takes 6 arguments"):
        basics.launch("scalars", 1, 1, [out])
    with pytest.raises(NcdcError, match="is int32, got a NumPy int64"):
        basics.launch("scalars", 1, 1, [out, np.int64(1), 1, 1.0, 1.0, 1])
    with pytest.raises(NcdcError, match="C-contiguous"):
        basics.launch("copy_f32", 1, 32, [np.zeros((4, 4), np.float32)[:, 0], out, 4])
    with pytest.raises(NcdcError, match="no kernel 'nope'"):
        basics.launch("nope", 1, 1, [])


def test_deadlock_on_exited_thread(basics: cpu.EmulatedModule) -> None:
    with pytest.raises(NcdcError) as e:
        basics.launch("early_exit_then_barrier", 2, 64, [np.zeros(64, np.int32)])
    msg = str(e.value)
    assert "deadlock in kernel early_exit_then_barrier block" in msg
    assert "waits at __syncthreads but thread (3,0,0) has exited" in msg


def test_deadlock_on_diverged_warp(basics: cpu.EmulatedModule) -> None:
    with pytest.raises(NcdcError, match=r"block \(0,0,0\).*warp collective but lane 16"):
        basics.launch("diverged_shuffle", 1, 32, [np.zeros(32, np.int32)])


# ---- cp.async and conversions -------------------------------------------------------------


def test_cp_async_groups_and_zfill(memory: cpu.EmulatedModule) -> None:
    src = np.arange(3 * 32 * 4, dtype=np.float32) + 1
    out = np.zeros((7, 32, 4), np.float32)
    t = memory.launch("cp_async_groups", 1, 32, [src, out])
    chunks = src.reshape(3, 32, 4)
    np.testing.assert_array_equal(out[0:2], chunks[0:2])  # wait<1>: two oldest groups landed
    np.testing.assert_array_equal(out[2], -1.0)  # the newest group is still pending
    np.testing.assert_array_equal(out[3:6], chunks)  # wait<0>: everything landed
    nbytes = np.arange(32) % 17
    got, want = out[6].view(np.uint8), chunks[0].view(np.uint8)  # 32 rows of 16 bytes
    for t_ in range(32):
        np.testing.assert_array_equal(got[t_, : nbytes[t_]], want[t_, : nbytes[t_]])
        np.testing.assert_array_equal(got[t_, nbytes[t_] :], 0)
    assert t.bytes_read == 3 * 32 * 16 + int(nbytes.sum())


EDGE = np.array(
    [0.0, -0.0, 1.0, -1.5, 448.0, 449.0, 464.0, 465.0, 1e6, -1e6, 57344.0, 61439.0, 61440.0,
     65504.0, 65519.0, 65520.0, 3.3895314e38, 2.0**-6, 2.0**-9, 2.0**-10, 1.5 * 2.0**-10,
     2.0**-14, 2.0**-16, 2.0**-17, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-133, 2.0**-134,
     1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1.0625, 1.1875, 0.3,
     np.inf, -np.inf, np.nan, -np.nan],
    dtype=np.float32,
)  # fmt: skip


def test_conversions_at_edge_values(memory: cpu.EmulatedModule) -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([EDGE, (rng.standard_normal(200) * 10.0 ** rng.integers(-8, 6, 200))])
    x = x.astype(np.float32)
    n = len(x)
    bf, h = np.zeros(n, np.uint16), np.zeros(n, np.uint16)
    e4, e5 = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    back = np.zeros((n, 4), np.float32)
    memory.launch("convert", (n + 63) // 64, 64, [x, bf, h, e4, e5, back, np.int32(n)])
    nan = np.isnan(x)
    np.testing.assert_array_equal(bf[~nan], to_bf16_bits(x)[~nan])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(h[~nan], x.astype(np.float16).view(np.uint16)[~nan])
    np.testing.assert_array_equal(e4[~nan], to_fp8_bits(x[~nan], E4M3))
    np.testing.assert_array_equal(e5[~nan], to_fp8_bits(x[~nan], E5M2))
    assert np.isnan(back[nan]).all()
    np.testing.assert_array_equal(back[~nan, 0], bf16_value(bf[~nan]))
    np.testing.assert_array_equal(back[~nan, 1], h[~nan].view(np.float16).astype(np.float32))
    np.testing.assert_array_equal(back[~nan, 2], E4M3[e4[~nan]].astype(np.float32))
    np.testing.assert_array_equal(back[~nan, 3], E5M2[e5[~nan]].astype(np.float32))
    # known bit patterns: saturation, the largest finite values, ties to even
    lookup = {float(v): i for i, v in enumerate(x[: len(EDGE)]) if not np.isnan(v)}
    assert e4[lookup[1e6]] == 0x7E and e4[lookup[-1e6]] == 0xFE and e4[lookup[np.inf]] == 0x7E
    assert e5[lookup[1e6]] == 0x7B and e5[lookup[np.inf]] == 0x7B
    assert e4[lookup[464.0]] == 0x7E and e4[lookup[2.0**-10]] == 0x00 and e4[lookup[2.0**-9]] == 1
    assert e4[lookup[1.0625]] == 0x38 and e4[lookup[1.1875]] == 0x3A  # ties to even mantissa
    assert h[lookup[65520.0]] == 0x7C00 and h[lookup[65519.0]] == 0x7BFF
    assert bf[lookup[1 + 2.0**-8]] == 0x3F80 and bf[lookup[1 + 3 * 2.0**-8]] == 0x3F82


# ---- tensor-core fragments ------------------------------------------------------------------


def ldmatrix_expected(mats: np.ndarray, nmat: int, trans: bool) -> np.ndarray:
    """The PTX table: lane l gets, per matrix j, row l/4 columns 2(l%4), +1 (trans: transposed)."""
    out = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        r, c = lane // 4, 2 * (lane % 4)
        for j in range(nmat):
            m = mats[j].T if trans else mats[j]
            out[lane, j] = int(m[r, c]) | int(m[r, c + 1]) << 16
    return out


def test_ldmatrix_layouts(mma: cpu.EmulatedModule) -> None:
    mats = np.arange(256, dtype=np.uint16).reshape(4, 8, 8) * 3 + 1
    out = np.zeros((6, 32, 4), np.uint32)
    mma.launch("ldmatrix_layouts", 1, 32, [mats, out])
    for v, (nmat, trans) in enumerate([(1, 0), (2, 0), (4, 0), (1, 1), (2, 1), (4, 1)]):
        np.testing.assert_array_equal(out[v], ldmatrix_expected(mats, nmat, bool(trans)), f"{v}")


def _random_bits(kind: str, shape: tuple[int, int], rng: np.random.Generator):
    """Random inputs as (storage bits, exact float64 values)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == "bf16":
        bits = to_bf16_bits(x)
        return bits, bf16_value(bits).astype(np.float64)
    if kind == "f16":
        h = x.astype(np.float16)
        return h.view(np.uint16), h.astype(np.float64)
    if kind == "tf32":
        bits = x.view(np.uint32) & np.uint32(0xFFFFE000)
        return bits, bits.view(np.float32).astype(np.float64)
    table = E4M3 if kind == "e4m3" else E5M2
    bits = to_fp8_bits((x * 8).ravel(), table).reshape(shape)
    return bits, table[bits]


@pytest.mark.parametrize(
    ("kernel", "kind", "k"),
    [
        ("mma_k16_bf16", "bf16", 16),
        ("mma_k16_f16", "f16", 16),
        ("mma_k8_bf16", "bf16", 8),
        ("mma_k8_tf32", "tf32", 8),
        ("mma_k32_e4m3", "e4m3", 32),
        ("mma_k32_e5m2", "e5m2", 32),
    ],
)
def test_mma_against_numpy(mma: cpu.EmulatedModule, kernel: str, kind: str, k: int) -> None:
    rng = np.random.default_rng(k)
    a_bits, a = _random_bits(kind, (16, k), rng)
    b_bits, b = _random_bits(kind, (k, 8), rng)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d = np.zeros((16, 8), np.float32)
    mma.launch(kernel, 1, 32, [a_bits, b_bits, c, d])
    ref = a @ b + c
    np.testing.assert_allclose(d, ref, rtol=1e-5, atol=1e-4 * np.abs(a).max() * np.abs(b).max())


def test_mma_with_ldmatrix_fragments(mma: cpu.EmulatedModule) -> None:
    rng = np.random.default_rng(7)
    a_bits, a = _random_bits("bf16", (16, 16), rng)
    b_bits, b = _random_bits("bf16", (16, 8), rng)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    d, d2 = np.zeros((16, 8), np.float32), np.zeros((16, 8), np.float32)
    mma.launch("mma_k16_bf16_ldmatrix", 1, 32, [a_bits, b_bits.T.copy(), b_bits, c, d, d2])
    np.testing.assert_allclose(d, a @ b + c, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(d, d2)


def test_gemm_pipeline(cache: Path) -> None:
    gemm = cpu.build(KERNELS / "gemm_bf16.cu", cache_dir=cache)
    m, n, k = 128, 192, 96
    rng = np.random.default_rng(11)
    a_bits, a = _random_bits("bf16", (m, k), rng)
    b_bits, b = _random_bits("bf16", (k, n), rng)
    c = np.zeros((m, n), np.float32)
    t = gemm.launch("gemm_bf16", (n // 64, m // 64), 128, [a_bits, b_bits, c, m, n, k])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-3)
    blocks = (m // 64) * (n // 64)
    assert t == cpu.Traffic(blocks * (64 * k + k * 64) * 2, m * n * 4)


# ---- building --------------------------------------------------------------------------------


def test_build_is_cached(cache: Path) -> None:
    src = '#include "ncdc_runtime.cuh"\nextern "C" __global__ void k(int* x) { x[0] = V; }\n'
    src += "NCDC_EXPORT_KERNEL(k);\n"
    first = cpu.build(src, cache_dir=cache, defines={"V": 1}).library
    stamp = first.stat().st_mtime_ns
    again = cpu.build(src, cache_dir=cache, defines={"V": 1}).library
    assert again == first and again.stat().st_mtime_ns == stamp
    other = cpu.build(src, cache_dir=cache, defines={"V": 2})
    assert other.library != first
    x = np.zeros(1, np.int32)
    other.launch("k", 1, 1, [x])
    assert x[0] == 2


def test_compile_error_is_one_line(cache: Path) -> None:
    src = '#include "ncdc_runtime.cuh"\nextern "C" __global__ void k(int* x) {\n  x[0] = nope;\n}\n'
    with pytest.raises(CompileError) as e:
        cpu.build(src, cache_dir=cache)
    line = e.value.line()
    assert "\n" not in line and ".cu:3:" in line and "nope" in line
    assert e.value.exit_code == 3


def test_missing_compiler(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setattr(cpu.shutil, "which", lambda name: None)
    with pytest.raises(CompileError, match="no C\\+\\+ compiler"):
        cpu.build(KERNELS / "basics.cu", cache_dir=cache)


# ---- sanitizers ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def asan(cache: Path) -> cpu.EmulatedModule:
    try:
        cpu._asan_runtime()
    except NcdcError:
        pytest.skip("no AddressSanitizer runtime")
    return cpu.build(KERNELS / "asan.cu", sanitize="address", cache_dir=cache)


def test_asan_clean_run(asan: cpu.EmulatedModule) -> None:
    x = np.arange(100, dtype=np.float32)
    t = asan.launch("in_bounds", 2, 64, [x, np.int32(100)])
    np.testing.assert_array_equal(x, np.arange(100) * 2.0)
    assert t == cpu.Traffic(400, 400)


def test_asan_catches_global_overflow(asan: cpu.EmulatedModule) -> None:
    with pytest.raises(CheckFailed) as e:
        asan.launch("oob_global", 2, 64, [np.zeros(100, np.float32), np.int32(100)])
    msg = str(e.value)
    assert "heap-buffer-overflow: WRITE of size 4" in msg
    assert "kernel oob_global block (1,0,0) thread (5,0,0)" in msg


def test_asan_catches_shared_overflow(asan: cpu.EmulatedModule) -> None:
    with pytest.raises(CheckFailed) as e:
        asan.launch("oob_shared", 1, 32, [np.zeros(32, np.float32)])
    msg = str(e.value)
    assert "global-buffer-overflow: WRITE of size 4" in msg
    assert "kernel oob_shared block (0,0,0) thread (31,0,0)" in msg


@pytest.fixture(scope="session")
def tsan(cache: Path) -> cpu.EmulatedModule:
    try:
        cpu.sanitizer_runtime("race")
    except NcdcError:
        pytest.skip("no ThreadSanitizer runtime")
    return cpu.build(KERNELS / "race.cu", sanitize="race", cache_dir=cache)


@pytest.mark.parametrize(
    ("kernel", "racing"),
    [
        # thread 0 reads slot 1 before thread 1 writes it: read-after-write, no barrier
        ("neighbour_no_barrier", "thread (1,0,0) wrote 4 bytes that thread (0,0,0) read"),
        # thread 0 overwrites slot 0 that thread 63 read in the phase before: write-after-read
        ("reuse_no_barrier", "thread (0,0,0) wrote 4 bytes that thread (63,0,0) read"),
        # the last thread to reach a barrier runs on first: thread 63 reads slot 0, then
        # thread 0 issues a cp.async into slot 0, which may land at once
        ("refill_no_barrier", "thread (0,0,0) wrote 1 byte that thread (63,0,0) read"),
    ],
)
def test_race_missing_barrier_is_reported(
    tsan: cpu.EmulatedModule, kernel: str, racing: str
) -> None:
    out = np.zeros(64, np.float32)
    args = [np.arange(128, dtype=np.float32), out] if kernel.startswith("refill") else [out]
    with pytest.raises(CheckFailed) as e:
        tsan.launch(kernel, 1, 64, args)
    msg = str(e.value)
    assert msg.startswith(f"ThreadSanitizer: data race in kernel {kernel} block (0,0,0): ")
    assert racing in msg and "with no barrier between" in msg


def test_race_barriers_and_warp_sync_are_clean(tsan: cpu.EmulatedModule) -> None:
    out = np.zeros(128, np.float32)
    tsan.launch("neighbour_barrier", 2, 64, [out])
    np.testing.assert_array_equal(out, np.tile((np.arange(64) + 1) % 64, 2))
    tsan.launch("reuse_barrier", 1, 64, [out])
    np.testing.assert_array_equal(out[:64], 2.0 * ((np.arange(64) + 2) % 64))
    x = np.arange(256, dtype=np.float32)
    tsan.launch("refill_barrier", 1, 64, [x, out])
    t = np.arange(64)
    np.testing.assert_array_equal(out[:64], (t + 1) % 64 + 64 + (t + 1) % 64)
    sums = np.zeros(2, np.float32)
    tsan.launch("block_sum", 2, 128, [x, sums, np.int32(256)])
    np.testing.assert_array_equal(sums, [x[:128].sum(), x[128:].sum()])
    tsan.launch("warp_broadcast", 1, 128, [out])
    np.testing.assert_array_equal(out, np.repeat([1.0, 2.0, 3.0, 4.0], 32))


def test_race_gemm_pipeline_is_clean(tsan: cpu.EmulatedModule, cache: Path) -> None:
    """cp.async double buffering, ldmatrix and mma.sync with every barrier in place."""
    gemm = cpu.build(KERNELS / "gemm_bf16.cu", sanitize="race", cache_dir=cache)
    m, n, k = 64, 64, 64
    rng = np.random.default_rng(3)
    a_bits, a = _random_bits("bf16", (m, k), rng)
    b_bits, b = _random_bits("bf16", (k, n), rng)
    c = np.zeros((m, n), np.float32)
    gemm.launch("gemm_bf16", (1, 1), 128, [a_bits, b_bits, c, m, n, k])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-3)


def test_race_generated_softmax_is_clean(tsan: cpu.EmulatedModule) -> None:
    """A generated row-wise kernel (256 threads, block reductions through shared memory)."""
    from ncdc.hardware.load import load_hardware
    from ncdc.language.load import load_diagram
    from ncdc.plan.search import plan_diagram
    from ncdc.render import render_plan
    from ncdc.verify.run import run_diagram

    spec = support.DIAGRAMS / "softmax.yaml"
    diagram = load_diagram(spec, {"m": 2, "n": 8192})
    module = render_plan(plan_diagram(diagram, load_hardware("h200")))
    assert module.launches[0].block[0] > 32
    result = run_diagram(diagram, module, sanitize="race")
    assert all(c.ok for c in result.checks)


# ---- the same headers under NVRTC -----------------------------------------------------------


def _nvrtc_include() -> str | None:
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for hit in Path(base).rglob("cuda_bf16.h"):
            return str(hit.parent)
    return None


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(p.name for p in KERNELS.glob("*.cu")))
def test_kernels_compile_with_nvrtc(name: str, arch: str) -> None:
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    cuda_inc = _nvrtc_include()
    if cuda_inc is None:
        pytest.skip("no CUDA headers (nvidia-cuda-runtime wheel)")
    src = (KERNELS / name).read_bytes()
    err, prog = nvrtc.nvrtcCreateProgram(src, name.encode(), 0, [], [])
    opts = [
        f"--gpu-architecture={arch}",
        "-std=c++17",
        f"-I{cuda_inc}",
        f"-I{cpu.include_dir()}",
    ]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = bytearray(size)  # NVRTC writes into it: b" " * 1 would be CPython's shared b" "
    nvrtc.nvrtcGetProgramLog(prog, log)
    nvrtc.nvrtcDestroyProgram(prog)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")


# ---- crashes outside the sanitizers ----------------------------------------------------------

CRASHING = (
    '#include "ncdc_runtime.cuh"\n'
    'extern "C" __global__ void far_write(float* x) { x[threadIdx.x * (1 << 26)] = 1.0f; }\n'
    "NCDC_EXPORT_KERNEL(far_write);\n"
)
LAUNCH_CRASHING = (
    "import sys, numpy as np; from ncdc.backends import cpu; "
    "cpu.build(sys.argv[1]).launch('far_write', 1, 64, [np.zeros(4, np.float32)]); "
    "print('survived')"
)


@pytest.mark.parametrize("faulthandler", [False, True])
def test_a_crashing_kernel_is_one_line_suggesting_the_sanitizer(tmp_path, faulthandler):
    # Issue 31: a plain run of a kernel writing out of bounds died of SIGSEGV (exit 139)
    # with no message. Python's own fault handler, when enabled, is chained, not lost.
    flags = ["-X", "faulthandler"] if faulthandler else []
    env = {**os.environ, "NCDC_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(support.ROOT)}
    done = subprocess.run([sys.executable, *flags, "-c", LAUNCH_CRASHING, CRASHING], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: kernel far_write crashed (SIGSEGV at 0x")
    assert "hint: rerun with --sanitize address" in done.stderr
