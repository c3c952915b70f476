"""BDH (and the GPT baseline) through Hugging Face ``transformers``: `bdh.hf` and `bdh.hf_tokenizer`.

Everything runs offline: the folders are local, and ``HF_HUB_OFFLINE`` is on for every test.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

import huggingface_hub.constants
from model.helpers import EVERY_FIELD  # tests/model/helpers.py
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, pipeline

import bdh
import bdh.hf  # registers bdh's models with the auto classes
from bdh import BDH, BDHConfig
from bdh.baselines.gpt import GPT, GPTConfig
from bdh.hf import CACHE_NAME, BDHCache, BDHCacheLayer, BDHForCausalLM, BDHHFConfig, GPTForCausalLM
from bdh.hf_tokenizer import BDHByteTokenizer

TINY = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_neurons": 256, "vocab_size": 256}
# The wrapper calls the same bdh code on the same weights, so logits agree to the last bit in practice;
# the tolerance only allows for a different summation order (thread scheduling, another BLAS) and is far
# below anything that would change a token.
ATOL = 1e-5


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    """No network: huggingface_hub refuses every HTTP request."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def _bdh(seed: int = 0, scale: float = 1.0, **overrides) -> BDH:
    torch.manual_seed(seed)
    model = BDH(BDHConfig(**{**TINY, **overrides})).eval()
    with torch.no_grad():  # larger weights: peaked distributions, no near-ties between the top tokens
        for p in model.parameters():
            p.mul_(scale)
    return model


def _save(model: torch.nn.Module, folder: Path) -> Path:
    model.save_pretrained(folder)  # bdh's own save_pretrained
    BDHByteTokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[BDH, Path]:
    model = _bdh(seed=3)
    return model, _save(model, tmp_path_factory.mktemp("bdh"))


@pytest.fixture(scope="module")
def hf_model(saved) -> BDHForCausalLM:
    return AutoModelForCausalLM.from_pretrained(saved[1])


def _bytes(text: str) -> torch.Tensor:
    return torch.tensor([list(text.encode("utf-8"))])


# ------------------------------------------------------------------ loading and logits
def test_bdh_folder_loads_with_the_auto_classes(saved, hf_model):
    model, folder = saved
    assert isinstance(AutoConfig.from_pretrained(folder), BDHHFConfig)
    assert isinstance(hf_model, BDHForCausalLM) and not hf_model.training
    assert hf_model.config.to_bdh() == model.config
    assert isinstance(AutoTokenizer.from_pretrained(folder), BDHByteTokenizer)
    wrapped = BDHForCausalLM.from_bdh(model)  # an in-memory model, without a folder
    idx = torch.randint(0, 256, (1, 5))
    with torch.no_grad():
        assert torch.equal(wrapped(idx).logits, model(idx))


@pytest.mark.parametrize("damping", [None, "alibi"])
def test_logits_equal_bdh_forward(tmp_path, damping):
    model = _bdh(damping=damping)  # alibi: the non-persistent damping buffer must be rebuilt on load
    hf = AutoModelForCausalLM.from_pretrained(_save(model, tmp_path))
    idx = torch.randint(0, 256, (2, 17))
    with torch.no_grad():
        out = hf(idx)
        torch.testing.assert_close(out.logits, model(idx), atol=ATOL, rtol=0)
    assert out.logits.shape == (2, 17, 256) and getattr(out, CACHE_NAME) is None  # scoring builds no state


def test_loss_is_next_token_cross_entropy(hf_model, saved):
    idx = torch.randint(0, 256, (2, 9))
    labels = idx.clone()
    labels[0, :4] = -100
    with torch.no_grad():
        loss = hf_model(idx, labels=labels).loss
        ref = torch.nn.functional.cross_entropy(saved[0](idx)[:, :-1].reshape(-1, 256), labels[:, 1:].reshape(-1))
    torch.testing.assert_close(loss, ref, atol=ATOL, rtol=0)


# ------------------------------------------------------------------ generation on the recurrent state
@pytest.mark.parametrize("damping", [None, "alibi"])
def test_greedy_generate_equals_bdh_generate(tmp_path, damping):
    model = _bdh(seed=1, damping=damping)
    hf = AutoModelForCausalLM.from_pretrained(_save(model, tmp_path))
    prompt = torch.randint(0, 256, (1, 7))
    ours = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=20, do_sample=False)
    assert torch.equal(ours, model.generate(prompt, 20, temperature=0))  # token ids, exactly


def test_batch_of_two_prompts_equals_bdh_generate(hf_model, saved):
    prompt = torch.randint(0, 256, (2, 5))
    ours = hf_model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False)
    assert torch.equal(ours, saved[0].generate(prompt, 12, temperature=0))


def test_generation_feeds_one_token_per_step_on_a_fixed_size_state(hf_model):
    seen = []

    def record(module, args, kwargs):
        cache = kwargs.get(CACHE_NAME)
        seen.append((kwargs["input_ids"].shape[1], cache.get_seq_length() if cache is not None else None))
        if cache is not None:
            seen[-1] += (tuple(cache.state.rho.shape), tuple(cache.layers[0].rho.shape))

    handle = hf_model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        hf_model.generate(torch.randint(1, 256, (2, 6)), max_new_tokens=5, do_sample=False)
    finally:
        handle.remove()
    state_shape = (2, 2, 2, 128, 32)  # (L, B, H, N, D): the same at every step; each layer holds (B, H, N, D)
    assert seen == [(6, None)] + [(1, 6 + i, state_shape, state_shape[1:]) for i in range(4)]


def test_cache_continues_a_forward(hf_model, saved):
    idx = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        first = hf_model(idx[:, :7], use_cache=True)
        cache = first[CACHE_NAME]
        assert isinstance(cache, BDHCache) and cache.get_seq_length() == 7
        assert len(cache.layers) == 2 and all(isinstance(layer, BDHCacheLayer) for layer in cache.layers)
        rest = hf_model(idx[:, 7:], **{CACHE_NAME: cache})
        logits = torch.cat([first.logits, rest.logits], dim=1)
        torch.testing.assert_close(logits, saved[0](idx), atol=ATOL, rtol=0)  # chunked vs parallel form
    assert cache.get_seq_length() == 12


def test_left_padded_batch_generates_each_row_as_if_alone(tmp_path):
    # row 0 runs at absolute positions shifted by its padding; RoPE scores depend only on relative
    # positions, so the tokens are the same up to rounding (peaked weights keep argmax away from ties)
    model = _bdh(seed=2, scale=20.0)
    hf = AutoModelForCausalLM.from_pretrained(_save(model, tmp_path))
    tok = BDHByteTokenizer()
    texts = ["Hi", "Hello there"]
    batch = tok(texts, return_tensors="pt", padding=True)
    assert batch["attention_mask"][0, 0] == 0  # padded on the left
    out = hf.generate(**batch, max_new_tokens=10, do_sample=False)
    for row, text in zip(out, texts):
        assert torch.equal(row[-10:], model.generate(_bytes(text), 10, temperature=0)[0, -10:])
    # without a cache every step re-reads the whole padded batch: same tokens, more work
    assert torch.equal(hf.generate(**batch, max_new_tokens=10, do_sample=False, use_cache=False), out)
    # beam search reorders the state's rows between steps
    beams = hf.generate(**batch, max_new_tokens=4, do_sample=False, num_beams=3)
    assert beams.shape == (2, batch["input_ids"].shape[1] + 4)


def test_generate_logs_no_deprecation_or_other_warning(hf_model, saved, caplog):
    """transformers 5.24 renamed ``past_key_values`` to ``cache``: nothing bdh.hf does may use the old name."""
    import logging
    import warnings

    logging.Logger.warning_once.cache_clear()  # transformers logs each message once per process: forget them
    prompt = torch.randint(0, 256, (2, 5))
    mask = torch.ones_like(prompt)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING, logger="transformers"):
        warnings.simplefilter("always")
        hf_model.generate(prompt, attention_mask=mask, max_new_tokens=4, do_sample=False)
        hf_model.generate(prompt, attention_mask=mask, max_new_tokens=4, do_sample=True, top_k=5)
        hf_model.generate(prompt, attention_mask=mask, max_new_tokens=4, do_sample=False, num_beams=2)
        out = hf_model.generate(
            prompt, attention_mask=mask, max_new_tokens=2, return_dict_in_generate=True, output_hidden_states=True
        )
        with torch.no_grad():
            first = hf_model(prompt, use_cache=True)
            hf_model(prompt[:, :1], **{CACHE_NAME: first[CACHE_NAME]})
        pipeline("text-generation", model=hf_model, tokenizer=BDHByteTokenizer())("To be", max_new_tokens=3)
    assert out.sequences.shape == (2, 7)
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in caplog.records if r.name.startswith("transformers")] == []


def test_cache_layers_hold_each_layers_state(hf_model, saved):
    """One BDHCacheLayer per layer with rho (B, H, N, D) and the position, the state `BDH.step` computes."""
    model = saved[0]
    idx = torch.randint(0, 256, (2, 9))
    with torch.no_grad():
        cache = hf_model(idx, use_cache=True)[CACHE_NAME]
        _, state = model.step(idx, model.init_state(2), mode="chunked")
    assert [layer.pos for layer in cache.layers] == [9, 9] and cache.get_seq_length() == 9
    for layer, (cached, expected) in enumerate(zip(cache.layers, state.rho)):
        assert cached.rho.shape == (2, 2, 128, 32)  # (B, H, N, D)
        assert cache.get_recurrent_state(layer) is cached.rho  # the transformers linear-attention accessor
        torch.testing.assert_close(cached.rho, expected, atol=ATOL, rtol=0)
    assert cache.batch_size == 2 and cache.get_max_length() == -1 and not cache.is_compileable
    swapped = torch.tensor([1, 0])
    cache.reorder_cache(swapped)
    for cached, expected in zip(cache.layers, state.rho):
        torch.testing.assert_close(cached.rho, expected[swapped], atol=ATOL, rtol=0)
    assert torch.equal(cache.state.rho, torch.stack([layer.rho for layer in cache.layers]))
    cache.batch_repeat_interleave(2)
    assert cache.batch_size == 4 and cache.state.rho.shape == (2, 4, 2, 128, 32)
    cache.batch_select_indices(torch.tensor([0, 3]))
    torch.testing.assert_close(cache.state.rho, state.rho[:, [1, 0]], atol=ATOL, rtol=0)
    cache.reset()
    assert cache.state is None and cache.get_seq_length() == 0


@pytest.mark.parametrize("grad", [False, True], ids=["in-place", "autograd"])
def test_cache_step_by_step_equals_the_full_forward(saved, grad):
    """Token by token through the cache (the recurrent form, one state update per token) against one parallel
    forward over the whole sequence. The two sum the same products in a different order: in float32 the
    logits (of order 1) differ by ~1e-6, so ATOL = 1e-5 separates rounding from any real error (a wrong
    position or a missed update moves them by 1e-2 or more)."""
    model = saved[0]
    hf = BDHForCausalLM.from_bdh(model)
    idx = torch.randint(0, 256, (2, 12))
    with torch.set_grad_enabled(grad):  # autograd: the state is replaced each step, not updated in place
        cache = BDHCache(model.config.n_layer)
        steps = [hf(idx[:, t : t + 1], **{CACHE_NAME: cache}).logits for t in range(idx.shape[1])]
        full = model(idx)
    assert cache.get_seq_length() == 12
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


def test_crop_is_refused_in_one_line(hf_model):
    with torch.no_grad():
        cache = hf_model(torch.randint(0, 256, (1, 6)), use_cache=True)[CACHE_NAME]
    assert not cache.is_croppable
    for target in (cache, cache.layers[0]):
        with pytest.raises(NotImplementedError, match="cannot be rolled back") as err:
            target.crop(3)
        assert "\n" not in str(err.value) and "Eq. 8" in str(err.value)


def _beam_search(model: BDH, prompt: list[int], beams: int, steps: int) -> list[int]:
    """Brute-force beam search: every step re-reads each beam in full with `BDH.forward` and keeps the
    ``beams`` best continuations by summed log-probability (no end token, so all have the same length)."""
    seqs = [(0.0, prompt)]
    with torch.no_grad():
        for _ in range(steps):
            grown = []
            for score, seq in seqs:
                logp = torch.log_softmax(model(torch.tensor([seq]))[0, -1].double(), dim=-1)
                top = logp.topk(beams)
                grown += [(score + v.item(), seq + [t.item()]) for v, t in zip(top.values, top.indices)]
            seqs = sorted(grown, key=lambda c: -c[0])[:beams]
    return seqs[0][1]


def test_beam_search_equals_brute_force(monkeypatch):
    # scale 4: the best two beams stay >= 0.07 nats apart (seed 0), far above float rounding, and
    # 2 beams find sequences greedy misses, so the state rows must follow their beams
    model = _bdh(seed=0, scale=4.0)
    hf = BDHForCausalLM.from_bdh(model)
    torch.manual_seed(100)
    prompt = torch.randint(0, 256, (2, 5))
    mask = torch.ones_like(prompt)
    greedy = model.generate(prompt, 6, temperature=0)
    assert torch.equal(hf.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, num_beams=1), greedy)
    beams = hf.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, num_beams=2)
    expected = torch.tensor([_beam_search(model, row.tolist(), 2, 6) for row in prompt])
    assert torch.equal(beams, expected)
    assert not torch.equal(beams, greedy)  # the test can tell: beam search chose differently
    no_cache = hf.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, num_beams=2, use_cache=False)
    assert torch.equal(no_cache, expected)
    monkeypatch.setattr(BDHCache, "reorder_cache", lambda self, beam_idx: None)  # a cache that forgets to reorder
    wrong = hf.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, num_beams=2)
    assert not torch.equal(wrong, expected)


def test_output_hidden_states(hf_model, saved):
    """L + 1 tensors (B, T, D): v_0 = LN(embedding), then every layer's output; logits = last @ readout."""
    model = saved[0]
    idx = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        out = hf_model(idx, output_hidden_states=True)
        _, cap = model(idx, capture=True)
        v0 = model.embed_tokens(idx).squeeze(1)
    hidden = out.hidden_states
    assert isinstance(hidden, tuple) and len(hidden) == model.config.n_layer + 1
    assert all(h.shape == (2, 8, 32) for h in hidden)
    torch.testing.assert_close(hidden[0], v0, atol=ATOL, rtol=0)
    for ours, theirs in zip(hidden[1:], cap.v):
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)
    torch.testing.assert_close(hidden[-1] @ model.readout, out.logits, atol=ATOL, rtol=0)
    assert hf_model(idx).hidden_states is None  # only when asked
    with torch.no_grad():  # through the cache: the states of the tokens read in this call
        first = hf_model(idx[:, :5], use_cache=True, output_hidden_states=True)
        rest = hf_model(idx[:, 5:], output_hidden_states=True, **{CACHE_NAME: first[CACHE_NAME]})
    for whole, a, b in zip(hidden, first.hidden_states, rest.hidden_states):
        torch.testing.assert_close(torch.cat([a, b], dim=1), whole, atol=ATOL, rtol=0)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [1] * 8])  # left padding: zeros at the pads
    with torch.no_grad():
        padded = hf_model(idx, attention_mask=mask, output_hidden_states=True).hidden_states
        alone = hf_model(idx[:1, 3:], output_hidden_states=True).hidden_states
    assert all(bool((h[0, :3] == 0).all()) for h in padded)
    for p, a, whole in zip(padded, alone, hidden):
        torch.testing.assert_close(p[0, 3:], a[0], atol=1e-4, rtol=0)  # positions shifted by 3: RoPE rounding
        torch.testing.assert_close(p[1], whole[1], atol=ATOL, rtol=0)
    gpt = GPTForCausalLM.from_bdh(GPT(GPTConfig(n_layer=1, n_embd=16, n_head=2, seq_len=16)))
    with pytest.raises(ValueError, match="output_hidden_states"):
        gpt(idx[:, :4], output_hidden_states=True)


def test_a_run_folder_names_its_model_folder(saved, tmp_path):
    run = tmp_path / "run"
    _save(saved[0], run / "best")
    (run / "config.yaml").write_text("model: {name: bdh}\n")
    for load in (AutoModelForCausalLM.from_pretrained, AutoConfig.from_pretrained, AutoTokenizer.from_pretrained):
        with pytest.raises(bdh.errors.UserError, match=f"run folder, not a model folder: pass {run / 'best'}"):
            load(run)
    with pytest.raises(bdh.errors.UserError, match="pass .*best"):
        BDHForCausalLM.from_pretrained(run)
    assert isinstance(AutoModelForCausalLM.from_pretrained(run / "best"), BDHForCausalLM)
    fresh = tmp_path / "fresh"  # a run that has not evaluated yet
    fresh.mkdir()
    (fresh / "config.yaml").write_text("model: {name: bdh}\n")
    with pytest.raises(bdh.errors.UserError, match="no saved model yet"):
        AutoModelForCausalLM.from_pretrained(fresh)


# ------------------------------------------------------------------ pipeline and tokenizer
def test_text_generation_pipeline_with_the_byte_tokenizer(hf_model, saved):
    tok = BDHByteTokenizer()
    pipe = pipeline("text-generation", model=hf_model, tokenizer=tok)
    text = pipe("To be", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    expected = saved[0].generate(_bytes("To be"), 8, temperature=0)[0]
    assert text == tok.decode(expected, skip_special_tokens=True)
    from_folder = pipeline("text-generation", model=str(saved[1]))  # model and tokenizer from the folder
    assert from_folder("To be", max_new_tokens=8, do_sample=False)[0]["generated_text"] == text


def test_byte_tokenizer_round_trip(tmp_path):
    tok = BDHByteTokenizer()
    text = "héllo, wörld \n"
    ids = tok(text)["input_ids"]
    assert ids == list(text.encode("utf-8")) and tok.decode(ids) == text
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(again, BDHByteTokenizer) and again(text)["input_ids"] == ids
    assert again.padding_side == "left" and again.pad_token_id == 0 and len(again) == 256


# ------------------------------------------------------------------ loglikelihood (lm-evaluation-harness)
def test_loglikelihood_on_a_right_padded_batch(hf_model, saved):
    """HFLM scores (context, continuation) pairs: right-pad, one forward, log_softmax, gather."""
    pairs = [("The cat", " sat"), ("A", " longer answer")]
    seqs = [list((c + x).encode()) for c, x in pairs]
    T = max(map(len, seqs))
    idx = torch.tensor([s + [0] * (T - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs])
    with torch.no_grad():
        logp = torch.log_softmax(hf_model(idx, attention_mask=mask).logits, dim=-1)
        for row, ((context, _cont), seq) in enumerate(zip(pairs, seqs)):
            start, end = len(context.encode()), len(seq)
            targets = torch.tensor(seq[start:end])
            ours = logp[row, start - 1 : end - 1].gather(-1, targets[:, None]).sum()
            alone = torch.log_softmax(saved[0](torch.tensor([seq])), dim=-1)[0, start - 1 : end - 1]
            torch.testing.assert_close(ours, alone.gather(-1, targets[:, None]).sum(), atol=ATOL, rtol=0)
        with pytest.raises(ValueError, match="right-padded"):
            hf_model(idx, attention_mask=mask, use_cache=True)  # pads would enter the state
        with pytest.raises(ValueError, match="attention_mask"):
            hf_model(idx, attention_mask=torch.tensor([[1, 0] * (T // 2) + [1] * (T % 2)] * 2))


_MC_DOCS = [
    {"question": "1 + 1 =", "choices": [" 2", " 3", " 11"], "answer": 0},
    {"question": "The sky is", "choices": [" blue", " loud"], "answer": 0},
    {"question": "Fire is", "choices": [" cold", " hot"], "answer": 1},
    {"question": "To be or not to", "choices": [" be", " see", " go"], "answer": 0},
    {"question": "Water is", "choices": [" dry", " wet"], "answer": 1},
]

_MC_TASK = """task: bdh_tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {cache}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


@pytest.mark.extra  # the eval extra
def test_lm_evaluation_harness_runs_a_local_task(saved, tmp_path):
    """A real lm-evaluation-harness run: its ``hf`` model type loads the folder through the Auto classes
    (``import bdh.hf`` registered them) and scores a multiple-choice task from a local YAML file over a local
    JSONL file. Every log-likelihood it reports equals the sum of log p(continuation | context) from
    `BDH.forward` on that one sequence; its right-padded batches change nothing (attention is causal). The
    tolerance 1e-4 allows float32 rounding in sums of a few dozen log-probabilities of magnitude ~5."""
    lm_eval = pytest.importorskip("lm_eval")
    pytest.importorskip("accelerate")  # lm_eval's hf model imports it
    from lm_eval.tasks import TaskManager

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    data = tasks / "data.jsonl"
    data.write_text("".join(json.dumps(doc) + "\n" for doc in _MC_DOCS))
    (tasks / "bdh_tiny_mc.yaml").write_text(_MC_TASK.format(data=data, cache=tmp_path / "datasets"))
    results = lm_eval.simple_evaluate(
        model="hf",
        # no BOS/EOS in a byte vocabulary: lm_eval needs a prefix token for an empty context ("\n" here)
        model_args=f"pretrained={saved[1]},backend=causal,prefix_token_id=10,dtype=float32",
        tasks=["bdh_tiny_mc"],
        task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
        device="cpu",
        batch_size=2,
        log_samples=True,
    )
    acc = results["results"]["bdh_tiny_mc"]["acc,none"]
    assert 0.0 <= acc <= 1.0
    model, correct = saved[0], []
    samples = sorted(results["samples"]["bdh_tiny_mc"], key=lambda sample: sample["doc_id"])
    assert len(samples) == len(_MC_DOCS)
    with torch.no_grad():
        for sample in samples:
            ours = []
            for (context, continuation), resp in zip(sample["arguments"], sample["resps"]):
                seq = list((context + continuation).encode())
                start = len(context.encode())
                logp = torch.log_softmax(model(torch.tensor([seq]))[0].double(), dim=-1)
                ours.append(logp[start - 1 : -1].gather(-1, torch.tensor(seq[start:])[:, None]).sum().item())
                assert resp[0][0] == pytest.approx(ours[-1], abs=1e-4)
            correct.append(float(max(range(len(ours)), key=ours.__getitem__) == sample["target"]))
    assert acc == pytest.approx(sum(correct) / len(correct))


# ------------------------------------------------------------------ saving, model card, hub cache
def test_save_pretrained_round_trips_to_bdh(hf_model, saved, tmp_path):
    hf_model.save_pretrained(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "README.md"} <= names
    back = bdh.load_pretrained(tmp_path)
    idx = torch.randint(0, 256, (1, 9))
    with torch.no_grad():
        assert torch.equal(back(idx), saved[0](idx))
    assert isinstance(AutoModelForCausalLM.from_pretrained(tmp_path), BDHForCausalLM)

    from huggingface_hub import ModelCard

    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    assert "bdh" in card.data.tags and "2509.26507" in card.text


def test_saved_config_keeps_every_field_and_runtime_options_may_be_chosen_at_load(tmp_path):
    """config.json keeps every field (as transformers' keeps dropout); the runtime fields may be changed at load,
    like ``attn_implementation``."""
    for i, fields in enumerate(EVERY_FIELD):
        torch.manual_seed(i)
        model = BDH(BDHConfig(**fields))
        BDHForCausalLM.from_bdh(model).save_pretrained(tmp_path / f"m{i}")
        for back in (AutoModelForCausalLM.from_pretrained(tmp_path / f"m{i}").model, bdh.load(tmp_path / f"m{i}")):
            assert back.config == model.config and back.config.n == model.config.n
    folder = tmp_path / "m0"
    chunked = AutoModelForCausalLM.from_pretrained(folder, attention="recurrent", dropout=0.5)
    assert (chunked.model.config.attention, chunked.model.config.dropout) == ("recurrent", 0.5)
    assert chunked.model.config.chunk_size == EVERY_FIELD[0]["chunk_size"]  # the others: the file's
    idx = torch.randint(0, EVERY_FIELD[0]["vocab_size"], (2, 9))
    with torch.no_grad():  # the recurrent form on the same weights: equal up to float summation order
        torch.testing.assert_close(chunked(idx).logits, bdh.load(folder)(idx), atol=ATOL, rtol=0)
    # a folder written while config.json held the architecture only loads with the runtime defaults
    stored = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({k: v for k, v in stored.items() if k not in BDHConfig.RUNTIME_FIELDS})
    )
    old = AutoModelForCausalLM.from_pretrained(folder)
    assert (old.model.config.attention, old.model.config.dropout) == ("parallel", BDHConfig().dropout)


def test_offline_repo_id_resolves_to_a_local_hub_cache(saved, tmp_path):
    """A repo id loads from a Hub-layout cache folder (refs/main -> snapshots/<commit>) with no network."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--someone--bdh-tiny"
    _save(saved[0], repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    model = AutoModelForCausalLM.from_pretrained("someone/bdh-tiny", cache_dir=tmp_path)
    assert isinstance(AutoTokenizer.from_pretrained("someone/bdh-tiny", cache_dir=tmp_path), BDHByteTokenizer)
    idx = torch.randint(0, 256, (1, 6))
    with torch.no_grad():
        torch.testing.assert_close(model(idx).logits, saved[0](idx), atol=ATOL, rtol=0)
    with pytest.raises(OSError):
        AutoModelForCausalLM.from_pretrained("someone/not-cached", cache_dir=tmp_path)


# ------------------------------------------------------------------ GPT baseline, optional dependency
def test_gpt_baseline_loads_and_generates(tmp_path):
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(n_layer=2, n_embd=32, n_head=2, seq_len=64)).eval()
    hf = AutoModelForCausalLM.from_pretrained(_save(gpt, tmp_path))
    assert isinstance(hf, GPTForCausalLM)
    prompt = torch.randint(0, 256, (2, 6))
    with torch.no_grad():
        torch.testing.assert_close(hf(prompt).logits, gpt(prompt), atol=ATOL, rtol=0)
        expected = prompt
        for _ in range(8):  # greedy, re-reading the whole sequence (GPT has no cache in bdh)
            expected = torch.cat([expected, gpt(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(hf.generate(prompt, max_new_tokens=8, do_sample=False), expected)
    hf.save_pretrained(tmp_path / "again")
    assert isinstance(bdh.load_pretrained(tmp_path / "again"), GPT)


def test_only_the_hf_modules_import_transformers():
    src = Path(bdh.__file__).parent
    pattern = re.compile(r"^\s*(from|import)\s+(transformers|huggingface_hub)\b", re.MULTILINE)
    users = sorted(
        p.relative_to(src).as_posix() for p in src.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8"))
    )
    assert users == ["hf.py", "hf_cache.py", "hf_tokenizer.py"]


# ------------------------------------------------------------------ push_to_hub, without a network
def test_push_to_hub_uploads_a_folder_that_loads_back(hf_model, saved, tmp_path, monkeypatch):
    """push_to_hub goes through huggingface_hub's HfApi; its two network calls are replaced by recorders,
    and the files it would commit are written to a local folder that must load as the same model."""
    import huggingface_hub

    calls: dict[str, object] = {}

    def create_repo(self, repo_id, **kwargs):
        calls["repo"] = repo_id
        return huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}")

    def create_commit(self, repo_id, operations, commit_message=None, **kwargs):
        calls["message"] = commit_message
        out = tmp_path / "pushed"
        out.mkdir(exist_ok=True)
        for op in operations:
            source = op.path_or_fileobj
            data = Path(source).read_bytes() if isinstance(source, (str, Path)) else source.read()
            (out / op.path_in_repo).write_bytes(data)
        return huggingface_hub.CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/{'0' * 40}",
            commit_message=commit_message or "",
            commit_description="",
            oid="0" * 40,
        )

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_commit", create_commit)
    hf_model.push_to_hub("someone/bdh-tiny", commit_message="tiny BDH")
    BDHByteTokenizer().push_to_hub("someone/bdh-tiny", commit_message="tokenizer")
    assert calls["repo"] == "someone/bdh-tiny" and calls["message"] == "tokenizer"
    pushed = tmp_path / "pushed"
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in pushed.iterdir()}
    back = AutoModelForCausalLM.from_pretrained(pushed)
    idx = torch.randint(0, 256, (1, 7))
    with torch.no_grad():
        torch.testing.assert_close(back(idx).logits, saved[0](idx), atol=ATOL, rtol=0)


def _best_folder(run: Path) -> Path:
    """A run's best/ folder as the trainer writes it: a checkpoint folder, meta.json with the checksums."""
    from bdh.train.run.checkpoint import save_checkpoint

    model = _bdh(seed=3)
    optimizer = torch.optim.AdamW(model.parameters())
    step = save_checkpoint(run, 1, model, optimizer, {}, {"step": 1}, keep=1)
    shutil.copytree(step, run / "best")
    return run / "best"


@pytest.mark.parametrize("tamper", ["weights", "config"])
def test_from_pretrained_verifies_the_checksums_of_a_best_folder(tmp_path, tamper):
    best = _best_folder(tmp_path / "run")
    assert isinstance(AutoModelForCausalLM.from_pretrained(best), BDHForCausalLM)  # untouched: loads
    if tamper == "weights":  # one byte of a tensor's data changed: the file still reads
        data = bytearray((best / "model.safetensors").read_bytes())
        data[-1] ^= 0x01
        (best / "model.safetensors").write_bytes(bytes(data))
    else:  # a runtime field edited: the checksum of config.json no longer holds
        config = json.loads((best / "config.json").read_text())
        (best / "config.json").write_text(json.dumps({**config, "chunk_size": 64}))
    name = "model.safetensors" if tamper == "weights" else "config.json"
    with pytest.raises(bdh.errors.UserError, match=f"{name} does not match its checksum"):
        AutoModelForCausalLM.from_pretrained(best)


def test_from_pretrained_refuses_a_config_json_that_changes_what_the_weights_mean(saved, tmp_path):
    folder = _save(saved[0], tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "damping": 0.5}))
    with pytest.raises(bdh.errors.UserError, match="damping is 0.5 but the weights were saved with"):
        AutoModelForCausalLM.from_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({**config, "n_layer": config["n_layer"] + 1}))
    with pytest.warns(bdh.errors.ConfigWarning, match="n_layer is"):
        model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.n_layer == config["n_layer"] + 1
