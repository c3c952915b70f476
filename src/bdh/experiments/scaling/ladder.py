"""The ladder of sizes: BDH at each size (scaled in n only, as the paper) and the GPT-2-style Transformer matched to
its parameter count, with what each costs to train and to run (paper section 4.2, "FLOPS counts"; appendix B.2,
Tables 4-5). Costs follow `bdh.model.sizes` (a multiply-add is 2 FLOPs, training 3 x the forward); GPT's per
token is ``L (2 (4 d^2 + 2 d m) + 4 c d) + 2 d V``, its KV cache ``2 c d`` scalars per layer (docs/experiments.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bdh.errors import UserError

from ..common import duration
from .config import Config

MODELS = ("bdh", "gpt")
VOCAB = 256


@dataclass(frozen=True)
class Rung:
    """One size of the ladder: the model section of both models and their parameter counts."""

    index: int
    bdh: dict[str, Any]
    gpt: dict[str, Any]
    params: dict[str, int]

    def section(self, model: str) -> dict[str, Any]:
        return self.bdh if model == "bdh" else self.gpt

    @property
    def mismatch(self) -> float:
        """GPT's parameters relative to BDH's, minus one."""
        return self.params["gpt"] / self.params["bdh"] - 1.0

    def label(self) -> str:
        return f"{self.params['bdh'] / 1e6:.3g}M"


def bdh_config(section: dict[str, Any]) -> Any:
    from bdh.model.config import BDHConfig

    return BDHConfig(**{k: v for k, v in section.items() if k != "name"}, vocab_size=VOCAB)


def gpt_config(section: dict[str, Any]) -> Any:
    from bdh.baselines.gpt import GPTConfig

    return GPTConfig(**{k: v for k, v in section.items() if k != "name"})


def match_gpt(budget: int, *, n_layer: int, n_head: int, seq_len: int, positional: str, dropout: float) -> Any:
    """The `GPTConfig` of ``n_layer`` blocks and ``n_head`` heads whose parameter count is closest to ``budget``,
    varying the width over multiples of the heads (times 2 for RoPE): the model's ``for_budget``."""
    from bdh.bench.models import budget_config

    return budget_config(
        "gpt",
        budget,
        vocab_size=VOCAB,
        seq_len=seq_len,
        n_layer=n_layer,
        n_head=n_head,
        causal=True,
        positional=positional,
        dropout=dropout,
    )


def build_ladder(config: Config) -> list[Rung]:
    """The sizes of ``config``; a one-line error when a Transformer cannot be matched within the tolerance."""
    rungs = []
    for i, n in enumerate(config.n_neurons):
        bdh = {
            "name": "bdh",
            "n_layer": config.n_layer,
            "n_embd": config.n_embd,
            "n_head": config.n_head,
            "n_neurons": n,
            "dropout": config.dropout,
            "attention": config.bdh_attention,
        }
        budget = bdh_config(bdh).num_params()
        gpt = match_gpt(
            budget,
            n_layer=config.gpt_layers[i],
            n_head=config.gpt_heads[i],
            seq_len=config.seq_len,
            positional=config.gpt_positional,
            dropout=config.dropout,
        )
        rung = Rung(i, bdh, {"name": "gpt", **gpt.to_dict()}, {"bdh": budget, "gpt": gpt.num_params()})
        if abs(rung.mismatch) > config.match_tolerance:
            raise UserError(
                f"scaling: at n = {n} ({budget:,} parameters) the closest {config.gpt_layers[i]}-layer Transformer has "
                f"{rung.params['gpt']:,} ({rung.mismatch:+.1%}); change gpt_layers or gpt_heads, or match_tolerance"
            )
        rungs.append(rung)
    return rungs


# ---------------------------------------------------------------------- costs
def gpt_forward_flops(cfg: Any, context: int) -> float:
    """GPT's forward FLOPs per token attending to ``context`` keys (module docstring)."""
    d, m, L = cfg.n_embd, cfg.hidden, cfg.n_layer
    return L * (2 * (4 * d * d + 2 * d * m) + 4 * context * d) + 2 * d * cfg.vocab_size


def train_flops_per_token(model: str, section: dict[str, Any], seq_len: int) -> float:
    """Forward + backward FLOPs per training token on windows of ``seq_len``."""
    if model == "bdh":
        from bdh.model.sizes import train_flops_per_token as bdh_train

        return bdh_train(bdh_config(section), seq_len)
    return 3.0 * gpt_forward_flops(gpt_config(section), seq_len)


def inference_cost(model: str, section: dict[str, Any], context: int) -> dict[str, float]:
    """What one generated token costs at ``context`` tokens of context: the state (scalars, all layers)
    and the forward FLOPs (BDH in its recurrent form; GPT with a KV cache)."""
    if model == "bdh":
        from bdh.model.sizes import forward_flops_per_token

        cfg = bdh_config(section)
        return {
            "state": float(cfg.state_size() * cfg.n_layer),
            "flops": forward_flops_per_token(cfg, context, form="recurrent"),
        }
    cfg = gpt_config(section)
    return {"state": float(2 * context * cfg.n_embd * cfg.n_layer), "flops": gpt_forward_flops(cfg, context)}


def plan(config: Config, rungs: list[Rung]) -> list[dict[str, Any]]:
    """Per size and model: parameters, training FLOPs of one run, and the time one run would take at the
    assumed ``plan_tflops``; the learning-rate sweep multiplies the runs of the smallest size."""
    rows = []
    for rung in rungs:
        for model in MODELS:
            flops = train_flops_per_token(model, rung.section(model), config.seq_len) * config.tokens_per_run
            runs = len(config.seeds) * (len(config.lrs) if rung.index == 0 else 1)
            rows.append(
                {
                    "size": rung.index,
                    "model": model,
                    "params": rung.params[model],
                    "train_flops": flops,
                    "runs": runs,
                    "est_s_per_run": flops / (config.plan_tflops * 1e12),
                }
            )
    return rows


def plan_text(config: Config, rungs: list[Rung]) -> str:
    """The plan as lines of text (what ``--show-config`` prints beside the config)."""
    rows = plan(config, rungs)
    total = sum(r["est_s_per_run"] * r["runs"] for r in rows)
    lines = [
        f"scaling plan: {len(rungs)} sizes x {len(MODELS)} models x {len(config.seeds)} seeds, "
        f"{config.tokens_per_run:,} tokens per run, sweep of {len(config.lrs)} learning rates at the smallest size",
        f"times assume {config.plan_tflops:g} TFLOP/s sustained (plan_tflops); measured times are in the report",
    ]
    for r in rows:
        lines.append(
            f"  size {r['size']} {r['model']:>3}: {r['params'] / 1e6:8.3f}M params, "
            f"{r['train_flops']:.3g} FLOPs per run, ~{duration(r['est_s_per_run'])} per run x {r['runs']} runs"
        )
    lines.append(f"  total ~{duration(total)} of training")
    return "\n".join(lines)
