"""The viewer in a real browser: headless Chromium driven by Playwright for Python.

Skipped (with the reason) when Playwright or Chromium is missing. The browser is found at
``$BDH_CHROMIUM`` or /usr/bin/chromium (Debian's ``chromium`` package); Playwright's own browser
downloads are never used. One browser per module.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import bdh
from bdh.outputs import write_text
from bdh.viz.export import ViewOptions, build_view
from bdh.viz.page import render

from .conftest import SUDOKU

CHROMIUM = os.environ.get("BDH_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)"
)
if not os.path.isfile(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set BDH_CHROMIUM)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pages")
    torch.manual_seed(0)
    text_model = bdh.BDH(bdh.BDHConfig(n_layer=3, n_embd=32, n_head=2, n_neurons=256, dropout=0.0))
    opts = ViewOptions(hubs=24)
    out = {
        "text": write_text(
            folder / "text.html", render(build_view(text_model, list(b"the cat sat on the mat."), options=opts))
        )
    }
    board_model = bdh.BDH(
        bdh.BDHConfig(n_layer=3, n_embd=32, n_head=2, n_neurons=256, vocab_size=5, causal=False, dropout=0.0)
    )
    board = [0] * 36
    board[0], board[35], board[7], board[8] = 2, 3, 1, 1
    out["board"] = write_text(
        folder / "board.html", render(build_view(board_model, board, kind="boardpath", board_size=6, options=opts))
    )
    sudoku_model = bdh.BDH(
        bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, vocab_size=10, causal=False, dropout=0.0)
    )
    puzzle = [int(c) if c.isdigit() else 0 for c in SUDOKU]
    out["sudoku"] = write_text(
        folder / "sudoku.html", render(build_view(sudoku_model, puzzle, kind="sudoku", board_size=9, options=opts))
    )
    ids_model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, vocab_size=40, dropout=0.0))
    out["tokens"] = write_text(
        folder / "tokens.html", render(build_view(ids_model, [3, 17, 4, 22, 39, 0, 3], kind="tokens", options=opts))
    )
    every = ViewOptions(hubs=256)  # every neuron a hub: each neuron holding the fact is ringed in the graph
    out["fact"] = write_text(
        folder / "fact.html", render(build_view(text_model, list(b"the cat sat; the cat"), options=every, fact=4))
    )
    sparse = ViewOptions(hubs=48, edges_per_hub=1)  # few edges: many hubs without one
    out["sparse"] = write_text(
        folder / "sparse.html", render(build_view(text_model, list(b"the cat sat."), options=sparse))
    )
    return out


def open_page(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)
    return page, errors, requests


def canvas(page, sel: str) -> str:
    return page.eval_on_selector(sel, "c => c.toDataURL()")


def test_loads_offline_without_console_errors(browser, pages):
    for name, path in pages.items():
        page, errors, requests = open_page(browser, path)
        try:
            assert errors == []
            assert all(u.startswith("file://") for u in requests), requests  # nothing fetched from the network
            hubs = {"sparse": 48, "fact": 256}.get(name, 24)
            assert page.locator("#graph circle.node").count() == hubs
            assert page.locator("#fact-panel").is_visible() == (name == "fact")
            assert page.locator("#facts tr").count() > 5
            assert page.locator("#lens td").count() > 5  # the logit lens is drawn (a table or a grid)
        finally:
            page.close()


def test_layer_slider_changes_what_is_drawn(browser, pages):
    page, errors, _ = open_page(browser, pages["text"])
    try:
        assert page.input_value("#layer") == "2"
        graph, heat, spars = page.inner_html("#graph"), canvas(page, "#heat-x"), page.inner_html("#sparsity")
        page.focus("#layer")
        page.keyboard.press("Home")  # the slider's own keyboard handling -> layer 0
        assert page.input_value("#layer") == "0"
        assert page.inner_text("#layer-label") == "0 (of 3 layers, counted from 0)"  # was "0 / 2": read as 0 of 2
        assert page.inner_html("#graph") != graph  # nodes lit by layer 0's x and y
        assert canvas(page, "#heat-x") != heat  # layer 0's heatmap
        assert page.inner_html("#sparsity") != spars  # the highlighted layer moved
        assert page.locator("#lens tr.cur td").first.inner_text() == "0"
        assert errors == []
    finally:
        page.close()


def test_token_click_updates_the_attention_view(browser, pages):
    page, errors, _ = open_page(browser, pages["text"])
    try:
        before_svg, before_list = page.inner_html("#attention"), page.inner_text("#attention-list")
        page.click("#tokens .tok[data-t='4']")
        assert page.locator("#tokens .tok.sel").get_attribute("data-t") == "4"
        assert page.input_value("#token") == "4"
        after_list = page.inner_text("#attention-list")
        assert page.inner_html("#attention") != before_svg and after_list != before_list
        assert page.locator("#attention path.arc").count() == 4  # a causal token 4 reads tokens 0..3
        page.click("#tokens .tok[data-t='0']")
        assert page.locator("#attention path.arc").count() == 0
        assert "reads nothing" in page.inner_text("#attention-list")
        # board: clicking a cell redraws the arrows into that cell
        board, board_errors, _ = open_page(browser, pages["board"])
        try:
            arrows = board.inner_html("#attention")
            board.click("#tokens td[data-t='14']")
            assert board.inner_html("#attention") != arrows
            assert board.locator("#attention .arc").count() > 0
            assert "#14" in board.inner_text("#token-label")
            assert board_errors == []
        finally:
            board.close()
        assert errors == []
    finally:
        page.close()


def test_screenshot_is_not_blank(browser, pages):
    from PIL import Image

    page, errors, _ = open_page(browser, pages["board"])
    try:
        shot = np.asarray(Image.open(io.BytesIO(page.screenshot(full_page=True))).convert("L"), dtype=np.float32)
        assert shot.shape[0] > 500 and shot.std() > 10.0
        graph = np.asarray(Image.open(io.BytesIO(page.locator("#graph").screenshot())).convert("L"), dtype=np.float32)
        assert graph.std() > 5.0  # the neuron graph itself is drawn
        assert errors == []
    finally:
        page.close()


def test_graph_panel_uses_its_frame(browser, pages):
    """The hub graph fills its panel (nodes inside it, the connected part spread over most of it), seen in
    the DOM and in a screenshot of the panel."""
    from PIL import Image

    page, errors, _ = open_page(browser, pages["sparse"])
    try:
        nodes = page.eval_on_selector_all(
            "#graph circle.node", "cs => cs.map(c => [+c.getAttribute('cx'), +c.getAttribute('cy')])"
        )
        ends = page.eval_on_selector_all(
            "#graph line",
            (
                "ls => ls.flatMap(l => [[+l.getAttribute('x1'), +l.getAttribute('y1')], "
                "[+l.getAttribute('x2'), +l.getAttribute('y2')]])"
            ),
        )
        xy, linked = np.array(nodes), np.array(ends)
        assert ((xy >= 0) & (xy <= 420)).all()
        span = linked.max(0) - linked.min(0)
        assert (span > 0.6 * 400).all(), span  # the connected hubs are not squeezed into a corner
        shot = np.asarray(Image.open(io.BytesIO(page.locator("#graph").screenshot())).convert("L"), dtype=np.float32)
        ink = np.argwhere(shot < shot.max() - 40)  # drawn pixels: edges and nodes on the light background
        extent = (ink.max(0) - ink.min(0)) / np.array(shot.shape)
        assert (extent > 0.6).all(), extent
        assert errors == []
    finally:
        page.close()


LENS_CELLS = """panel => {
  const lens = panel.querySelector('#lens'), h2 = panel.querySelector('h2');
  const p = panel.getBoundingClientRect(), pad = parseFloat(getComputedStyle(panel).paddingBottom);
  const box = {left: lens.getBoundingClientRect().left, right: lens.getBoundingClientRect().right,
               top: h2.getBoundingClientRect().bottom, bottom: p.bottom - pad};
  const cells = [...lens.querySelectorAll('td, th, rect')].map(e => e.getBoundingClientRect()).filter(r => r.width > 0);
  const lo = k => Math.min(...cells.map(r => r[k])), hi = k => Math.max(...cells.map(r => r[k]));
  return {box: [box.left, box.top, box.right, box.bottom], cells: [lo('left'), lo('top'), hi('right'), hi('bottom')]};
}"""


@pytest.mark.parametrize("name", ["text", "board", "sudoku"])
def test_lens_panel_fills_its_box(browser, pages, name):
    """The logit lens's cells (table cells, board squares) span most of the panel below its title: it shares a
    grid row with the taller attention panel, and a small fixed-size table left two thirds of it empty."""
    page, errors, _ = open_page(browser, pages[name])
    try:
        got = page.eval_on_selector("#lens", "l => (" + LENS_CELLS + ")(l.parentElement)")
        (bx0, by0, bx1, by1), (cx0, cy0, cx1, cy1) = got["box"], got["cells"]
        width, height = (cx1 - cx0) / (bx1 - bx0), (cy1 - cy0) / (by1 - by0)
        # as large as the limiting side allows, most of the other (square boards leave some room); not exactly 1:
        # captions and gaps take a little
        assert max(width, height) > 0.95 and min(width, height) > 0.8, got
        assert cx0 >= bx0 - 1 and cx1 <= bx1 + 1 and cy0 >= by0 - 1 and cy1 <= by1 + 1, got  # nothing cut off
        assert errors == []
    finally:
        page.close()


def test_the_memory_panel_follows_the_layer(browser, pages):
    """The fact's token is marked, one bar per head, the neurons of the selected layer highlighted and ringed in the
    graph; clicking a bar of another layer selects that layer."""
    page, errors, _ = open_page(browser, pages["fact"])
    try:
        assert page.locator("#tokens .tok.fact").count() == 1
        assert page.locator("#tokens .tok.fact").get_attribute("data-t") == "4"
        assert page.locator("#fact-heads rect.fact-head").count() == 3 * 2
        assert "fact 'c' at #4" in page.inner_text("#fact-line")
        rows = page.locator("#fact-neurons tr")
        data = page.evaluate("JSON.parse(document.getElementById('bdh-data').textContent).fact")
        assert rows.count() == 1 + len(data["neurons"])
        for layer in (2, 0):
            if layer != 2:
                page.locator(f"#fact-heads rect.fact-head[data-layer='{layer}']").first.click()
            assert page.input_value("#layer") == str(layer)
            held = [n for n in data["neurons"] if n["layer"] == layer]
            assert page.locator("#fact-neurons tr.cur").count() == len(held)
            assert page.locator("#graph circle.fact-hub").count() == len(held)
        assert errors == []
    finally:
        page.close()
