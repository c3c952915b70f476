"""Model merging by concatenation (paper section 7.1, appendix B.4, Table 2), with two controls.

A base model (en-es), two fine-tunes of it (en-fr, en-pt), and their merge along the neuron dimension
(`bdh.model.merge.concatenate`), each scored on the target-side bytes of every direction; the protocol, the
references and the controls (weight averaging, no shared base, a joint fine-tune) are in docs/experiments.md."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from bdh.errors import UserError
from bdh.model.merge import average, concatenate
from bdh.plotting import bits, nats_axis, pyplot
from bdh.seed_stats import mean
from bdh.tasks.multilingual import LANGUAGES
from bdh.typed_config import bounded

from .common import (
    QUICK,
    BigramModel,
    Clock,
    ExperimentConfig,
    Report,
    Runs,
    SideLosses,
    coded_losses,
    held_out_directions,
    save_figure,
    segment_losses,
    write_corpus,
)
from .scaffold import Log

ENGLISH = "en"
#: a loss difference (nats per byte) below this counts as a tie in the findings
TOL = 0.01


@dataclass(frozen=True)
class Config(ExperimentConfig):
    """The merge experiment; the defaults are the CPU default (its time: docs/experiments.md)."""

    base_language: str = "es"  # X of the base pair en-X (the paper: es).
    tune_languages: tuple[str, str] = ("fr", "pt")  # the two languages the base is fine-tuned on (the paper: fr, pt).
    # n_layer, n_embd, n_head, n_neurons, dropout: the parents' size (the merge has 2 n_neurons).
    n_layer: int = bounded(4, ge=1)
    n_embd: int = bounded(64, ge=1)
    n_head: int = bounded(4, ge=1)
    n_neurons: int = bounded(1024, ge=1)
    dropout: float = 0.0
    corpus_bytes: int = bounded(4_000_000, ge=1)  # bytes of training stream per pair (and of the English-only stream).
    # base_steps, tune_steps, uncond_steps, joint_steps: steps of the base models, of each fine-tune, of the
    # unconditional English model (default base_steps + tune_steps, a specialist's whole history) and of the joint
    # fine-tune of the merge; 0 skips the last two.
    base_steps: int = bounded(400, ge=1)
    tune_steps: int = bounded(200, ge=1)
    uncond_steps: int = bounded(600, ge=0)
    joint_steps: int = bounded(40, ge=0)
    # batch_size, seq_len: sequences per step, bytes per window.
    batch_size: int = bounded(8, ge=1)
    seq_len: int = bounded(192, ge=1)
    # lr, tune_lr: peak learning rates of training from scratch and of fine-tuning.
    lr: float = bounded(3e-3, gt=0, lt=1)
    tune_lr: float = bounded(1e-3, gt=0, lt=1)
    eval_segments: int = bounded(200, ge=1)  # held-out segments per direction.
    controls: bool = True  # also build the averaged and the no-shared-base merges.
    seed: int = bounded(0, ge=0)  # seed of the base model (the second base uses seed + 1).

    experiment = "merge"

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``):
    #: quick: A smoke test of about a minute.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            **QUICK,
            "base_steps": 30,
            "tune_steps": 15,
            "uncond_steps": 15,
            "joint_steps": 5,
            "seq_len": 128,
            "eval_segments": 24,
        },
    }

    def __post_init__(self) -> None:
        super().__post_init__()  # the fields converted to their types, the declared ranges checked
        langs = (self.base_language, *self.tune_languages)
        for lang in langs:
            if lang not in LANGUAGES or lang == ENGLISH:
                known = ", ".join(x for x in LANGUAGES if x != ENGLISH)
                raise UserError(f"merge: languages must be among {known}; got {lang!r}")
        if len(self.tune_languages) != 2 or len(set(langs)) != 3:
            raise UserError(f"merge: need a base language and two other, different tune languages; got {langs}")
        self._check_size()

    @property
    def languages(self) -> tuple[str, ...]:
        return (self.base_language, *self.tune_languages)

    def directions(self) -> list[tuple[str, str]]:
        """X -> en for every language, then en -> X."""
        return [(x, ENGLISH) for x in self.languages] + [(ENGLISH, x) for x in self.languages]


def _english_only(path: Path, config: Config) -> Path:
    """An English-only stream ``<T:en>sentence<T:en>sentence...``: the unconditional English model's data."""
    import random

    from bdh.outputs import write_bytes
    from bdh.tasks.multilingual import Lexicon, _random_concept, make_sentence

    lexicon, rng = Lexicon(0), random.Random(f"english-{config.seed}")
    out = bytearray()
    while len(out) < config.corpus_bytes:
        out += f"<T:{ENGLISH}>{make_sentence(rng, _random_concept(rng, 0.5)).render(ENGLISH, lexicon)}".encode()
    write_bytes(path, bytes(out[: config.corpus_bytes]))
    return path


def unconditional_losses(model: torch.nn.Module, segments: list[tuple[str, str, str, str]]) -> SideLosses:
    """Target-side losses of ``model`` reading only ``<T:tgt>target`` (no source sentence)."""
    datas, codes = [], []
    for _, _, tgt, text in segments:
        data = f"<T:{tgt}>{text}".encode()
        code = np.zeros(len(data) - 1, dtype=np.int64)
        code[len(f"<T:{tgt}>") - 1 :] = 2  # the delimiter is not scored
        datas.append(data)
        codes.append(code)
    sums, counts = coded_losses(model, datas, codes)
    return SideLosses(float("nan"), sums[2] / max(counts[2], 1), 0, counts[2])


class _Runs(Runs):
    """The training runs of the experiment (`Runs`), with their corpora in ``out/data``."""

    def __init__(self, config: Config, out: Path, log: Log, threads: int | None) -> None:
        common = dict(batch_size=config.batch_size, seq_len=config.seq_len, threads=threads)
        super().__init__(out, log, size=config.size, seed=config.seed, **common)
        self.config = config

    def corpus(self, lang: str) -> Path:
        """The English-``lang`` translation stream (written on first use)."""
        path = self.out / "data" / f"en-{lang}.txt"
        if not path.exists():
            write_corpus(path, [(ENGLISH, lang)], self.config.corpus_bytes, seed=self.config.seed)
        return path

    def trained(
        self, name: str, lang: str, steps: int, *, lr: float, seed: int, init_from: Path | None = None
    ) -> tuple[torch.nn.Module, Path]:
        """A model trained on English-``lang`` (from ``init_from``, a run folder, if given) and its run folder."""
        with self.timed(name):
            self.log(
                f"merge: training {name} ({steps} steps on en-{lang}{', from ' + init_from.name if init_from else ''})"
            )
            warmup = max(1, steps // 10)
            data = self.corpus(lang)
            result = self.train(name, data, steps=steps, lr=lr, seed=seed, init_from=init_from, warmup_steps=warmup)
        return result.model.eval(), result.run_dir


def run(config: Config, out: Path, *, log: Log = print, threads: int | None = None) -> Path:
    """Train, merge, evaluate and write the report into ``out``; returns the report's path."""
    out = Path(out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    clock = Clock()
    runs = _Runs(config, out, log, threads)
    models = _merged_models(config, runs)
    uncond = None
    if config.uncond_steps:
        with runs.timed("unconditional-en"):
            log(f"merge: training the unconditional English model ({config.uncond_steps} steps)")
            data = _english_only(out / "data" / "en-only.txt", config)
            uncond = runs.train("unconditional-en", data, steps=config.uncond_steps, lr=config.lr).model.eval()
    if config.joint_steps:
        models[f"merged + {config.joint_steps} joint steps"] = _joint(config, runs, models["merged"])
    log("merge: evaluating")
    table = _losses(config, models, uncond, runs.corpus)
    params = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    report = _write_report(config, out, table, params, runs.timings, *clock.seconds())
    log(f"merge: done in {clock.seconds()[0] / 60:.1f} min")
    return report


def _merged_models(config: Config, runs: _Runs) -> dict[str, torch.nn.Module]:
    """The base model, its two fine-tunes and their merge by concatenation (saved to runs/merged); with
    ``controls``, their weight average and the merge of fine-tunes that share no base."""
    base_lang, (la, lb) = config.base_language, config.tune_languages
    models: dict[str, torch.nn.Module] = {}
    models["base"], base_dir = runs.trained("base", base_lang, config.base_steps, lr=config.lr, seed=config.seed)
    for x in (la, lb):
        models[f"tuned-{x}"], _ = runs.trained(
            f"tuned-{x}", x, config.tune_steps, lr=config.tune_lr, seed=config.seed, init_from=base_dir
        )
    models["merged"] = concatenate(models[f"tuned-{la}"], models[f"tuned-{lb}"]).eval()
    models["merged"].save_pretrained(runs.out / "runs" / "merged")
    if config.controls:
        models["averaged"] = average(models[f"tuned-{la}"], models[f"tuned-{lb}"]).eval()
        _, base2_dir = runs.trained("base-2", base_lang, config.base_steps, lr=config.lr, seed=config.seed + 1)
        other, _ = runs.trained(
            f"tuned-{lb}-from-base-2",
            lb,
            config.tune_steps,
            lr=config.tune_lr,
            seed=config.seed + 1,
            init_from=base2_dir,
        )
        models["merged, no shared base"] = concatenate(models[f"tuned-{la}"], other).eval()
    return models


def _joint(config: Config, runs: _Runs, merged: torch.nn.Module) -> torch.nn.Module:
    """The merged model fine-tuned on every pair at once for ``joint_steps`` steps."""
    out = runs.out
    with runs.timed("merged-joint"):
        merged.save_pretrained(out / "runs" / "merged")
        joint_data = out / "data" / "all-pairs.txt"
        write_corpus(joint_data, [(ENGLISH, x) for x in config.languages], config.corpus_bytes, seed=config.seed + 7)
        runs.log(f"merge: joint fine-tune of the merged model ({config.joint_steps} steps on all pairs)")
        return runs.train(
            "merged-joint",
            joint_data,
            steps=config.joint_steps,
            lr=config.tune_lr,
            size=dataclasses.replace(config.size, n_neurons=2 * config.n_neurons),
            init_from=out / "runs" / "merged",
            warmup_steps=max(1, config.joint_steps // 10),
        ).model.eval()


def _losses(
    config: Config,
    models: dict[str, torch.nn.Module],
    uncond: torch.nn.Module | None,
    corpus: Callable[[str], Path],
) -> dict[str, dict[str, float]]:
    """The target loss of every model in every direction; the unconditional English model's (English targets
    only) and the byte-bigram model's beside them."""
    segments = held_out_directions(config)
    table: dict[str, dict[str, float]] = {}
    for name, model in models.items():
        table[name] = {f"{s}>{t}": segment_losses(model, segs).target for (s, t), segs in segments.items()}
    if uncond is not None:
        table["unconditional English (no source)"] = {
            f"{s}>{t}": (unconditional_losses(uncond, segs).target if t == ENGLISH else float("nan"))
            for (s, t), segs in segments.items()
        }
    bigram_data = b"".join(corpus(x).read_bytes()[: config.corpus_bytes // 3] for x in config.languages)
    bigram = BigramModel(bigram_data)
    table["bigram (all pairs' bytes)"] = {f"{s}>{t}": bigram.losses(segs).target for (s, t), segs in segments.items()}
    return table


# ---------------------------------------------------------------------- report
def findings(config: Config, table: dict[str, dict[str, float]]) -> list[tuple[str, bool | None, str]]:
    """The paper's testable claims (and the controls), each (claim, held?, the numbers behind it).

    "Beats" needs a margin of `TOL`; "close to the specialist" means closing half the gap from the unconditional
    model to the specialist, undecided (None) when the specialist does not beat that model."""
    return _source_findings(config, table) + _merge_findings(config, table)


def _source_findings(config: Config, table: dict[str, dict[str, float]]) -> list[tuple[str, bool | None, str]]:
    """The findings about each direction: the base uses the source sentence, the merged model translates into
    English like the specialist and out of English between its parents (see `findings`)."""
    la, lb = config.tune_languages
    merged = table["merged"]
    spec = {la: table[f"tuned-{la}"], lb: table[f"tuned-{lb}"]}
    out: list[tuple[str, bool | None, str]] = []
    base_known = table["base"][f"{config.base_language}>en"]
    base_unknown = mean([table["base"][f"{x}>en"] for x in (la, lb)])
    out.append(
        (
            f"precondition: the models use the source sentence (the base's {config.base_language}->en loss is "
            f"below its loss from the languages it has not seen)",
            base_known < base_unknown - TOL,
            f"base: {config.base_language}->en {base_known:.3f}, {la}/{lb}->en {base_unknown:.3f}",
        )
    )
    uncond = table.get("unconditional English (no source)")
    for x in (la, lb):
        key = f"{x}>en"
        m, s = merged[key], spec[x][key]
        line = f"{x}->en: merged {m:.3f}, specialist tuned-{x} {s:.3f}"
        if uncond is not None:
            u = uncond[key]
            held = m - s <= 0.5 * (u - s) if u > s else None
            out.append(
                (
                    f"merged {x}->en is close to the specialist (closes at least half the gap from the "
                    "unconditional model to the specialist) and below the unconditional model",
                    held,
                    line + f", unconditional {u:.3f}",
                )
            )
        else:
            out.append((f"merged {x}->en is close to the specialist", None, line))
    for x in (la, lb):
        key, other = f"en>{x}", lb if x == la else la
        m, s, n = merged[key], spec[x][key], spec[other][key]
        lo, hi = min(s, n), max(s, n)
        out.append(
            (
                f"merged en->{x} lies between the specialist and the non-specialist parent",
                lo <= m <= hi,
                f"merged {m:.3f}; tuned-{x} {s:.3f}, tuned-{other} {n:.3f}",
            )
        )
    return out


def _merge_findings(config: Config, table: dict[str, dict[str, float]]) -> list[tuple[str, bool | None, str]]:
    """The findings over all directions: the merged model against its parents, after a joint fine-tune, and the
    controls (weight averaging, no shared base; see `findings`)."""
    la, lb = config.tune_languages
    merged = table["merged"]
    out: list[tuple[str, bool | None, str]] = []
    keys = list(merged)
    avg = {name: mean([table[name][k] for k in keys]) for name in ("merged", f"tuned-{la}", f"tuned-{lb}")}
    out.append(
        (
            "the merged model beats either parent on the mean over all directions",
            avg["merged"] < min(avg[f"tuned-{la}"], avg[f"tuned-{lb}"]) - TOL,
            ", ".join(f"{k} {v:.3f}" for k, v in avg.items()),
        )
    )
    joint = next((name for name in table if name.startswith("merged + ")), None)
    if joint is not None:
        en_x = [f"en>{x}" for x in (la, lb)]
        before, after = mean([merged[k] for k in en_x]), mean([table[joint][k] for k in en_x])
        out.append(
            (
                f"a short joint fine-tune ({joint.split('+ ')[1]}) lowers the en->X loss of the merged model",
                after < before - TOL,
                f"mean en->{la}/{lb}: {before:.3f} before, {after:.3f} after",
            )
        )
    tuned_keys = [f"{x}>en" for x in (la, lb)] + [f"en>{x}" for x in (la, lb)]
    if "averaged" in table:
        m, a = mean([merged[k] for k in tuned_keys]), mean([table["averaged"][k] for k in tuned_keys])
        out.append(
            (
                "control: concatenation beats plain weight averaging on the fine-tuned directions",
                m < a - TOL,
                f"mean over {', '.join(tuned_keys)}: merged {m:.3f}, averaged {a:.3f}",
            )
        )
    if "merged, no shared base" in table:
        m, u = mean([merged[k] for k in tuned_keys]), mean([table["merged, no shared base"][k] for k in tuned_keys])
        out.append(
            (
                "control: a shared base matters (merging unrelated models is worse)",
                m < u - TOL,
                f"mean over the same directions: shared base {m:.3f}, no shared base {u:.3f}",
            )
        )
    return out


def _protocol(config: Config, seconds: float, cpu_seconds: float) -> str:
    """The report's opening: the base, the fine-tunes, the merge, the model and the time it all took."""
    la, lb = config.tune_languages
    return (
        f"Base model on en-{config.base_language} ({config.base_steps} steps), fine-tuned separately on en-{la} and "
        f"en-{lb} ({config.tune_steps} steps each, learning rate {config.tune_lr:g}); the two fine-tunes merged by "
        "concatenating their neurons head by head (E, Dx, Dy, RoPE frequencies) and averaging the embeddings and "
        f"readout, with no training after the merge. Model: L = {config.n_layer}, D = {config.n_embd}, "
        f"h = {config.n_head}, n = {config.n_neurons} per parent (the merge has n = {2 * config.n_neurons}); "
        f"batch {config.batch_size} x {config.seq_len} bytes, seed {config.seed}. "
        f"Total wall time {seconds / 60:.1f} min, "
        f"process CPU time {cpu_seconds / 60:.1f} min."
    )


def _loss_rows(table: dict[str, dict[str, float]], params: dict[str, int], keys: list[str]) -> list[list[Any]]:
    """One row per model: its parameters, its loss per direction (``keys``) and their mean over the finite ones."""
    return [
        [
            name,
            f"{params[name]:,}" if name in params else "",
            *[table[name][k] for k in keys],
            mean([v for v in table[name].values() if not math.isnan(v)]),
        ]
        for name in table
    ]


def _write_report(
    config: Config,
    out: Path,
    table: dict[str, dict[str, float]],
    params: dict[str, int],
    timings: dict[str, float],
    seconds: float,
    cpu_seconds: float,
) -> Path:
    keys = [f"{s}>{t}" for s, t in config.directions()]
    report = Report("Model merging by concatenation (paper section 7.1, Table 2)")
    report.text(_protocol(config, seconds, cpu_seconds))
    report.heading("Target-side loss per direction (nats per byte, lower is better)")
    report.text(
        f"Mean next-byte loss on the target sentence's bytes of {config.eval_segments} held-out segments "
        "`<F:src>source<T:tgt>target` per direction, each read from a zero state (delimiters not scored). "
        "The unconditional English model reads only `<T:en>target`."
    )
    headers = ["model", "parameters", *[k.replace(">", " → ") for k in keys], "mean"]
    report.table(headers, _loss_rows(table, params, keys))
    report.heading("What matched the paper")
    found = findings(config, table)
    report.findings(found)
    report.text(
        "Paper (Table 2, 19M-parameter parents on Europarl): merged X→En 0.39–0.43 against 0.34–0.36 for the "
        "specialists and 0.65 for an unconditional English model; En→X of the merge between the specialists and the "
        "non-specialists (0.77–1.45). The controls (weight averaging, no shared base) are not in the paper."
    )
    report.timings(timings)
    report.figure(_plot(config, table, out / "figures" / "merge-losses"), "Target-side loss per direction and model")
    report.results = {
        "config": dataclasses.asdict(config),
        "losses": table,
        "params": params,
        "timings_s": timings,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "findings": Report.findings_json(found),
    }
    return report.write(out)


def _plot(config: Config, table: dict[str, dict[str, float]], stem: Path) -> str:
    """Bars of the target-side loss per translation direction and model, in bits per byte (nats per byte,
    the unit of the report's tables, on the right)."""
    plt = pyplot()
    keys = [f"{s}>{t}" for s, t in config.directions()]
    names = [n for n in table if not n.startswith("bigram")]
    fig, ax = plt.subplots(figsize=(14, 6.5))
    width = 0.8 / len(names)
    xs = np.arange(len(keys))
    for i, name in enumerate(names):
        ax.bar(xs + i * width, [bits(table[name][k]) for k in keys], width, label=name)
    ax.set_xticks(xs + 0.4 - width / 2, [k.replace(">", " → ") for k in keys])
    ax.set_xlabel("translation direction (source → target)")
    ax.set_ylabel("target-side loss (bits per byte)")
    nats_axis(ax, "target-side loss (nats per byte)")
    ax.set_title("loss on the target side of each direction, per model")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.14))  # below the axes: no bar hidden
    fig.suptitle("merging by concatenation (cf. section 7.1)")
    fig.tight_layout()
    return save_figure(fig, stem)
