"""The ```python blocks of README.md and docs/**/*.md run, so that the documented API cannot rot.

Each block runs on its own (none builds on an earlier one), in a fresh namespace, in a fresh working directory that holds what the examples
name (see `workdir`), with the names a block leaves undefined bound first (`PROVIDED`). A block
that raises fails its test with the doc's file and line and the traceback, whose frames point at
the doc's own lines (the block is compiled under the doc's path, at its line numbers).

Two more rules:
- An expression statement whose trailing comment is a Python literal (`m.devices  # [2]`) must
  evaluate to that value.
- A statement that cannot run here (a GPU, a remote URL, an s3:// bucket) is skipped only by a
  marker on one of its lines in the doc, with the reason: `# doc-test: skip (needs a GPU)`. It is
  replaced by `pass` (and named in pytest's warnings summary); the rest of its block still runs.
"""
from __future__ import annotations

import ast
import builtins
import io
import json
import os
import re
import shutil
import textwrap
import tokenize
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import pytest  # noqa: E402

from sl_fixtures import CONFIGS, TINY, write_config  # noqa: E402
import shardload  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# TINY with a vocabulary of 1024: the JAX examples shard embed/lm_head over a mesh axis of 4,
# and JAX wants even splits (TINY's 1001 is made for padding). 8 heads, 2 KV heads, dims that
# 4 and 8 divide: the examples' tp=4 and their 2x4 mesh.
DOC_CONFIG = dict(TINY, vocab_size=1024)

FENCE = re.compile(r"^(\s*)```(python|py)\s*$")
SKIP = re.compile(r"#\s*doc-test:\s*skip\b(.*)$")


@dataclass
class Block:
    doc: Path
    line: int     # the doc's line of the block's first code line (1-based)
    source: str   # dedented code, padded with newlines so that its line numbers are the doc's

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def extract(doc: Path) -> list[Block]:
    lines = doc.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = m.group(1), i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{doc.relative_to(ROOT)}:{i + 1}: ```python never closed"
        body = textwrap.dedent("\n".join(ln[len(indent):] if ln.startswith(indent) else ln
                                         for ln in lines[start:end]))
        blocks.append(Block(doc, start + 1, "\n" * start + body + "\n"))
        i = end + 1
    return blocks


BLOCKS = [b for d in DOCS for b in extract(d)]


def test_blocks_are_found() -> None:
    """Guards the extraction: these docs have API examples, so a broken fence regex cannot make
    the test pass by running nothing."""
    found = {b.doc.relative_to(ROOT).as_posix() for b in BLOCKS}
    assert {"README.md", "docs/python.md"} <= found, found


# --- the working directory and the names the examples leave undefined --------------------------

def workdir(tmp: Path) -> None:
    """ckpt/: a synthetic 4-file checkpoint of DOC_CONFIG (with its config.json); config.json:
    the same config (for synth); llama-3-8b.json: the real one, for plan(config=...)."""
    write_config(tmp / "config.json", DOC_CONFIG)
    shardload.synth(tmp / "config.json", tmp / "ckpt", max_shard_size=1 << 20)
    shutil.copy(CONFIGS / "llama-3-8b.json", tmp / "llama-3-8b.json")


def _torch() -> Any:
    return pytest.importorskip("torch")


def _abstract() -> Any:
    """name -> jax.ShapeDtypeStruct for every tensor of ckpt/, f32 (a conversion on the way),
    2-D tensors split by rows over 8 devices, 1-D ones replicated."""
    jax = _jax()
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:8]), ("model",))
    rows, replicated = NamedSharding(mesh, P("model")), NamedSharding(mesh, P())
    return {t.name: jax.ShapeDtypeStruct(t.shape, np.float32,
                                         sharding=rows if len(t.shape) == 2 else replicated)
            for t in shardload.open("ckpt/").tensors}


def _jax() -> Any:
    jax = pytest.importorskip("jax")
    if jax.device_count() < 8:
        pytest.skip("JAX was started with fewer than 8 devices (XLA_FLAGS set too late)")
    return jax


# Free names of the doc snippets, bound only where a block uses a name it does not define itself
# (so a block that imports torch is not handed one). A name missing here is a NameError.
PROVIDED: dict[str, Callable[[], Any]] = {
    "rank": lambda: 1,                      # this process's tensor-parallel rank, of tp=4
    "name": lambda: "model.norm.weight",    # a parameter name of ckpt/ in the tp layout
    "cfg": lambda: json.loads((CONFIGS / "llama-3-8b.json").read_text()),  # an engine's config
    "torch": _torch,
    "i": lambda: 0,                         # a mesh device index
    "abstract": _abstract,                  # what jax.eval_shape with shardings would give
}

# Modules a block imports that may be absent: without them the block is skipped, with the reason
# (pytest's 's'). torch and jax are pinned in python/requirements-test.txt: `make test` has both.
OPTIONAL = {"torch": _torch, "jax": _jax}


def free_names(tree: ast.Module) -> set[str]:
    bound: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return used - bound - set(dir(builtins))


def imported(tree: ast.Module) -> set[str]:
    """The modules a block imports, by their top-level names; shardload.jax counts as jax."""
    out: set[str] = set()
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        for n in names:
            out.add("jax" if n.startswith("shardload.jax") else n.split(".")[0])
    return out


# --- running a block ----------------------------------------------------------------------------

def comments(source: str) -> dict[int, str]:
    """line -> the text of that line's comment, without the '#'."""
    return {tok.start[0]: tok.string[1:].strip()
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT}


def prepare(block: Block) -> tuple[ast.Module, list[str]]:
    """The block's AST with skip-marked statements replaced by `pass` and commented literals
    checked; the skipped statements, as 'file:line: reason'."""
    tree = ast.parse(block.source, filename=str(block.doc))
    notes = comments(block.source)
    skipped: list[str] = []
    body: list[ast.stmt] = []
    for stmt in tree.body:
        end = stmt.end_lineno or stmt.lineno
        marks = [(ln, m.group(1).strip()) for ln in range(stmt.lineno, end + 1)
                 if ln in notes and (m := SKIP.search("#" + notes[ln]))]
        if marks:
            ln, reason = marks[0]
            assert reason, f"{block.doc.relative_to(ROOT)}:{ln}: doc-test: skip needs a reason"
            skipped.append(f"{block.doc.relative_to(ROOT)}:{ln}: {reason}")
            body.append(ast.copy_location(ast.Pass(), stmt))
            continue
        if isinstance(stmt, ast.Expr) and end in notes:
            try:
                ast.literal_eval(notes[end])
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
            else:
                want = ast.parse(notes[end], mode="eval").body
                call = ast.Call(func=ast.Name("__doc_expect__", ast.Load()),
                                args=[stmt.value, ast.copy_location(want, stmt)], keywords=[])
                stmt = ast.copy_location(ast.Expr(ast.copy_location(call, stmt.value)), stmt)
        body.append(stmt)
    tree.body = body
    return ast.fix_missing_locations(tree), skipped


def expect(got: Any, want: Any) -> None:
    assert got == want, f"the doc's comment says {want!r}, the expression gives {got!r}"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_doc_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree, skipped = prepare(block)
    for s in skipped:  # shown in pytest's warnings summary, so that no skip goes unseen
        warnings.warn(f"doc-test: skipped {s}", stacklevel=1)
    for mod in sorted(imported(tree) & OPTIONAL.keys()):
        OPTIONAL[mod]()
    workdir(tmp_path)
    monkeypatch.chdir(tmp_path)
    ns: dict[str, Any] = {"__name__": "__doc__", "__doc_expect__": expect}
    for n in sorted(free_names(tree)):
        if n in PROVIDED:
            ns[n] = PROVIDED[n]()
    code = compile(tree, str(block.doc), "exec")
    failure = None
    try:
        exec(code, ns)
    except Exception as e:
        tb = e.__traceback__.tb_next if e.__traceback__ else None  # from the doc's frame on
        failure = "".join(traceback.format_exception(type(e), e, tb))
    if failure is not None:
        pytest.fail(f"{block.where}: the ```python block raised\n{failure}", pytrace=False)
