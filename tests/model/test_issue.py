"""Issue slots in the plan's time (ncdc.model.issue): the per-family estimate against the SASS of
compiled kernels, the arithmetic of the issue time, and `ncdc cost` finding the SASS of a
kernel `ncdc compile` has cached."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ncdc.backends import loop_mixes, sass
from ncdc.hardware.load import load_hardware
from ncdc.language.load import load_diagram
from ncdc.model.issue import ESTIMATE, MMA_16816_FLOPS, SASS, LoopMix, issue_time_s
from ncdc.model.overlap import overlap_compute
from ncdc.plan.search import plan_diagram

TOOLS = sass.find_tool("nvdisasm") is not None and sass.find_tool("cuobjdump") is not None


def test_issue_time_is_slots_over_four_per_clock_per_sm():
    # One warp iteration: 8 HMMAs (8 x 4096 FLOPs) in 40 slots. 108 SMs x 1200 MHz (the
    # A100's sustained clock) x 4 slots per clock = 518.4e9 slots/s; 1e6 iterations of 40
    # slots take 40e6 / 518.4e9 s = 77.16 us.
    hw = load_hardware("a100")
    mix = LoopMix({"tensor": 8, "ldmatrix": 8, "integer": 24}, 8 * MMA_16816_FLOPS)
    assert mix.slots_per_mma == 5.0
    t = issue_time_s(mix, 1e6 * 8 * MMA_16816_FLOPS, hw)
    assert t == pytest.approx(40e6 / (4 * 108 * 1.2e9))


def test_overlap_across_warps_is_bounded_by_the_issue_rate():
    # Many resident blocks hide the softmax under the MMAs (1.0 s), but not below the 1.4 s
    # the SMs need to issue every instruction of both.
    units = {"tensor": 1.0, "cuda": 0.3, "sfu": 0.2}
    assert overlap_compute(units, True, 10**6) == pytest.approx(1.0, rel=1e-5)
    assert overlap_compute({**units, "issue": 1.4}, True, 10**6) == 1.4
    assert overlap_compute({**units, "issue": 1.4}, False, 1) == 1.4


def test_a_guarded_tail_path_is_not_what_a_full_tile_issues():
    # The loop (0x10 .. 0x70) copies with cp.async, or for a tail tile jumps over it to an
    # element-wise LDG path; a full tile skips the LDG region (0x40 .. 0x50).
    listing = """
        /*0010*/                   LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64] ;
        /*0020*/                   HMMA.16816.F32.BF16 R8, R4, R6, R8 ;
        /*0030*/               @P1 BRA 0x60 ;
        /*0040*/                   LDG.E.U16 R9, [R4.64] ;
        /*0050*/                   STS.U16 [R3], R9 ;
        /*0060*/                   IADD3 R3, R3, 0x20, RZ ;
        /*0070*/              @!P0 BRA 0x10 ;
    """
    loop = sass.main_loop(sass.parse_sass(listing))
    assert [i.addr for i in sass.full_tile_path(loop)] == [0x10, 0x20, 0x30, 0x60, 0x70]
    mix = loop_mixes.loop_mix(loop)
    assert (mix.slots, mix.tensor_flops, mix.source) == (5.0, 4096.0, SASS)


# The library's diagrams whose main loops the issue term prices, on the two profiles: the
# h200 bf16 GEMMs run the wgmma variant, the a100 ones and the int8 GEMMs mma.sync; a score
# functor (softcap: tanh; alibi: index terms), masks bounding the keys from below (window,
# packed sequences), Q's fragments from SMEM (mla on a100, d = 192; on h200 it runs the
# FlashAttention-3 variant), int8 weights widened in the
# loop (w8a16), a kernel of one tail chunk (cross_attention, x = 77), and below split-k
# (and w8a16's) and fp8 mma.sync on sm_90 (two HMMAs a step, fragments unpacked).
# Structure the two profiles share is compiled for one of them.
NAMES = ("matmul", "mlp", "batched_matmul", "attention", "int8_matmul")
LIBRARY = [(p, d) for p in ("h200", "a100") for d in NAMES] + [
    ("h200", "softcap_attention"),
    ("h200", "sliding_window_attention"),
    ("a100", "mla_attention"),
    ("h200", "w8a16_matmul"),
    ("a100", "alibi_attention"),
    ("a100", "cross_attention"),
    ("a100", "varlen_attention"),
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Plans compiled into a private compile cache, as `ncdc compile` leaves them: a small
    sm_80 GEMM in 128 x 128 x 32 tiles, and the LIBRARY diagrams at their own sizes."""
    pytest.importorskip("cuda.bindings")
    if not TOOLS:
        pytest.skip("nvdisasm wheel not installed")
    from ncdc.backends.compile import compile_plan
    from ncdc.backends.targets import hardware_for_arch

    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("cache")
    root.chmod(0o700)
    mp.setenv("NCDC_CACHE", str(root))
    a100 = load_hardware("a100")
    gemm = plan_diagram(
        load_diagram("diagrams/matmul.yaml", {"m": 256, "n": 256, "k": 256}), a100,
        {"m": 128, "n": 128, "k": 32},
    )  # fmt: skip
    splitk = plan_diagram(
        load_diagram("diagrams/matmul.yaml", {"m": 512, "n": 512, "k": 16384}),
        load_hardware("h200"),
    )  # 8 splits of 128 x 128 tiles (docs/cost-model.md, split-k GEMMs)
    # fp8 mma.sync on Hopper: an sm_90 build (no wgmma variant) of the h200 plan
    fp8 = plan_diagram(
        load_diagram("diagrams/fp8_matmul.yaml"), hardware_for_arch(load_hardware("h200"), "sm_90")
    )
    plans = [
        ("a100 matmul 128x128x32", gemm),
        ("h200 matmul split-k", splitk),
        ("h200 fp8_matmul mma.sync (sm_90)", fp8),
    ]
    for profile, name in LIBRARY:
        hw = load_hardware(profile)
        plans.append((f"{profile} {name}", plan_diagram(load_diagram(f"diagrams/{name}.yaml"), hw)))
    out = [(label, plan, compile_plan(plan, plan.graph.hardware.arch)) for label, plan in plans]
    yield out
    mp.undo()


def test_cost_before_and_after_compiling_agree(compiled):
    # `ncdc cost` of a library diagram prices its main loops on the family's estimate
    # before `ncdc compile`, on the SASS after: the predicted times agree within 15%, and
    # neither makes a wgmma GEMM issue-bound (its 64 x 256 x 16 HGMMA is 32 HMMA.16816s),
    # nor the FlashAttention-3 kernel (2.0 slots per HMMA.16816, under Hopper's 4; with a
    # score functor more, softcap_attention's soft cap 3.7, its softmax still under the other
    # warpgroup's GEMMs).
    from ncdc.verify.buildable import with_compiled_sass

    for label, plan, _ in compiled[1:]:
        after = with_compiled_sass(plan)
        assert all(k.instructions.source == SASS for k in after.kernels), label
        assert after.predicted_time_s == pytest.approx(plan.predicted_time_s, rel=0.15), label
        for k in (*plan.kernels, *after.kernels):
            if dict(k.candidate.params).get("wgmma"):
                functor = any(op.kind in ("map", "binary", "index") for op in k.kernel.ops)
                most = 1 if k.family.name == "gemm" else 8 if functor else 3
                assert k.bound != "issue" and k.instructions.slots_per_mma < most, label


def test_cost_prices_a_compiled_kernel_from_its_sass(compiled):
    # `ncdc compile` prices its report from the cubin and leaves it in the cache; `ncdc
    # cost` of the same plan finds it and prices its main loops, and its JSON says so.
    from ncdc.backends.compile import priced_from_sass
    from ncdc.model.records import plan_to_dict
    from ncdc.verify.buildable import with_compiled_sass

    for _, plan, report in (compiled[0], compiled[-1]):  # a GEMM and an attention
        assert priced_from_sass(report).plan.kernels[0].instructions.source == SASS
        priced = with_compiled_sass(plan)
        k = priced.kernels[0]
        assert k.instructions is not None and k.instructions.source == SASS
        assert plan_to_dict(priced)["kernels"][0]["instructions"]["source"] == SASS
        assert k.compute["issue"] > 0


def test_a_cubin_is_disassembled_once(compiled, monkeypatch):
    # The main loops are kept (signed) beside the compile cache: pricing the plan again
    # reads them back without cuobjdump; a tampered entry is read afresh.
    import json

    _, _, report = compiled[0]
    first = sass.main_loops(report.cubin)

    def refuse(cubin: bytes) -> str:
        raise AssertionError("disassembled again")

    with monkeypatch.context() as m:
        m.setattr(sass, "disassemble", refuse)
        assert sass.main_loops(report.cubin) == first
    root = Path(os.environ["NCDC_CACHE"])
    (entry,) = [p for p in root.rglob("sass/*.json") if json.loads(p.read_text())["loops"] == first]
    data = json.loads(entry.read_text())
    data["loops"] = {k: "" for k in data["loops"]}
    entry.write_text(json.dumps(data))
    assert sass.main_loops(report.cubin) == first


def test_the_family_estimate_is_within_15_percent_of_the_sass(compiled):
    # The estimate (ncdc.model.issue.estimate_mix) counts what each template issues per warp and
    # main-loop iteration; the SASS is ptxas's loop, on the path a full tile takes. Both
    # count the same iteration (the same tensor FLOPs: a wgmma's from its shape, a quarter
    # of the warpgroup's 64 x N x K per warp), so their slots per FLOP agree.
    for label, plan, report in compiled:
        est = plan.kernels[0].instructions
        assert est is not None and est.source == ESTIMATE, label
        loops = sass.main_loops(report.cubin)  # kept for the tests below
        names = [launch.kernel for launch in report.module.launches]
        # the hot loop, and an attention kernel's masked one on its share of the chunks
        counted = loop_mixes.mixes_by_kernel(plan, loops, names)[0]
        # ptxas keeps the fp8 k tile's loop over its k32 steps rolled on sm_90 (its loop a
        # whole fraction of the estimated iteration) and unrolls a short k tile's twice (a
        # whole multiple): either way whole iterations
        small, big = sorted((est.tensor_flops, counted.tensor_flops))
        assert big % small == 0, label
        assert counted.slots_per_mma == pytest.approx(est.slots_per_mma, rel=0.15), label
    assert dict(compiled[1][1].kernels[0].candidate.params).get("simt") == 0
    assert compiled[1][1].kernels[0].candidate.splits > 1  # split-k
    assert not dict(compiled[2][1].kernels[0].candidate.params).get("wgmma")  # fp8 mma.sync
