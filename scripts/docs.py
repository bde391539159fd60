"""Command output in README.md and docs/*.md, produced by running the command.

A shown output sits between two markers, the command in the first:

    <!-- ncdc-output: ncdc cost diagrams/attention.yaml -->
    ```text
    ...what that command prints...
    ```
    <!-- /ncdc-output -->

`python scripts/docs.py` (what `make docs` runs) rewrites every such block from a fresh run,
and redraws the pictures in docs/img (`PICTURES`) the same way;
`python scripts/docs.py --check` rewrites nothing and exits 1 naming the file, the line and
the first line that differs, where a committed block is not what the tool prints now
(tests/test_docs.py runs the same check).

Every command runs in-process, in a scratch folder that sees the repository's `diagrams/`,
`docs/` and `tests/specs/`, with a private cache (so a block never depends on what this
machine compiled or tuned before; blocks share it in reading order, README.md first, as a
reader who runs them in turn would), with COLUMNS=100, without colour and without
NCDC_HARDWARE/NCDC_ARCH (the default h200 profile). Its output is not a terminal, so a
block shows the layout ncdc gives piped output. stdout and stderr are shown as one stream,
lines stripped of trailing blanks. A figure that depends on the machine (a path, a memory
limit) is named by `mask=REGEX` options after the command, `; `-separated:

    <!-- ncdc-output: ncdc hardware; mask=NVRTC \\S+ -->

The check replaces what each mask matches, in both texts, before it compares; nothing else
is masked. `exit=N` states a command's expected exit status (default 0); `from=REGEX`
shows the output from its first line that matches on (one table of a longer report), and
`lines=N` only N lines of it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPEN = re.compile(r"^<!-- ncdc-output: (?P<spec>.*?) -->\s*$")
CLOSE = "<!-- /ncdc-output -->"
WIDTH = 100
MASKED = "<masked>"
# Variables that would change what a command prints from one machine or shell to another.
# (NCDC_HARDWARE and NCDC_ARCH: defaults a configuration may set; the rest rich's.)
UNSET = ("NCDC_HARDWARE", "NCDC_ARCH", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def display(path: Path) -> str:
    """`path` relative to the repository where it is inside it."""
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


class DocsError(Exception):
    """A marker that cannot be read, or a command that did not do what its block says."""


@dataclass(frozen=True)
class Block:
    """One marked output: where it is, what runs, what it showed when committed."""

    path: Path
    line: int  # 1-based line of the opening marker
    command: str
    masks: tuple[str, ...]
    exit_code: int
    start_at: str | None  # `from=REGEX`: the block shows the output from this line on
    count: int | None  # `lines=N`: and that many lines of it
    shown: str  # the fenced block's text, without the fences
    start: int  # index of the first line after the opening fence
    end: int  # index of the closing fence

    @property
    def where(self) -> str:
        return f"{display(self.path)}:{self.line}"

    def masked(self, text: str) -> str:
        for mask in self.masks:
            text = re.sub(mask, MASKED, text)
        return text


@dataclass(frozen=True)
class Marker:
    """What an opening marker says: the command and its options."""

    command: str
    masks: tuple[str, ...] = ()
    exit_code: int = 0
    start_at: str | None = None
    count: int | None = None


def parse_spec(spec: str, where: str) -> Marker:
    """The command and its options (mask=, exit=, from=, lines=) from a marker's text."""
    command, *options = [part.strip() for part in spec.split("; ")]
    masks: list[str] = []
    exit_code, start_at, count = 0, None, None
    for option in options:
        key, _, value = option.partition("=")
        if key in ("mask", "from") and value:
            try:
                re.compile(value)
            except re.error as e:
                raise DocsError(
                    f"{where}: {key} {value!r} is not a regular expression: {e}"
                ) from None
            if key == "mask":
                masks.append(value)
            else:
                start_at = value
        elif key == "exit" and value.isdigit():
            exit_code = int(value)
        elif key == "lines" and value.isdigit() and int(value) > 0:
            count = int(value)
        else:
            known = "mask=REGEX, exit=N, from=REGEX or lines=N"
            raise DocsError(f"{where}: unknown marker option {option!r} ({known})")
    if not command.startswith("ncdc "):
        raise DocsError(f"{where}: a marked command starts with 'ncdc ', found {command!r}")
    return Marker(command, tuple(masks), exit_code, start_at, count)


def find_blocks(path: Path) -> list[Block]:
    """Every marked block of one Markdown file, in reading order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        where = f"{path}:{i + 1}"
        marker = parse_spec(match["spec"], where)
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise DocsError(f"{where}: expected a ``` fence on the line after the marker")
        try:
            end = lines.index("```", i + 2)
        except ValueError:
            raise DocsError(f"{where}: the fenced block is not closed") from None
        if end + 1 >= len(lines) or lines[end + 1].strip() != CLOSE:
            raise DocsError(f"{where}: expected {CLOSE} after the block's closing fence")
        shown = "\n".join(lines[i + 2 : end])
        blocks.append(
            Block(
                path,
                i + 1,
                marker.command,
                marker.masks,
                marker.exit_code,
                marker.start_at,
                marker.count,
                shown,
                i + 2,
                end,
            )
        )
        i = end + 2
    return blocks


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md, then docs/*.md by name: the order blocks are run in."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Example:
    """One `ncdc ...` line of a ```sh block or an indented code block, comment removed."""

    path: Path
    line: int
    command: str
    redirect: str | None  # `> FILE`: stdout goes to FILE in the scratch folder

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


# Examples that cannot run on a machine without a GPU, and why; anything else must run.
NEEDS_GPU = {
    "--backend cuda": "runs on a GPU (CuPy)",
    "ncdc bench ": "times kernels on a GPU",
    "ncdc tune ": "times kernels on a GPU",
    "ncdc calibrate": "measures a GPU",
    "--measured ": "reads a record `ncdc bench` wrote on a GPU",
}


def find_examples(path: Path) -> list[Example]:
    """Every `ncdc ...` line of `path`'s ```sh blocks and indented code blocks, in order.
    A synopsis (a line with `[OPTION]` brackets) is not an example."""
    lines = path.read_text(encoding="utf-8").splitlines()
    examples = []
    fence: str | None = None
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = line.lstrip()[3:].strip() if fence is None else None
            continue
        code = fence in ("sh", "") or (fence is None and line.startswith("    "))
        text = line.strip()
        if not code or not text.startswith("ncdc ") or " [" in text:
            continue
        command, _, _comment = text.partition(" #")
        command, _, target = command.partition(" > ")
        examples.append(Example(path, n, command.strip(), target.strip() or None))
    return examples


def gpu_reason(example: Example) -> str | None:
    """Why `example` cannot run without a GPU, or None."""
    return next((why for key, why in NEEDS_GPU.items() if key in example.command), None)


@dataclass
class Runner:
    """Runs `ncdc ...` lines in-process in one scratch folder, by default with a private
    cache (`private_cache=False`: the user's, where only the exit status matters)."""

    folder: Path
    private_cache: bool = True
    outputs: dict[str, tuple[int, str]] = field(default_factory=dict)

    def run_example(self, example: Example) -> tuple[int, str]:
        """Exit status and output of `example`; its `> FILE` gets the output."""
        code, text, data = self.execute(example.command)
        if example.redirect:
            (self.folder / example.redirect).write_text(data, encoding="utf-8")
        return code, text

    def run(self, command: str) -> tuple[int, str]:
        """Exit status and what `command` printed (stdout and stderr, in order). A command
        run before in this folder is not run again: its first output stands."""
        if command not in self.outputs:
            self.outputs[command] = self.execute(command)[:2]
        return self.outputs[command]

    def execute(self, command: str) -> tuple[int, str, str]:
        """Run `command` now: its exit status, stdout and stderr as one text (normalised),
        and stdout alone."""
        from ncdc import output
        from ncdc.cli.main import main

        argv = shlex.split(command)[1:]
        both = io.StringIO()
        data = _Tee(both)
        code = 0
        with (
            _environment(self.folder, self.private_cache),
            contextlib.redirect_stdout(data),
            contextlib.redirect_stderr(_Tee(both)),
        ):
            output.stdout.cache_clear()
            output.stderr.cache_clear()
            try:
                main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            finally:
                output.stdout.cache_clear()
                output.stderr.cache_clear()
        return code, normalise(both.getvalue()), data.getvalue()


class _Tee(io.StringIO):
    """A stream of its own that also writes into a shared one (stdout and stderr, in the
    order a terminal shows them)."""

    def __init__(self, shared: io.StringIO):
        super().__init__()
        self.shared = shared

    def write(self, text: str) -> int:
        self.shared.write(text)
        return super().write(text)


def normalise(text: str) -> str:
    """Lines without trailing blanks, no blank lines at the end."""
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


@contextlib.contextmanager
def _environment(folder: Path, private_cache: bool) -> Iterator[None]:
    saved_env = dict(os.environ)
    saved_cwd = Path.cwd()
    for name in UNSET:
        os.environ.pop(name, None)
    os.environ.update({"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"})
    if private_cache:
        os.environ["NCDC_CACHE"] = str(folder / "cache")
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


@contextlib.contextmanager
def scratch_runner(root: Path = ROOT, private_cache: bool = True) -> Iterator[Runner]:
    """A Runner in a temporary folder that sees the repository's diagrams/, docs/ (its
    examples/) and tests/specs/."""
    with tempfile.TemporaryDirectory(prefix="ncdc-docs-") as tmp:
        folder = Path(tmp)
        (folder / "diagrams").symlink_to(root / "diagrams")
        (folder / "docs").symlink_to(root / "docs")
        (folder / "tests").mkdir()
        (folder / "tests" / "specs").symlink_to(root / "tests" / "specs")
        yield Runner(folder, private_cache)


def produce(block: Block, runner: Runner) -> str:
    """What `block`'s command prints now; DocsError if it exits other than stated."""
    code, text = runner.run(block.command)
    if code != block.exit_code:
        said = f"`{block.command}` exited {code}, the block says {block.exit_code}"
        raise DocsError(f"{block.where}: {said}:\n{text}")
    lines = text.splitlines()
    first = 0
    if block.start_at is not None:
        found = [n for n, line in enumerate(lines) if re.search(block.start_at, line)]
        if not found:
            said = f"no line of `{block.command}`'s output matches from={block.start_at!r}"
            raise DocsError(f"{block.where}: {said}")
        first = found[0]
    last = len(lines) if block.count is None else first + block.count
    return "\n".join(lines[first:last])


def drift(block: Block, text: str) -> str | None:
    """None when the committed block shows `text` (after its masks), else where they part."""
    shown = block.masked(block.shown).splitlines()
    now = block.masked(text).splitlines()
    if shown == now:
        return None
    pairs = zip(shown, now, strict=False)
    n = next((i for i, (old, new) in enumerate(pairs) if old != new), min(len(shown), len(now)))
    old = shown[n] if n < len(shown) else "(the block ends)"
    new = now[n] if n < len(now) else "(the output ends)"
    return (
        f"{display(block.path)}:{block.start + 1 + n}: the block of `{block.command}` "
        f"(line {block.line}) differs from what ncdc prints now\n  shown: {old}\n  now:   {new}"
    )


def check(files: list[Path], runner: Runner) -> list[str]:
    """One message per block that differs from what its command prints now."""
    found = []
    for path in files:
        for block in find_blocks(path):
            message = drift(block, produce(block, runner))
            if message:
                found.append(message)
    return found


def rewrite(path: Path, runner: Runner) -> bool:
    """Rewrite `path`'s blocks that differ from fresh runs; True if the file changed. A block
    that differs only where its masks match is left alone, so a machine-dependent figure
    does not churn."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    blocks = find_blocks(path)
    produced = [produce(block, runner) for block in blocks]  # in reading order: one cache
    for block, now in reversed(list(zip(blocks, produced, strict=True))):
        if drift(block, now) is not None:  # a block equal under its masks stays as it is
            lines[block.start : block.end] = now.splitlines()
    new = "\n".join(lines) + ("\n" if text.endswith("\n") else "")
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


# The pictures README.md and docs/draw.md show, each drawn by ncdc into docs/img/NAME.
PICTURES = (
    ("ncdc draw diagrams/attention.yaml", "attention.svg"),
    ("ncdc draw diagrams/attention.yaml --plain --hardware napkin", "attention-napkin.svg"),
    ("ncdc draw diagrams/attention.yaml --roofline", "attention-roofline.svg"),
    ("ncdc draw diagrams/attention.yaml --tiles", "attention-tiles.svg"),
    ("ncdc draw diagrams/matmul.yaml --tiles", "matmul-tiles.svg"),
)
IMAGES = ROOT / "docs" / "img"


def draw(command: str, name: str, runner: Runner) -> bytes:
    """The picture `command` draws now, as `docs/img/name` would hold it."""
    target = runner.folder / "img" / name
    target.parent.mkdir(exist_ok=True)
    code, text, _ = runner.execute(f"{command} -o {shlex.quote(str(target))}")
    if code != 0:
        raise DocsError(f"`{command}` exited {code}:\n{text}")
    return target.read_bytes()


def check_pictures(runner: Runner, images: Path = IMAGES) -> list[str]:
    """One message per picture in `images` that is not what ncdc draws now."""
    found = []
    for command, name in PICTURES:
        path = images / name
        if not path.exists() or path.read_bytes() != draw(command, name, runner):
            found.append(f"{display(path)}: not what `{command}` draws now")
    return found


def redraw(runner: Runner, images: Path = IMAGES) -> list[str]:
    """Redraw every picture that changed; their names."""
    changed = []
    for command, name in PICTURES:
        picture = draw(command, name, runner)
        path = images / name
        if not path.exists() or path.read_bytes() != picture:
            path.write_bytes(picture)
            changed.append(display(path))
    return changed


def main(argv: list[str] | None = None, report: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare, rewrite nothing; exit 1 on a difference"
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/*.md)"
    )
    args = parser.parse_args(argv)
    files = [f.resolve() for f in args.files] or doc_files()
    try:
        with scratch_runner() as runner:
            pictures = not args.files  # the pictures too, unless files were named
            if args.check:
                messages = check(files, runner)
                messages += check_pictures(runner) if pictures else []
                for message in messages:
                    report(message)
                return 1 if messages else 0
            for path in files:
                if rewrite(path, runner):
                    report(f"rewrote {display(path)}")
            for name in redraw(runner) if pictures else []:
                report(f"redrew {name}")
    except DocsError as e:
        report(f"error: {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
