"""The documentation shows what the tool does now: every marked output block in README.md
and docs/*.md is what its command prints (scripts/docs.py, `make docs`), and every `ncdc`
example of a shell block runs (a GPU-only one is skipped, saying why)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from tests.support import ROOT


def _load_docs():
    spec = importlib.util.spec_from_file_location("ncdc_docs", ROOT / "scripts" / "docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ncdc_docs"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


docs = _load_docs()
README = ROOT / "README.md"
COST = "ncdc cost diagrams/attention.yaml"


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(body, encoding="utf-8")
    return path


def _marked(spec: str, shown: str) -> str:
    return f"intro\n\n<!-- ncdc-output: {spec} -->\n```text\n{shown}\n```\n<!-- /ncdc-output -->\n"


def test_every_marked_block_is_what_the_tool_prints_now():
    # One run of the whole set, in reading order with one private cache, as `make docs`.
    files = docs.doc_files()
    blocks = [b for f in files for b in docs.find_blocks(f)]
    assert any(b.path == README and b.command == COST for b in blocks)
    with docs.scratch_runner() as runner:
        messages = docs.check(files, runner)
    assert not messages, "run `make docs`:\n" + "\n".join(messages)


def test_the_readme_shows_the_kernel_the_tool_builds():
    # The headline blocks are marked, so the drift check covers them: the compile block
    # names the kernel `ncdc compile` builds today.
    commands = [b.command for b in docs.find_blocks(README)]
    assert commands[:2] == [COST, "ncdc compile diagrams/attention.yaml -o out"]


def test_a_planted_change_to_the_model_is_reported(monkeypatch):
    # Halve the h200's achievable HBM bandwidth: the cost block's hbm -> l2 row (3.53 TB/s,
    # 76.04 µs) can no longer match, and the check must name README.md and that block.
    from ncdc.hardware import load
    from ncdc.hardware.overrides import apply_overrides

    real = load._load_builtin
    hw = real("h200")
    slower = apply_overrides(hw, [f"hbm.bandwidth={hw.bandwidth('hbm') / 2:.0f}"])
    monkeypatch.setattr(
        load, "_load_builtin", lambda name: slower if name == "h200" else real(name)
    )
    block = next(b for b in docs.find_blocks(README) if b.command == COST)
    with docs.scratch_runner() as runner:
        message = docs.drift(block, docs.produce(block, runner))
    assert message is not None
    assert message.startswith("README.md:") and COST in message
    assert "shown:" in message and "now:" in message


def test_a_block_that_differs_names_its_file_line_and_first_differing_line(tmp_path):
    path = _write(tmp_path, _marked("ncdc hardware", "NAME  GPU\nstale line"))
    (block,) = docs.find_blocks(path)
    message = docs.drift(block, "NAME  GPU\nfresh line")
    assert message is not None
    assert message.startswith(f"{path}:6: ")  # the second line inside the fence
    assert "shown: stale line" in message and "now:   fresh line" in message
    assert docs.drift(block, "NAME  GPU\nstale line") is None
    assert "(the output ends)" in docs.drift(block, "NAME  GPU")


def test_a_mask_hides_only_what_it_names(tmp_path):
    path = _write(
        tmp_path, _marked(r"ncdc hardware; mask=NVRTC [0-9.]+", "NVRTC 13.0 ok\n1.066 ms")
    )
    (block,) = docs.find_blocks(path)
    assert block.masks == (r"NVRTC [0-9.]+",)
    assert docs.drift(block, "NVRTC 13.2 ok\n1.066 ms") is None
    assert docs.drift(block, "NVRTC 13.2 ok\n843.83 µs") is not None


def test_rewrite_replaces_only_the_block_and_keeps_the_prose(tmp_path):
    path = _write(tmp_path, _marked("ncdc hardware", "old"))
    with docs.scratch_runner() as runner:
        assert docs.rewrite(path, runner)
        text = path.read_text(encoding="utf-8")
        assert not docs.rewrite(path, runner)  # a second run changes nothing
    assert text.startswith("intro\n\n<!-- ncdc-output: ncdc hardware -->\n```text\n")
    assert "h200" in text and "old" not in text
    assert text.endswith("```\n<!-- /ncdc-output -->\n")


def test_a_command_that_exits_other_than_stated_is_an_error(tmp_path):
    path = _write(tmp_path, _marked("ncdc cost no-such.yaml", "x"))
    (block,) = docs.find_blocks(path)
    with docs.scratch_runner() as runner, pytest.raises(docs.DocsError, match="exited 2"):
        docs.produce(block, runner)
    failing = dataclasses.replace(block, exit_code=2)
    with docs.scratch_runner() as runner:
        assert docs.produce(failing, runner).startswith("error: ")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ncdc hardware; width=80", "unknown marker option"),
        ("ncdc hardware; mask=(", "not a regular expression"),
        ("make docs", "starts with 'ncdc '"),
    ],
)
def test_a_bad_marker_is_refused(tmp_path, spec, message):
    path = _write(tmp_path, _marked(spec, "x"))
    with pytest.raises(docs.DocsError, match=message):
        docs.find_blocks(path)


def test_an_unclosed_block_is_refused(tmp_path):
    path = _write(tmp_path, "<!-- ncdc-output: ncdc hardware -->\n```text\nx\n```\n")
    with pytest.raises(docs.DocsError, match="expected <!-- /ncdc-output -->"):
        docs.find_blocks(path)


def test_examples_are_found_in_shell_and_indented_blocks(tmp_path):
    path = _write(
        tmp_path,
        "```sh\nncdc cost a.yaml   # a comment\nmake demo\n```\n\n"
        "    ncdc show a.yaml\n    ncdc run SPEC [--seed N]\n\n"
        "```yaml\nncdc: 1\n```\n\n"
        "```sh\nncdc cost d/ --format json > base.json\nncdc bench a.yaml\n```\n",
    )
    examples = docs.find_examples(path)
    assert [(e.line, e.command, e.redirect) for e in examples] == [
        (2, "ncdc cost a.yaml", None),
        (6, "ncdc show a.yaml", None),
        (14, "ncdc cost d/ --format json", "base.json"),
        (15, "ncdc bench a.yaml", None),
    ]
    assert [docs.gpu_reason(e) is not None for e in examples] == [False, False, False, True]


def _has_png_converter() -> bool:
    from ncdc.draw.svg import find_converter

    return find_converter() is not None


@pytest.mark.parametrize("path", docs.doc_files(), ids=lambda p: p.name)
def test_every_example_runs(path):
    # Examples of one page run in turn in one folder (a later one may read what an earlier
    # one wrote), on the user's cache: only the exit status is checked here.
    examples = docs.find_examples(path)
    if not examples:
        pytest.skip(f"{path.name} has no ncdc examples")
    failed, skipped = [], []
    with docs.scratch_runner(private_cache=False) as runner:
        for example in examples:
            reason = docs.gpu_reason(example)
            if reason is None and ".png" in example.command and not _has_png_converter():
                reason = "writes a PNG and no SVG to PNG converter is installed"
            if reason:
                skipped.append(f"{example.where}: {reason}")
                continue
            code, text = runner.run_example(example)
            if code != 0:
                failed.append(f"{example.where}: `{example.command}` exited {code}: {text[-300:]}")
    assert not failed, "\n".join(failed)
    assert len(skipped) < len(examples), "every example was skipped: " + "; ".join(skipped)


# Files a user of ncdc does not have: a fact or formula is cited from the repository's docs.
OUTSIDE = ("napkin-model.md", "hardware-facts.md", "shared/")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _cited_files() -> list[Path]:
    package = ROOT / "ncdc"
    return [
        *docs.doc_files(),
        *package.rglob("*.py"),
        *package.rglob("*.yaml"),
        *(ROOT / "tests").rglob("*.py"),
    ]


def test_no_citation_points_outside_the_repository():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {name}"
        for path in _cited_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for name in OUTSIDE
        if name in line and path != Path(__file__)
    ]
    assert not found, "\n".join(found)


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    slugs = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


def test_every_relative_link_in_the_docs_reaches_its_file_and_heading():
    broken = []
    for page in docs.doc_files():
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if "://" in target:
                    continue
                file, _, anchor = target.partition("#")
                path = (page.parent / file).resolve() if file else page
                if not path.exists():
                    broken.append(f"{page.name}:{n}: {target} (no such file)")
                elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                    broken.append(f"{page.name}:{n}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_rewrite_leaves_a_block_that_differs_only_under_its_masks(tmp_path):
    path = _write(tmp_path, _marked("ncdc hardware; mask=h200[^\\n]*", "kept as committed"))
    with docs.scratch_runner() as runner:
        docs.rewrite(path, runner)
    assert "kept as committed" not in path.read_text(encoding="utf-8")  # other lines differ
    (block,) = docs.find_blocks(path)
    masked_only = block.shown.replace("h200", "h200 on another machine", 1)
    path.write_text(path.read_text(encoding="utf-8").replace(block.shown, masked_only))
    with docs.scratch_runner() as runner:
        assert not docs.rewrite(path, runner)
    assert "h200 on another machine" in path.read_text(encoding="utf-8")


def test_every_picture_is_what_ncdc_draws_now():
    with docs.scratch_runner() as runner:
        messages = docs.check_pictures(runner)
    assert not messages, "run `make docs`:\n" + "\n".join(messages)


def test_a_changed_picture_is_reported(tmp_path):
    (tmp_path / "attention.svg").write_bytes(b"<svg/>")
    with docs.scratch_runner() as runner:
        messages = docs.check_pictures(runner, images=tmp_path)
    assert len(messages) == len(docs.PICTURES)  # one stale, the others missing
    assert any(
        "attention.svg: not what `ncdc draw diagrams/attention.yaml` draws" in m for m in messages
    )
