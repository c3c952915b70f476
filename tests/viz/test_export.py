"""The viewer's data: blockwise hub ranking equals the dense computation, and every reduction matches the
model's own capture."""

from __future__ import annotations

import json

import pytest
import torch

import bdh
from bdh.analysis.memory import trace_fact
from bdh.model.graph import flat_decoders
from bdh.viz.export import ViewOptions, build_view, hub_strength, neuron_graph, token_labels
from bdh.viz.page import embed_json, render


@pytest.fixture(scope="module")
def model() -> bdh.BDH:
    torch.manual_seed(1)
    return bdh.BDH(bdh.BDHConfig(n_layer=3, n_embd=32, n_head=2, n_neurons=256, dropout=0.0)).eval()


def dense_gx(model: bdh.BDH) -> torch.Tensor:
    Dx, _, E = flat_decoders(model)
    return Dx @ E  # row = target, column = source


def test_hub_strength_blockwise_equals_dense(model):
    G = dense_gx(model).clamp_min(0)
    G.fill_diagonal_(0)
    want = G.sum(dim=1) + G.sum(dim=0)
    for block in (37, 256, 4096):  # uneven blocks, one block, larger than n
        torch.testing.assert_close(hub_strength(model, block), want, rtol=1e-5, atol=1e-6)


def test_neuron_graph_keeps_the_strongest_hub_edges(model):
    g = neuron_graph(model, hubs=20, edges_per_hub=2, block=64)
    ids = [nd["id"] for nd in g["nodes"]]
    strength = hub_strength(model)
    assert set(ids) == set(torch.topk(strength, 20).indices.tolist())
    G = dense_gx(model)[ids][:, ids]
    G.fill_diagonal_(float("-inf"))
    top = torch.topk(G.reshape(-1), 40).values
    assert len(g["edges"]) == 40  # a random model has plenty of positive entries
    wmax = float(top[0])
    for (s, t, w), v in zip(g["edges"], top.tolist()):
        assert G[t, s].item() == pytest.approx(v)  # edge source -> target is entry [target, source]
        assert w == pytest.approx(v / wmax, abs=1e-3)
    assert len(g["pos"]) == 20 and all(0.0 <= c <= 1.0 for p in g["pos"] for c in p)


def test_view_matches_the_capture(model):
    text = b"the cat sat on the mat"
    opts = ViewOptions(hubs=16, heat_neurons=24, attn_top=4, lens_top=3)
    v = build_view(model, list(text), options=opts)
    json.dumps(v, allow_nan=False)  # JSON-ready
    with torch.no_grad():
        _, cap = model(torch.tensor([list(text)]), capture=True)
    T, L = len(text), 3
    assert v["meta"]["layers"] == L and v["meta"]["num_params"] == model.num_params()
    assert v["meta"]["state_size"] == model.state_size()
    hubs = torch.tensor([nd["id"] for nd in v["graph"]["nodes"]])
    for layer in range(L):
        flat_y = cap.y[layer][0].transpose(0, 1).reshape(T, -1)
        flat_x = cap.x[layer][0].transpose(0, 1).reshape(T, -1)
        # sparsity
        assert v["sparsity"]["y"][layer] == pytest.approx(float((flat_y > 0).float().mean()), abs=1e-3)
        assert len(v["sparsity"]["x_token"][layer]) == T
        # hubs lit: the largest hub activation is 255, zeros stay 0
        lit = torch.tensor(v["lit"]["x"][layer])
        hx = flat_x[:, hubs]
        assert lit.max() == 255 and ((lit == 0) == (hx * 255 / hx.max() < 0.5)).all()
        # heatmap columns are the most active neurons
        cols = v["heat"]["neurons_y"][layer]
        assert set(cols) == set(torch.topk(flat_y.sum(0), 24).indices.tolist())
        # attention: strongest sources by magnitude, strictly causal
        att = cap.attention[layer][0].mean(0)
        for t in (0, 5, T - 1):
            srcs = [s for s, _ in v["attention"][layer][t]]
            assert all(s < t for s in srcs)
            if t:
                k = min(4, t)
                assert set(srcs) == set(torch.topk(att[t, :t].abs(), k).indices.tolist())
        # logit lens: top-1 per token is the argmax of the layer's readout
        top1 = [row[0][0] for row in v["lens"][layer]]
        assert top1 == cap.logits[layer][0].argmax(-1).tolist()
    assert v["labels"][3] == "\u2423" and v["labels"][0] == "t"


def test_board_view_lens_is_the_argmax_per_cell():
    torch.manual_seed(2)
    m = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=128, vocab_size=5, causal=False)).eval()
    board = [0] * 16
    board[0], board[15], board[5] = 2, 3, 1
    v = build_view(m, board, kind="boardpath", board_size=4, options=ViewOptions(hubs=8))
    with torch.no_grad():
        _, cap = m(torch.tensor([board]), capture=True)
    assert v["lens"][1] == cap.logits[1][0].argmax(-1).tolist()
    assert v["labels"][:2] == ["S", "."] and v["labels"][5] == "#"
    # bidirectional: a cell may read cells after it
    assert any(s > t for t, row in enumerate(v["attention"][0]) for s, _ in row)
    with pytest.raises(ValueError, match="not 5 x 5"):
        build_view(m, board, kind="boardpath", board_size=5)


def test_bad_options_and_inputs(model):
    with pytest.raises(ValueError, match="hubs"):
        ViewOptions(hubs=0)
    with pytest.raises(ValueError, match="kind"):
        build_view(model, [1, 2], kind="image")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        build_view(model, [1, 999])


def test_page_is_self_contained_and_escapes_script_ends(model):
    text = b"</script><script>alert(1)</script> & \xe2\x80\xa8"
    v = build_view(model, list(text), options=ViewOptions(hubs=8), title="a <b> title")
    page = render(v)
    assert page.count("</script>") == 2  # the JSON element and the viewer script, nothing from the data
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page and "<link" not in page and " src=" not in page
    start = page.index('id="bdh-data">') + len('id="bdh-data">')
    data = json.loads(page[start : page.index("</script>", start)])
    assert data["tokens"] == list(text) and data["title"] == "a <b> title"
    assert "<title>a &lt;b&gt; title</title>" in page
    assert "\\u003c/script" in embed_json({"s": "</script>"})


def test_token_labels():
    assert token_labels([65, 32, 10, 0, 200], "text") == ["A", "\u2423", "\u21b5", "\\x00", "\\xc8"]
    assert token_labels([0, 1, 2, 3, 4], "boardpath") == [".", "#", "S", "E", "*"]
    assert token_labels([0, 7], "sudoku") == [".", "7"]


def test_size_stays_small_without_n_by_n(monkeypatch):
    """A wider model (n = 4096) and a 256-token prompt: the page stays small and G_x is only ever formed
    in row blocks (no matmul output has n x n entries)."""
    torch.manual_seed(3)
    m = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=4, n_neurons=4096, dropout=0.0)).eval()
    n = m.config.n
    biggest = []
    real = torch.Tensor.__matmul__

    def spy(a, b):
        out = real(a, b)
        biggest.append(out.numel())
        return out

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    v = build_view(m, list(range(256)), options=ViewOptions(block=512))
    monkeypatch.undo()
    assert max(biggest) < n * n
    assert max(biggest) >= 512 * n  # the blocks were used
    size = len(render(v).encode())
    assert size < 3_000_000, size


def test_layout_fills_the_panel_with_the_connected_hubs_and_rows_the_isolated_ones():
    """Isolated hubs used to be laid out by the spring model too, far out, which squeezed the connected
    ones into a corner once everything was scaled to the panel."""
    from bdh.viz.export import ISOLATED_PER_ROW, _layout

    edges = [
        [0, 1, 1.0],
        [1, 2, 0.5],
        [2, 3, 0.2],
        [3, 0, 0.1],
        [4, 5, 0.3],
        [5, 0, 0.3],
        [6, 6, 0.9],
    ]  # 6: a self-loop only
    k = 6 + 1 + ISOLATED_PER_ROW + 2  # two rows of isolated hubs
    pos = torch.tensor(_layout(k, edges, seed=0))
    assert bool(((pos >= 0.04 - 1e-9) & (pos <= 0.96 + 1e-9)).all())
    linked, alone = pos[:6], pos[6:]
    span = linked.max(0).values - linked.min(0).values
    assert span[0] > 0.9 and span[1] > 0.7  # the connected part fills the width and most of the height
    assert bool((alone[:, 1] > linked[:, 1].max() - 1e-9).all())  # the isolated hubs lie below it
    assert len({round(float(y), 3) for y in alone[:, 1]}) == 2  # in two rows
    assert _layout(3, [], 0) == [[0.193, 0.5], [0.5, 0.5], [0.807, 0.5]]  # no edges at all: one row across the middle


def test_the_memory_panel_is_the_fact_trace_with_its_hubs(model):
    """The document's fact is `trace_fact`'s trace of the same tokens; each held neuron names its hub in the graph
    (head * N + neuron among the graph's nodes) or none; no fact, no panel; a bad fact is one line, before the run."""
    text = list(b"the cat sat on the mat; the cat")
    view = build_view(model, text, options=ViewOptions(hubs=64), fact=4)
    F, want = view["fact"], trace_fact(model, torch.tensor(text), 4, top=16).to_dict()
    assert (F["write"], F["read"], F["predicted"]) == (4, len(text) - 1, want["predicted"])
    assert [(h["layer"], h["head"]) for h in F["heads"]] == [(layer, h) for layer in range(3) for h in range(2)]
    for got, ref in zip(F["heads"] + F["neurons"], want["heads"] + want["neurons"], strict=True):
        assert got == pytest.approx({**ref, **({"hub": got["hub"]} if "hub" in got else {})})
    ids = [nd["id"] for nd in view["graph"]["nodes"]]
    N = model.config.N
    for n in F["neurons"]:
        flat = n["head"] * N + n["neuron"]
        assert (ids[n["hub"]] == flat) if n["hub"] is not None else flat not in ids
    assert any(n["hub"] is not None for n in F["neurons"]) and any(n["hub"] is None for n in F["neurons"])
    assert F["predicted_label"] == token_labels([F["predicted"]], "text")[0]
    assert build_view(model, text, options=ViewOptions(hubs=8))["fact"] is None
    for bad in (len(text) - 1, -1, True):
        with pytest.raises(ValueError, match="must lie before the input's last token"):
            build_view(model, text, fact=bad)
    with pytest.raises(ValueError, match="not in a boardpath input"):
        build_view(model, [0] * 9, kind="boardpath", board_size=3, fact=1)
