"""Shared test settings: deterministic, small, CPU; tests marked ``cuda`` run only where a GPU is."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

NO_GPU = "needs a CUDA GPU: torch.cuda.is_available() is False on this machine"
#: the benchmark scripts, which the tests run at tiny sizes (`load_benchmark`)
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

# Without a GPU the Triton kernels run in Triton's CPU interpreter (tests/model/test_chunked_triton.py). Triton reads
# TRITON_INTERPRET when it defines its own helpers, at its first import, so the variable is set here, before
# anything imports Triton (importing torch does not), and only where no GPU is: there the GPU tests run the compiled
# kernels.
if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under pytest-xdist (`-n`) the workers share the cores: each takes its share of them, and so do the commands a test
# starts (OMP_NUM_THREADS), or every worker's torch would start a thread a core and the workers would wait on each
# other. A test that needs a thread count sets it itself.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))
    torch.set_num_threads(_share)


def pytest_collection_modifyitems(config, items):
    """Skip every ``@pytest.mark.cuda`` test (tests/cuda) when there is no GPU, before any of them runs."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=NO_GPU)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def readable_figures(monkeypatch):
    """Checks of the figures written through `bdh.plotting` during a test, as a person reads them at 100 % zoom:
    the returned function asserts that each PNG is at least 1200 pixels wide, that no text is under 11 points
    and that every panel (colour bars aside) has a title and both axis labels (a twin axis: its y label); it
    returns the figures' titles (suptitles) by file name."""
    import bdh.plotting as plotting

    seen: list[tuple[object, list[str], str]] = []
    real = plotting._write

    def spy(fig, path, fmt, dpi, tight, min_font=None):
        written = real(fig, path, fmt, dpi, tight, min_font)
        if fmt == "png":
            from matplotlib.text import Text
            from PIL import Image

            with Image.open(written) as img:  # now: the file may be moved (an atomic folder) after the test
                width = img.size[0]

            problems = [
                f"{t.get_text()!r} at {t.get_fontsize()} pt"
                for t in fig.findobj(Text)
                if t.get_text() and t.get_visible() and t.get_fontsize() < 11
            ]
            for i, ax in enumerate(fig.axes):
                if ax.get_label() == "<colorbar>" or not ax.get_visible():
                    continue
                twins = [fig.axes.index(t) for t in ax._twinned_axes.get_siblings(ax) if t in fig.axes]
                if min(twins) < i:  # a twin (ax.twinx()) shares its panel's title and x label
                    if not ax.get_ylabel():
                        problems.append(f"panel {i} (a twin axis) has no y label")
                    continue
                for what, text in (
                    ("title", "".join(ax.get_title(loc) for loc in ("left", "center", "right"))),
                    ("x label", ax.get_xlabel()),
                    ("y label", ax.get_ylabel()),
                ):
                    if not text:
                        problems.append(f"panel {i} has no {what}")
            title = fig._suptitle.get_text() if fig._suptitle is not None else ""
            if width < 1200:
                problems.append(f"{width} px wide")
            seen.append((written, problems, title))
        return written

    monkeypatch.setattr(plotting, "_write", spy)

    def check() -> dict[str, str]:
        assert seen, "no figure was written"
        for path, problems, _ in seen:
            assert not problems, f"{path.name}: {'; '.join(problems)}"
        return {path.name: title for path, _, title in seen}

    return check


@pytest.fixture
def load_benchmark(monkeypatch):
    """``load_benchmark("tasks")``: benchmarks/tasks.py as a module, loaded as when run as a file (its own folder on
    ``sys.path`` for ``_shared``, the module in ``sys.modules`` for its dataclasses), both undone after the test."""

    def load(name: str):
        monkeypatch.syspath_prepend(str(BENCHMARKS))
        spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        return module

    return load
