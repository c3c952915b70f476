"""The verdicts: BDH against GPT at one size, decided against the spread over seeds, and the paper's
section 4.2 claims (Fig. 7) checked on the numbers.

A model is better only beyond the seed spread (`bdh.seed_stats.beyond_seeds`, the bench's rule too: a diverged seed is
the worst score, so it widens its model's range); otherwise the size is a tie (not distinguishable here, not equal).
One seed decides nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bdh.seed_stats import beyond_seeds, finite_mean

from .fits import PowerLawFit

BDH_BETTER, GPT_BETTER, TIE, UNDECIDED = "BDH better", "GPT better", "tie", "undecided"


@dataclass
class Comparison:
    """BDH against GPT at one size (losses in nats; lower is better)."""

    verdict: str
    bdh_mean: float
    gpt_mean: float
    diff: float
    spread: float
    seeds: int
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        spread = "n/a" if math.isnan(self.spread) else f"{self.spread:.3f}"
        body = f"BDH {self.bdh_mean:.3f} vs GPT {self.gpt_mean:.3f} (diff {self.diff:+.3f}, spread {spread})"
        return f"{body}: {self.verdict}" + (f" ({self.note})" if self.note else "")


def _range(values: Sequence[float]) -> float:
    return max(values) - min(values) if len(values) > 1 else math.nan


def decide(first: Sequence[float], second: Sequence[float]) -> tuple[str, float, float, str]:
    """Which of two sets of per-seed losses is lower beyond the seed spread (`beyond_seeds`, a diverged seed, NaN or
    inf, the worst): (``first``, ``second``, ``tie`` or ``undecided``, the difference of the finite means, the spread,
    a note naming a diverged side)."""
    ok1, ok2 = [v for v in first if math.isfinite(v)], [v for v in second if math.isfinite(v)]
    diff = finite_mean(ok1) - finite_mean(ok2)
    lost1, lost2 = len(ok1) < len(first), len(ok2) < len(second)
    note = {(True, False): "first diverged on a seed", (False, True): "second diverged on a seed"}.get((lost1, lost2))
    note = "both diverged on some seed" if lost1 and lost2 else (note or "")
    spread = math.nan if lost1 or lost2 else max(_range(ok1), _range(ok2))
    if min(len(first), len(second)) < 2:
        return "undecided", diff, spread, "one seed: no spread to judge against"
    if beyond_seeds(first, second, higher_is_better=False):
        return "first", diff, spread, note
    if beyond_seeds(second, first, higher_is_better=False):
        return "second", diff, spread, note
    return "tie", diff, spread, note


def compare(bdh: Sequence[float], gpt: Sequence[float]) -> Comparison:
    """The verdict at one size from the per-seed final losses of each model."""
    code, diff, spread, note = decide(bdh, gpt)
    verdict = {"first": BDH_BETTER, "second": GPT_BETTER, "tie": TIE, "undecided": UNDECIDED}[code]
    note = note.replace("first", "BDH", 1).replace("second", "GPT", 1) if "diverged" in note else note
    means = [finite_mean(xs) for xs in (bdh, gpt)]
    return Comparison(verdict, means[0], means[1], diff, spread, min(len(bdh), len(gpt)), note)


def _listing(labels: Sequence[str], comps: Sequence[Comparison]) -> str:
    return "; ".join(f"{lab}: {c.describe()}" for lab, c in zip(labels, comps, strict=True))


def findings(
    labels: Sequence[str],
    final: Sequence[Comparison],
    half: Sequence[Comparison],
    fits: dict[str, PowerLawFit],
    improved: dict[str, tuple[str, float, float, str]],
) -> list[tuple[str, bool | None, str]]:
    """The paper's claims as (claim, held: True / False / None = not decidable here, the numbers); ``final`` and
    ``half``
    compare per size at the end and at half the token budget, ``improved`` a model's largest size against its
    smallest."""
    verdicts = [c.verdict for c in final]
    decided = [v for v in verdicts if v != UNDECIDED]
    out: list[tuple[str, bool | None, str]] = []
    out.append(
        (
            "BDH-GPU matches the GPT-2-style Transformer at equal parameters: GPT is not better at any size "
            "(section 4.2, Fig. 7)",
            None if len(decided) < len(verdicts) else GPT_BETTER not in verdicts,
            _listing(labels, final),
        )
    )
    wins, losses = verdicts.count(BDH_BETTER), verdicts.count(GPT_BETTER)
    out.append(
        (
            "BDH-GPU 'generally compares favorably': better than GPT at more sizes than GPT is better than it",
            None if not decided else wins > losses,
            f"BDH better at {wins}, GPT better at {losses}, tie at {verdicts.count(TIE)}, undecided at "
            f"{verdicts.count(UNDECIDED)} of {len(verdicts)} sizes",
        )
    )
    half_v = [c.verdict for c in half]
    hw, hl = half_v.count(BDH_BETTER), half_v.count(GPT_BETTER)
    out.append(
        (
            "BDH-GPU 'learns faster per data token': lower loss at half the token budget at more sizes than GPT",
            None if all(v == UNDECIDED for v in half_v) else hw > hl,
            _listing(labels, half),
        )
    )
    out.append(_improves(improved))
    out.append(_power_law(fits))
    out.append(_exponents(fits))
    return out


def _improves(improved: dict[str, tuple[str, float, float, str]]) -> tuple[str, bool | None, str]:
    """'All models show improved performance with scale': per model, `decide` (largest size, smallest size)."""
    codes = [code for code, *_ in improved.values()]
    held = False if any(c in ("second", "tie") for c in codes) else (None if "undecided" in codes else True)
    nums = "; ".join(
        f"{m}: largest minus smallest {diff:+.3f} (spread {'n/a' if math.isnan(spread) else f'{spread:.3f}'}"
        f"{', ' + note if note else ''})"
        for m, (_, diff, spread, note) in improved.items()
    )
    return "both models improve with size: the largest beats the smallest beyond the seed spread (Fig. 7)", held, nums


def _power_law(fits: dict[str, PowerLawFit]) -> tuple[str, bool | None, str]:
    """Both fits determined with an exponent interval above 0; anything less is not decidable here."""
    held = True if all(f.status == "ok" for f in fits.values()) else None
    nums = "; ".join(f"{m} ({f.status}): {f.describe()}" for m, f in fits.items())
    return (
        "loss follows a power law in parameters for both, exponent b > 0 ('Transformer-like scaling laws')",
        held,
        nums,
    )


def _exponents(fits: dict[str, PowerLawFit]) -> tuple[str, bool | None, str]:
    b, g = fits.get("bdh"), fits.get("gpt")
    if b is None or g is None or b.status != "ok" or g.status != "ok":
        return (
            "BDH's exponent is not smaller than GPT's (intervals overlap or BDH's is larger)",
            None,
            "needs both fits ok",
        )
    held = b.ci["b"][1] >= g.ci["b"][0]
    nums = "b: " + ", ".join(
        f"{m} {f.b:.3g} [{f.ci['b'][0]:.3g}, {f.ci['b'][1]:.3g}]" for m, f in (("BDH", b), ("GPT", g))
    )
    return "BDH's exponent is not smaller than GPT's (intervals overlap or BDH's is larger)", held, nums
