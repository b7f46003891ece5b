"""The zoo's libraries for a phone stay as small as they are (issue 16, item 5: keep start-up
and size from growing).

Each model of `benchmarks.compare`'s table is compiled untuned for android-arm64, the target
an app ships, with its weights in weights.bin, so the library holds code alone. Three figures
may shrink but not grow past their budget below: the stripped library's bytes (llvm-objcopy
--strip-all, as `benchmarks.startup` reports it), the kernel count after fusion and the
workspace the memory plan lays out. Budgets: the figures of 2026-12-03, code with 10% room
(LLVM's choices move a few percent with unrelated changes), workspace with 5%, kernels with
none. A change that has to raise one says why in its commit message.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

import tensorir as tir
from benchmarks.startup import stripped_size
from benchmarks.zoo import build

TARGET = "android-arm64"
# model: (kernels, stripped code bytes, workspace bytes), measured 2026-12-03 (with tir_pool_wake)
MEASURED = {
    "mobilenet_v1": (25, 40_808, 4_816_896),
    "mobilenet_v2_224": (41, 68_264, 2_408_448),
    "mobilenet_v2_96": (49, 73_120, 1_032_192),
    "squeezenet1_1": (31, 75_256, 3_928_576),
    "resnet18": (24, 78_656, 5_075_968),
    "resnet50": (57, 110_920, 8_028_160),
    "bert_encoder": (31, 40_656, 786_944),
}
CODE_ROOM, WORKSPACE_ROOM = 1.10, 1.05


def figures(model: str) -> tuple[int, int, int]:
    """(kernels, stripped code bytes, workspace bytes) of the zoo model built for TARGET."""
    art = tir.compile(build(model), target=TARGET, weights="external")
    with tempfile.TemporaryDirectory() as tmp:
        folder = art.export(Path(tmp) / model)
        code = stripped_size(folder / art.manifest["library"])
    return len(art.manifest["kernels"]), code, int(art.manifest["workspace_bytes"])


def over_budget(model: str, got: tuple[int, int, int]) -> list[str]:
    """What in `got` grew past the model's budget, one phrase each."""
    kernels, code, workspace = MEASURED[model]
    limits = (kernels, int(code * CODE_ROOM), int(workspace * WORKSPACE_ROOM))
    names = ("kernels", "stripped code bytes", "workspace bytes")
    return [
        f"{n} {g:,} over the budget {lim:,}" for n, g, lim in zip(names, got, limits, strict=True) if g > lim
    ]


def test_over_budget_names_each_figure_that_grew() -> None:
    """The check itself: equal passes, a kernel more or code 11% larger fails, each named."""
    kernels, code, workspace = MEASURED["resnet18"]
    assert over_budget("resnet18", (kernels, code, workspace)) == []
    grown = over_budget("resnet18", (kernels + 1, int(code * 1.11), workspace))
    assert grown == [
        f"kernels {kernels + 1:,} over the budget {kernels:,}",
        f"stripped code bytes {int(code * 1.11):,} over the budget {int(code * CODE_ROOM):,}",
    ]


@pytest.mark.parametrize("model", sorted(MEASURED))
def test_phone_library_stays_within_its_budget(model: str) -> None:
    got = figures(model)
    print(f"{model} for {TARGET}: {got[0]} kernels, {got[1]:,} B stripped code, {got[2]:,} B workspace")
    grown = over_budget(model, got)
    assert not grown, f"{model} for {TARGET}: " + "; ".join(grown) + f" (budgets in {__file__})"
