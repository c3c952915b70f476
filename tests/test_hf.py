"""BDH (and the GPT baseline) through Hugging Face ``transformers``: `bdh.hf` and `bdh.hf_tokenizer`.

Everything runs offline: the folders are local, and ``HF_HUB_OFFLINE`` is on for every test.
"""

from __future__ import annotations

import json
import re
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
from bdh.hf import BDHCache, BDHForCausalLM, BDHHFConfig, GPTForCausalLM
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
    assert out.logits.shape == (2, 17, 256) and out.past_key_values is None  # scoring builds no state


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
        cache = kwargs.get("past_key_values")
        seen.append((kwargs["input_ids"].shape[1], cache.get_seq_length() if cache is not None else None))
        if cache is not None:
            seen[-1] += (tuple(cache.state.rho.shape),)

    handle = hf_model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        hf_model.generate(torch.randint(1, 256, (2, 6)), max_new_tokens=5, do_sample=False)
    finally:
        handle.remove()
    state_shape = (2, 2, 2, 128, 32)  # (L, B, H, N, D): the same at every step
    assert seen == [(6, None)] + [(1, 6 + i, state_shape) for i in range(4)]


def test_cache_continues_a_forward(hf_model, saved):
    idx = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        first = hf_model(idx[:, :7], use_cache=True)
        cache = first.past_key_values
        assert isinstance(cache, BDHCache) and cache.get_seq_length() == 7
        rest = hf_model(idx[:, 7:], past_key_values=cache)
        logits = torch.cat([first.logits, rest.logits], dim=1)
        torch.testing.assert_close(logits, saved[0](idx), atol=ATOL, rtol=0)  # chunked vs parallel form
    assert cache.get_seq_length() == 12
    with pytest.raises(NotImplementedError):
        cache.crop(5)  # a recurrent state has no earlier positions to return to


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
    assert users == ["hf.py", "hf_tokenizer.py"]


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
