"""The CPU emulation of the Hopper instructions (tests/emulator_kernels/hopper.cu): wgmma
over shared-memory images laid out here by the PTX ISA's canonical layouts, TMA boxes with
swizzle and out-of-bounds fill, mbarrier phases, named barriers, setmaxnreg, and the planted
faults each caught: a wrong swizzle, a missing wgmma wait, a missing wgmma fence, a wrong
mbarrier parity (a deadlock report or stale data), too many expected bytes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ncdc.backends import cpu
from ncdc.backends.arguments import encode_emulated_tensor_map
from ncdc.errors import CheckFailed, NcdcError
from ncdc.families.base import TensorMapSpec
from tests import support

KERNELS = support.EMULATOR_KERNELS
SWIZZLE_MODE = {0: 0, 128: 1, 64: 2, 32: 3}  # descriptor bits 62-63
B_OFFSET = 8192  # the B operand's place in the image (1024-aligned)


@pytest.fixture(scope="module")
def hopper(tmp_path_factory: pytest.TempPathFactory) -> cpu.EmulatedModule:
    return cpu.build(KERNELS / "hopper.cu", cache_dir=tmp_path_factory.mktemp("emu-hopper"))


def swizzled(offset: int, span: int) -> int:
    """Swizzle<B,4,3> on a byte offset from a 1024-aligned base: the 16-byte chunk index
    (bits 4..) is XORed with the 128-byte row index (bits 7..), B = log2(span / 16)."""
    if span == 0:
        return offset
    mask = span // 16 - 1
    return offset ^ (((offset >> 7) & mask) << 4)


def kmajor_offset(mn: int, kb: int, span: int) -> tuple[int, int, int]:
    """(byte offset, LBO, SBO) of byte kb of row mn, K-major: 8x16-byte core matrices with
    K chunks 128 bytes apart and 8-row groups 256 apart (no swizzle), else rows of `span`
    bytes and 8-row groups 8*span apart."""
    if span == 0:
        lbo, sbo = 128, 256
        return (mn % 8) * 16 + (mn // 8) * sbo + kb % 16 + (kb // 16) * lbo, lbo, sbo
    sbo = 8 * span
    return (mn % 8) * span + (mn // 8) * sbo + kb, 16, sbo


def mnmajor_offset(mb: int, k: int, span: int, k_extent: int) -> tuple[int, int, int]:
    """(byte offset, LBO, SBO) of byte mb of column k, MN-major: 16-byte MN chunks of 8 K
    rows (core matrices, 128 bytes) with 8-K groups at LBO (no swizzle), else `span`-byte MN
    blocks of K rows `span` apart, 8-K groups at SBO and MN blocks at LBO."""
    if span == 0:
        sbo, lbo = 128, 128 * 8  # 64 MN values of 2 bytes: 8 chunks
        return mb % 16 + (mb // 16) * sbo + (k % 8) * 16 + (k // 8) * lbo, lbo, sbo
    sbo = 8 * span
    lbo = sbo * (k_extent // 8)
    return mb % span + (mb // span) * lbo + (k % 8) * span + (k // 8) * sbo, lbo, sbo


def place(image: np.ndarray, base: int, offset: int, span: int, value: bytes) -> None:
    at = base + swizzled(offset, span)
    image[at : at + len(value)] = np.frombuffer(value, np.uint8)


def random_bits(rng: np.random.Generator, shape: tuple[int, ...], elem: str) -> np.ndarray:
    """Random values exact in the element type (small integers over powers of two)."""
    values = rng.integers(-8, 9, size=shape) / 8.0
    if elem == "bf16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if elem == "f16":
        return values.astype(np.float16).view(np.uint16)
    from tests.backends.test_cpu import E4M3, E5M2, to_fp8_bits

    return to_fp8_bits(values.ravel(), E4M3 if elem == "e4m3" else E5M2).reshape(shape)


def decode(bits: np.ndarray, elem: str) -> np.ndarray:
    if elem == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if elem == "f16":
        return bits.view(np.float16).astype(np.float64)
    from tests.backends.test_cpu import E4M3, E5M2

    return (E4M3 if elem == "e4m3" else E5M2)[bits]


def wgmma_case(
    hopper: cpu.EmulatedModule,
    kernel: str,
    elem: str,
    span_a: int,
    span_b: int,
    b_mn_major: bool,
    fault: int = 0,
    claimed_span_a: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Runs one 64x64xK wgmma over an image laid out here; returns (got, want)."""
    rng = np.random.default_rng()
    esize = 1 if elem in ("e4m3", "e5m2") else 2
    k_extent = 32 // esize
    a = random_bits(rng, (64, k_extent), elem)
    b = random_bits(rng, (64, k_extent), elem)  # b[n, k]
    image = np.zeros(B_OFFSET * 2, np.uint8)
    lbo_a = sbo_a = lbo_b = sbo_b = 0
    for m in range(64):
        for k in range(k_extent):
            off, lbo_a, sbo_a = kmajor_offset(m, k * esize, span_a)
            place(image, 0, off, span_a, a[m, k].tobytes())
            if b_mn_major:
                off, lbo_b, sbo_b = mnmajor_offset(m * esize, k, span_b, k_extent)
            else:
                off, lbo_b, sbo_b = kmajor_offset(m, k * esize, span_b)
            place(image, B_OFFSET, off, span_b, b[m, k].tobytes())
    d = np.full((64, 64), np.nan, np.float32)
    sw_a = SWIZZLE_MODE[span_a if claimed_span_a is None else claimed_span_a]
    hopper.launch(
        kernel, 1, 128,
        [image, image.size, lbo_a, sbo_a, sw_a, B_OFFSET, lbo_b, sbo_b, SWIZZLE_MODE[span_b],
         fault, d],
        dynamic_smem=image.size + 1024,
    )  # fmt: skip
    want = decode(a, elem) @ decode(b, elem).T
    return d, want


@pytest.mark.parametrize("span", [0, 32, 64, 128])
def test_wgmma_bf16_every_swizzle(hopper: cpu.EmulatedModule, span: int) -> None:
    # A and B K-major, each in the same swizzle mode; B MN-major (transposed) in the next
    # test. The products are exact in fp32, so only the summation order can differ.
    got, want = wgmma_case(hopper, "wgmma_bf16_kmajor", "bf16", span, span, b_mn_major=False)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    got, want = wgmma_case(hopper, "wgmma_bf16_nmajor", "bf16", 128, span, b_mn_major=True)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_wgmma_f16_and_fp8(hopper: cpu.EmulatedModule) -> None:
    got, want = wgmma_case(hopper, "wgmma_f16_nmajor", "f16", 64, 128, b_mn_major=True)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for kernel, elem in (("wgmma_e4m3", "e4m3"), ("wgmma_e5m2", "e5m2")):
        got, want = wgmma_case(hopper, kernel, elem, 128, 0, b_mn_major=False)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def tensor_core_dot(a: np.ndarray, b: np.ndarray, c: float, elem: str) -> np.float32:
    """One output of one Hopper wgmma, by the published bit-accurate model (Khattak and
    Mikaitis, arXiv:2512.07004; MMA-Sim, arXiv:2511.10909), written here apart from the
    emulator: products keep their operands' exponent sum, every term and C is cut toward zero
    below 2^(Emax - F) (F = 13 for fp8, 25 for 16-bit types), the exact sum is cut toward zero
    to 14 (fp8) or 24 significant bits."""
    fp8 = elem in ("e4m3", "e5m2")
    lowest = {"bf16": -126, "f16": -14, "e4m3": -6, "e5m2": -14}[elem]
    fraction, kept = (13, 14) if fp8 else (25, 24)

    def exponent(x: float, least: int) -> int:
        return max(math.frexp(x)[1] - 1, least)

    terms = [(x * y, exponent(x, lowest) + exponent(y, lowest))
             for x, y in zip(a.tolist(), b.tolist(), strict=True) if x * y != 0.0]  # fmt: skip
    if c != 0.0:
        terms.append((c, exponent(c, -126)))
    if not terms:
        return np.float32(0.0)
    emax = max(e for _, e in terms) if fp8 else max(-133, *(e for _, e in terms))
    total = sum(math.trunc(math.ldexp(t, fraction - emax)) for t, _ in terms)  # exact
    v = math.ldexp(total, emax - fraction)
    if v == 0.0:
        return np.float32(0.0)
    e = math.frexp(v)[1] - 1
    return np.float32(math.ldexp(math.trunc(math.ldexp(v, kept - 1 - e)), e - kept + 1))


def wide_bits(rng: np.random.Generator, shape: tuple[int, ...], elem: str) -> np.ndarray:
    """Random values of every magnitude the type has (fp8: any finite code; bf16: exponents
    from -24 to 24, fp16 -12 to 12), so that the tensor cores' alignment cuts bits off."""
    if elem in ("e4m3", "e5m2"):
        from tests.backends.test_cpu import E4M3, E5M2

        table = E4M3 if elem == "e4m3" else E5M2
        finite = np.flatnonzero(np.isfinite(table)).astype(np.uint8)
        return rng.choice(finite, size=shape)
    spread = 24 if elem == "bf16" else 12
    values = rng.uniform(-2, 2, size=shape) * 2.0 ** rng.integers(-spread, spread + 1, size=shape)
    if elem == "bf16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(np.float16).view(np.uint16)


@pytest.mark.parametrize("elem", ["bf16", "f16", "e4m3", "e5m2"])
def test_wgmma_rounds_as_hopper_tensor_cores_do(hopper: cpu.EmulatedModule, elem: str) -> None:
    """D = A B + C bit for bit as the H100/H200 tensor cores give it (one wgmma: 16 products
    and C for 16-bit types, 32 for fp8), not as an fp32 sum: on an H200 the fp8 attention
    was 2.2% off the float64 reference where an fp32 sum is 0.04% off."""
    rng = np.random.default_rng()
    esize = 1 if elem in ("e4m3", "e5m2") else 2
    k_extent = 32 // esize
    a, b = wide_bits(rng, (64, k_extent), elem), wide_bits(rng, (64, k_extent), elem)
    image, params = wgmma_image(a, b, esize, 128, 0)
    exact = decode(a, elem) @ decode(b, elem).T
    c = rng.standard_normal((64, 64)) * np.abs(exact).max() * 2.0 ** -rng.integers(0, 12, (64, 64))
    c = c.astype(np.float32)
    d = np.full((64, 64), np.nan, np.float32)
    hopper.launch(f"wgmma_{elem}_c", 1, 128, [image, image.size, *params, c, d],
                  dynamic_smem=image.size + 1024)  # fmt: skip
    da, db = decode(a, elem), decode(b, elem)
    want = np.array([[tensor_core_dot(da[m], db[n], float(c[m, n]), elem) for n in range(64)]
                     for m in range(64)], np.float32)  # fmt: skip
    np.testing.assert_array_equal(d, want)
    plain = (exact + c.astype(np.float64)).astype(np.float32)
    assert np.count_nonzero(d != plain) > 64  # the model's cut bits show: not an fp32 sum


def wgmma_image(a: np.ndarray, b: np.ndarray, esize: int, span_a: int, span_b: int
                ) -> tuple[np.ndarray, list[int]]:  # fmt: skip
    """A (64 x K) and B (64 x K, `b[n, k]`) laid out K-major in one shared-memory image;
    the wgmma kernels' descriptor arguments after the image and its size."""
    image = np.zeros(B_OFFSET * 2, np.uint8)
    lbo_a = sbo_a = lbo_b = sbo_b = 0
    for m in range(64):
        for k in range(a.shape[1]):
            off, lbo_a, sbo_a = kmajor_offset(m, k * esize, span_a)
            place(image, 0, off, span_a, a[m, k].tobytes())
            off, lbo_b, sbo_b = kmajor_offset(m, k * esize, span_b)
            place(image, B_OFFSET, off, span_b, b[m, k].tobytes())
    return image, [lbo_a, sbo_a, SWIZZLE_MODE[span_a], B_OFFSET, lbo_b, sbo_b, SWIZZLE_MODE[span_b]]


def wgmma_rs_case(
    hopper: cpu.EmulatedModule, elem: str, n: int, b_mn_major: bool, fault: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """One m64nNk16 wgmma (k32 for 8-bit types) with A (64 x k) from registers and B (n x k)
    from a 128-byte-swizzled image, K-major or (16-bit) MN-major; returns (got, want)."""
    rng = np.random.default_rng()
    esize = 1 if elem in ("e4m3", "e5m2") else 2
    k_extent = 32 // esize
    a = random_bits(rng, (64, k_extent), elem)
    b = random_bits(rng, (n, k_extent), elem)  # b[n, k]
    image = np.zeros(n * 128, np.uint8)  # K-major: a 128-byte row per column of B
    lbo = sbo = 0
    for col in range(n):
        for k in range(k_extent):
            if b_mn_major:
                off, lbo, sbo = mnmajor_offset(col * 2, k, 128, 16)
            else:
                off, lbo, sbo = kmajor_offset(col, k * esize, 128)
            place(image, 0, off, 128, b[col, k].tobytes())
    d = np.full((64, n), np.nan, np.float32)
    kernel = f"wgmma_rs_{elem}_n{n}_{'nmajor' if b_mn_major else 'kmajor'}"
    hopper.launch(
        kernel, 1, 128, [a, image, image.size, lbo, sbo, SWIZZLE_MODE[128], fault, d],
        dynamic_smem=image.size + 1024,
    )  # fmt: skip
    return d, decode(a, elem) @ decode(b, elem).T


@pytest.mark.parametrize("elem", ["bf16", "f16"])
def test_wgmma_a_from_registers(hopper: cpu.EmulatedModule, elem: str) -> None:
    # Every n the wrappers have, B K-major and MN-major (the P.V product of attention: P in
    # registers, V's rows in shared memory); exact products, so only the order can differ.
    for n in (64, 128, 256):
        for mn_major in (False, True):
            got, want = wgmma_rs_case(hopper, elem, n, mn_major)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"n={n}")


@pytest.mark.parametrize("elem", ["e4m3", "e5m2"])
def test_wgmma_8bit_a_from_registers(hopper: cpu.EmulatedModule, elem: str) -> None:
    # The 8-bit A fragment (four columns a thread in each half of k32, CuTe's ALayout_64x32)
    # for every n; small values, so the tensor cores' sum is exact. Packed in the
    # accumulator's order (two columns a thread in each group of eight, what attention's P
    # holds before its permute), the product is wrong.
    for n in (64, 128, 256):
        got, want = wgmma_rs_case(hopper, elem, n, False)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"n={n}")
    got, want = wgmma_rs_case(hopper, elem, 128, False, fault=4)
    assert not np.allclose(got, want)


def test_wgmma_a_registers_are_read_at_the_issue(hopper: cpu.EmulatedModule) -> None:
    # Registers overwritten after the issue do not change the product; D read before the
    # wait holds the old accumulators.
    got, want = wgmma_rs_case(hopper, "bf16", 64, True, fault=3)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    got, want = wgmma_rs_case(hopper, "bf16", 128, False, fault=1)
    assert np.all(got == 0.0) and np.any(want != 0.0)


def test_planted_wrong_swizzle_gives_wrong_results(hopper: cpu.EmulatedModule) -> None:
    # The image is laid out with the 128-byte swizzle; the descriptor claims 64 bytes.
    got, want = wgmma_case(
        hopper, "wgmma_bf16_kmajor", "bf16", 128, 128, b_mn_major=False, claimed_span_a=64
    )
    assert not np.allclose(got, want)


def test_planted_missing_wgmma_wait_reads_old_accumulators(hopper: cpu.EmulatedModule) -> None:
    got, want = wgmma_case(hopper, "wgmma_bf16_kmajor", "bf16", 128, 128, False, fault=1)
    assert np.all(got == 0.0) and np.any(want != 0.0)  # results land only at the wait


def test_planted_missing_wgmma_fence_is_an_error(hopper: cpu.EmulatedModule) -> None:
    with pytest.raises(NcdcError, match=r"without a wgmma\.fence .*thread \(\d+,0,0\)"):
        wgmma_case(hopper, "wgmma_bf16_kmajor", "bf16", 128, 128, False, fault=2)


# ---- TMA ---------------------------------------------------------------------------------------

ROWS, COLS = 20, 24  # bf16, a 48-byte row pitch


def tma_case(
    hopper: cpu.EmulatedModule, span: int, c0: int, c1: int, fault: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """One box of (inner, 8) bf16 at (c0, c1) of a ROWS x COLS tensor; (got, want) bytes."""
    rng = np.random.default_rng()
    src = rng.integers(1, 2**15, size=(ROWS, COLS), dtype=np.uint16)
    inner = (span or 64) // 2
    spec = TensorMapSpec("src", "bf16", (COLS, ROWS), (COLS * 2,), (inner, 8), span)
    tmap = encode_emulated_tensor_map(spec, argument=1)
    box_bytes = inner * 8 * 2
    out = np.full(box_bytes, 0xAB, np.uint8)
    hopper.launch("tma_box", 1, 64, [tmap, src, c0, c1, box_bytes, fault, out], 3072)
    want = np.zeros(box_bytes, np.uint8)
    for r in range(8):
        for c in range(inner):
            gr, gc = c1 + r, c0 + c
            value = src[gr, gc] if 0 <= gr < ROWS and 0 <= gc < COLS else np.uint16(0)
            place(want, 0, (r * inner + c) * 2, span, value.tobytes())
    return out, want


@pytest.mark.parametrize("span", [0, 32, 64, 128])
def test_tma_box_swizzle_and_out_of_bounds_fill(hopper: cpu.EmulatedModule, span: int) -> None:
    # Crosses the last column and the last row: those elements land as zeros.
    got, want = tma_case(hopper, span, COLS - 8, ROWS - 5)
    np.testing.assert_array_equal(got, want)
    got, want = tma_case(hopper, span, -4, -3)  # negative coordinates are out of bounds too
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "c0, c1, dim",
    [(COLS, 0, 0), (0, ROWS, 1), (-64, 0, 0), (0, -8, 1)],  # past the end, or before 0
)
def test_a_box_wholly_outside_the_tensor_is_refused(
    hopper: cpu.EmulatedModule, c0: int, c1: int, dim: int
) -> None:
    """The PTX ISA covers a box that crosses the boundary, not one wholly outside: ncdc's
    kernels issue none, and the emulator refuses one, load or store, naming where it lies."""
    with pytest.raises(NcdcError, match=rf"wholly outside the tensor in dimension {dim}"):
        tma_case(hopper, 128, c0, c1)
    spec = TensorMapSpec("dst", "bf16", (COLS, ROWS), (COLS * 2,), (64, 8), 128)
    tmap = encode_emulated_tensor_map(spec, argument=1)
    dst = np.zeros((ROWS, COLS), np.uint16)
    image = np.zeros(1024, np.uint8)
    with pytest.raises(NcdcError, match=rf"wholly outside the tensor in dimension {dim}"):
        hopper.launch("tma_store_box", 1, 64, [tmap, dst, c0, c1, image, image.size], 3072)


@pytest.mark.parametrize("span", [0, 128])
def test_tma_store_writes_the_box_in_bounds_only(hopper: cpu.EmulatedModule, span: int) -> None:
    rng = np.random.default_rng()
    inner = (span or 64) // 2
    box = rng.integers(1, 2**15, size=(8, inner), dtype=np.uint16)  # the box, row major
    image = np.zeros(inner * 16, np.uint8)
    for r in range(8):
        for c in range(inner):
            place(image, 0, (r * inner + c) * 2, span, box[r, c].tobytes())
    dst = np.full((ROWS, COLS), 0xABCD, np.uint16)
    spec = TensorMapSpec("dst", "bf16", (COLS, ROWS), (COLS * 2,), (inner, 8), span)
    tmap = encode_emulated_tensor_map(spec, argument=1)
    c0, c1 = COLS - 8, ROWS - 5  # the last 8 columns and 5 rows are in bounds
    traffic = hopper.launch("tma_store_box", 1, 64, [tmap, dst, c0, c1, image, image.size], 3072)
    want = np.full((ROWS, COLS), 0xABCD, np.uint16)
    want[c1:, c0:] = box[:5, :8]
    np.testing.assert_array_equal(dst, want)
    assert traffic.bytes_written == 5 * 8 * 2


def proxy_fence_case(hopper: cpu.EmulatedModule, wgmma: int, skip: int) -> np.ndarray:
    dst = np.zeros((8, 64), np.uint16)
    spec = TensorMapSpec("dst", "bf16", (64, 8), (128,), (64, 8), 128)
    tmap = encode_emulated_tensor_map(spec, argument=1)
    out = np.full(128, np.nan, np.float32)
    hopper.launch("proxy_fence", 1, 128, [tmap, dst, wgmma, skip, out], 16384 + 1024)
    return out


@pytest.mark.parametrize("wgmma", [0, 1])
def test_planted_missing_proxy_fence_is_an_error(hopper: cpu.EmulatedModule, wgmma: int) -> None:
    # Thread 37 stores words 37, 165, ...: its first unfenced word is at byte 0x94 of the
    # 1024-aligned area, which the TMA store's box and wgmma's A rows (row 1, k bytes
    # 16..31) both read; the error names the writer and the offset in dynamic shared memory.
    reader = "a wgmma \\(its A descriptor\\)" if wgmma else "a TMA store"
    with pytest.raises(
        NcdcError,
        match=rf"missing fence\.proxy\.async: {reader}.* offset 0x[0-9a-f]+, which thread 37 wrote",
    ):
        proxy_fence_case(hopper, wgmma, 37)
    assert np.all(proxy_fence_case(hopper, wgmma, -1) == 0) or not wgmma  # every thread fenced


def test_tma_traffic_counts_only_in_bounds_bytes(hopper: cpu.EmulatedModule) -> None:
    src = np.zeros((ROWS, COLS), np.uint16)
    spec = TensorMapSpec("src", "bf16", (COLS, ROWS), (COLS * 2,), (64, 8), 128)
    out = np.zeros(1024, np.uint8)
    tmap = encode_emulated_tensor_map(spec, argument=1)
    traffic = hopper.launch("tma_box", 1, 32, [tmap, src, 0, 16, 1024, 0, out], 3072)
    assert traffic.bytes_read == 4 * COLS * 2  # rows 16..19 of 24 columns


def test_planted_read_before_mbarrier_wait_sees_stale_bytes(hopper: cpu.EmulatedModule) -> None:
    got, want = tma_case(hopper, 128, 0, 0, fault=1)
    assert np.all(got == 0xFF) and not np.array_equal(got, want)  # dynamic smem starts 0xff


def test_planted_wrong_parity_is_a_deadlock(hopper: cpu.EmulatedModule) -> None:
    # Waiting for parity 1 once phase 0 has completed waits for phase 1, which nobody arrives
    # at (on a GPU: a hang).
    with pytest.raises(NcdcError, match="deadlock: mbarrier wait for the phase of parity 1"):
        tma_case(hopper, 128, 0, 0, fault=2)


def test_planted_too_many_expected_bytes_is_a_deadlock(hopper: cpu.EmulatedModule) -> None:
    with pytest.raises(NcdcError, match="deadlock: mbarrier wait for the phase of parity 0"):
        tma_case(hopper, 128, 0, 0, fault=3)


def test_tensor_map_checks_the_driver_limits() -> None:
    bad = TensorMapSpec("x", "bf16", (7, 4), (14,), (8, 4), 0)  # 14-byte pitch
    with pytest.raises(ValueError, match="multiples of 16"):
        encode_emulated_tensor_map(bad, argument=0)
    wide = TensorMapSpec("x", "bf16", (128, 4), (256,), (128, 4), 128)  # 256-byte inner box
    with pytest.raises(ValueError, match="exceeds the 128-byte swizzle span"):
        encode_emulated_tensor_map(wide, argument=0)


# ---- mbarrier ring, named barriers, setmaxnreg ----------------------------------------------


def test_mbarrier_ring_passes_every_round(hopper: cpu.EmulatedModule) -> None:
    rng = np.random.default_rng()
    rounds = 7
    x = rng.standard_normal((rounds, 32)).astype(np.float32)
    for stages in (1, 3):
        out = np.full(32, np.nan, np.float32)
        hopper.launch("ring", 1, 64, [x, rounds, stages, 0, out])
        np.testing.assert_allclose(out, x.sum(axis=0), rtol=1e-5)


def test_planted_mbarrier_phase_error_is_a_deadlock(hopper: cpu.EmulatedModule) -> None:
    # The producer waits for the empty barrier's phase 0 before the consumer could arrive.
    x = np.zeros((4, 32), np.float32)
    with pytest.raises(NcdcError, match=r"deadlock: mbarrier wait .* thread \(\d+,0,0\)"):
        hopper.launch("ring", 1, 64, [x, 4, 2, 1, np.zeros(32, np.float32)])


def test_named_barrier_orders_the_warps(hopper: cpu.EmulatedModule) -> None:
    x = np.arange(32, dtype=np.float32)
    out = np.full(32, np.nan, np.float32)
    hopper.launch("named", 1, 64, [x, 64, out])
    np.testing.assert_array_equal(out, 2 * x[::-1])
    with pytest.raises(NcdcError, match="named barrier 1 used with thread counts 64 and 32"):
        hopper.launch("named", 1, 64, [x, 32, out])


def test_setmaxnreg_budgets_fit_the_pool_the_block_started_with(
    hopper: cpu.EmulatedModule,
) -> None:
    # 384 threads start with 168 registers each (what __launch_bounds__(384, 1) allows):
    # a pool of 64512, which 40 + 2 x 232 fills exactly (CUTLASS's and ncdc's GEMM budgets);
    # the consumers' .inc waits for the producer's .dec whichever runs first
    out = np.zeros(384, np.int32)
    hopper.launch("maxnreg", 1, 384, [40, 232, out])
    assert out.sum() == 384
    # 40 + 2 x 256 is 576 a thread of three warpgroups, over 3 x 168: the last .inc waits forever
    with pytest.raises(NcdcError, match=r"deadlock: setmaxnreg.inc 256 .* 384 threads x 168"):
        hopper.launch("maxnreg", 1, 384, [40, 256, out])
    # the same budgets under a ptxas that gave the kernel 160 registers: 61440 do not cover them
    with pytest.raises(NcdcError, match=r"deadlock: setmaxnreg.inc 232 .* 384 threads x 160"):
        hopper.launch("maxnreg", 1, 384, [40, 232, out], entry_registers=160)
    out[:] = 0
    hopper.launch("maxnreg", 1, 384, [40, 232, out], entry_registers=168)  # as ptxas gives now
    assert out.sum() == 384


def test_race_sanitizer_follows_mbarrier_phases(tmp_path: Path) -> None:
    # The ring is race-free through its full/empty phases; the consumer that skips its full
    # wait reads a slot the producer writes with nothing ordering them.
    lib = cpu.build(KERNELS / "hopper.cu", cache_dir=tmp_path, sanitize="race")
    x = np.ones((6, 32), np.float32)
    out = np.zeros(32, np.float32)
    lib.launch("ring", 1, 64, [x, 6, 2, 0, out])
    np.testing.assert_array_equal(out, 6.0)
    with pytest.raises(CheckFailed, match="data race in kernel ring"):
        lib.launch("ring", 1, 64, [x, 6, 2, 2, out])
    # A TMA box is written at its issue as far as TSan knows: readers after the full
    # barrier's wait are ordered, readers before it race with the copy.
    src = np.ones((ROWS, COLS), np.uint16)
    spec = TensorMapSpec("src", "bf16", (COLS, ROWS), (COLS * 2,), (64, 8), 128)
    tmap = encode_emulated_tensor_map(spec, argument=1)
    box = np.zeros(1024, np.uint8)
    lib.launch("tma_box", 1, 64, [tmap, src, 0, 0, 1024, 0, box], 3072)
    with pytest.raises(CheckFailed, match="data race in kernel tma_box"):
        lib.launch("tma_box", 1, 64, [tmap, src, 0, 0, 1024, 1, box], 3072)
    # A cluster's multicast and remote arrives order its blocks' accesses: no race.
    got, _, src = cluster_case(lib, 2)
    np.testing.assert_array_equal(got[1], src)


# ---- thread-block clusters ---------------------------------------------------------------------


def cluster_case(hopper: cpu.EmulatedModule, grid: int, fault: int = 0) -> tuple[np.ndarray, ...]:
    """cluster_multicast over `grid` blocks (clusters of 2) of a (8 * grid) x 64 bf16 tensor:
    (the 2048 bytes each block copied out, as rows of bf16; each block's cluster rank; src)."""
    rng = np.random.default_rng()
    src = rng.integers(1, 2**15, size=(8 * grid, 64), dtype=np.uint16)
    spec = TensorMapSpec("src", "bf16", (64, 8 * grid), (128,), (64, 8), 0)
    tmap = encode_emulated_tensor_map(spec, argument=1)
    out = np.full(2048 * grid, 0xAB, np.uint8)
    ranks = np.full(grid, 7, np.uint32)
    hopper.launch("cluster_multicast", grid, 64, [tmap, src, fault, out, ranks], 4096)
    return out.view(np.uint16).reshape(grid, 16, 64), ranks, src


def test_cluster_multicast_lands_in_both_ctas(hopper: cpu.EmulatedModule) -> None:
    # Two clusters of two: CTA r of cluster c loads rows 16c + 8r .. +7 and multicasts them,
    # so both CTAs of cluster c hold rows 16c .. 16c + 15 (each half from the other's load),
    # and the remote arrives complete both CTAs' second barrier.
    got, ranks, src = cluster_case(hopper, 4)
    np.testing.assert_array_equal(ranks, [0, 1, 0, 1])
    for b in range(4):
        np.testing.assert_array_equal(got[b], src[16 * (b // 2) : 16 * (b // 2) + 16])


def test_planted_cluster_faults_are_caught(hopper: cpu.EmulatedModule) -> None:
    # No barrier.cluster after mbarrier.init: CTA 0 multicasts onto CTA 1's barrier before
    # CTA 1 initialised it.
    with pytest.raises(NcdcError, match=r"mbarrier used before mbarrier.init .*block \(0,0,0\)"):
        cluster_case(hopper, 2, fault=1)
    # A mask of only this CTA: each full barrier gets 1024 of its 2048 bytes.
    with pytest.raises(NcdcError, match="deadlock: mbarrier wait for the phase of parity 0"):
        cluster_case(hopper, 2, fault=2)
    # No remote arrive: the peer's barrier never completes, in either CTA.
    with pytest.raises(NcdcError, match="deadlock: .*every other thread of the cluster"):
        cluster_case(hopper, 2, fault=3)
    with pytest.raises(NcdcError, match="grid x must be a multiple of the cluster size"):
        cluster_case(hopper, 3)
