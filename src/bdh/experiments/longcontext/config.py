"""The long-context experiment's config and its recipes (`RECIPES`).

A recipe is a way to train the main job's model so that its recurrent state keeps reading past T: a named set of
run-config fields, each an option of `bdh.model.BDHConfig` or `bdh.train.config.TrainConfig` with its own tests.
The recipes and what each changes are tabled in docs/long-context.md, "Recipes"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bdh.errors import UserError
from bdh.typed_config import bounded, one_of, parse_list

from ..common import ExperimentConfig

#: recipe -> the run-config fields it changes, by section
RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "official": {},
    "alibi": {"model": {"damping": "alibi"}},
    "tbptt": {"train": {"bptt": "tbptt"}},
    "tbptt-streams": {"train": {"bptt": "tbptt", "tbptt_windows": 16}},
    "alibi-tbptt": {"model": {"damping": "alibi"}, "train": {"bptt": "tbptt", "tbptt_windows": 16}},
    "multiscale": {"model": {"damping": "multiscale"}, "train": {"bptt": "tbptt", "tbptt_windows": 32}},
    "facts": {
        "model": {"damping": "multiscale"},
        "train": {"bptt": "tbptt", "tbptt_windows": 64},
        "task": {"facts": 2.0},
    },
    "facts-qk": {"model": {"damping": "alibi", "separate_keys": True}, "task": {"facts": 4.0}},
    "facts-alibi": {"model": {"damping": "alibi"}, "task": {"facts": 4.0}},
    "facts-dense": {
        "model": {"damping": "multiscale"},
        "train": {"bptt": "tbptt", "tbptt_windows": 32},
        "task": {"facts": 6.0},
    },
    "nopos-lg-delta": {"model": {"positional": "none", "damping": "local-global", "state_write": "delta"}},
    "nopos-lg-delta-hard": {
        "model": {"positional": "none", "damping": "local-global", "state_write": "delta", "write_gate": "hard"}
    },
    "nopos-lg-delta-sp": {
        "model": {"positional": "none", "damping": "local-global", "state_write": "delta"},
        "train": {"bptt": "state-passing"},
    },
    "nopos-lg-delta-tbptt": {
        "model": {"positional": "none", "damping": "local-global", "state_write": "delta"},
        "train": {"bptt": "tbptt", "tbptt_windows": 16},
    },
    "gpt": {},
    "gpt-facts": {"task": {"facts": 2.0}},
}
#: recipes that train a model without a recurrent state (read through a sliding window only): the GPT
WINDOW_ONLY = ("gpt", "gpt-facts")


@dataclass(frozen=True)
class Config(ExperimentConfig):
    """The long-context experiment; the defaults are the CPU default (its cost: docs/long-context.md; four processes
    with ``--set recipes=... --set seeds=...`` can share it out).
    """

    # comma-separated recipe names (`RECIPES`).
    recipes: str = "official,alibi,tbptt-streams,alibi-tbptt,multiscale,facts,gpt,gpt-facts"
    seeds: str = "0,1"  # comma-separated training seeds; every recipe is trained once per seed.
    # n_layer, n_embd, n_head, n_neurons, dropout: the model (the main job's).
    n_layer: int = bounded(4, ge=1)
    n_embd: int = bounded(128, ge=1)
    n_head: int = bounded(4, ge=1)
    n_neurons: int = bounded(2048, ge=1)
    dropout: float = bounded(0.0, ge=0, lt=1)
    # steps, batch_size, seq_len, lr: training (AdamW, warmup a tenth, linear decay to lr / 10).
    steps: int = bounded(1000, ge=1)
    batch_size: int = bounded(8, ge=1)
    seq_len: int = bounded(128, ge=2)
    lr: float = bounded(1e-3, gt=0, lt=1)
    # eval_lanes, eval_length: held-out streams: lanes of the validation split and bytes read per lane.
    eval_lanes: int = bounded(2, ge=1)
    eval_length: int = bounded(65536, ge=2)
    cut_stride: int = bounded(64, ge=1)  # stride of the cut-context (sliding window) yardstick, bytes.
    recall_distances: str = "64,256,1024,4096,16384"  # bytes between the fact and its question in the recall probe.
    recall_trials: int = bounded(16, ge=1)  # trials per distance.
    generate_bytes: int = bounded(10000, ge=2000)  # bytes of the long generation scored first against last thousand.
    ngram: int = bounded(5, ge=1, le=7)  # order of the byte n-gram judge of generations.
    # PyTorch CPU threads of training and evaluation (null: PyTorch's default).
    threads: int | None = bounded(None, ge=1)
    # device, precision: the trainer's device (``auto`` for a GPU) and precision; the measures run where the trained
    # model lies.
    device: str = "cpu"
    precision: str = one_of("fp32", ("auto", "bf16", "fp32"))

    experiment = "long-context"

    #: the presets (`bdh.typed_config.TypedConfig.PRESETS`, ``--quick`` / ``--full``):
    #: quick: A smoke test of a minute or two: a tiny model, short streams, one seed, three recipes.
    #: full: For a GPU: the main job's full length of training (2,000 steps), more lanes, more trials.
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "quick": {
            "recipes": "official,facts,gpt",
            "seeds": "0",
            "n_layer": 2,
            "n_embd": 32,
            "n_neurons": 256,
            "steps": 30,
            "seq_len": 32,
            "eval_lanes": 2,
            "eval_length": 2048,
            "cut_stride": 16,
            "recall_distances": "16,256,1024",
            "recall_trials": 4,
            "generate_bytes": 2000,
            "ngram": 3,
        },
        "full": {
            "recipes": ",".join(RECIPES),
            "steps": 2000,
            "eval_lanes": 7,
            "recall_trials": 128,
        },
    }

    def __post_init__(self) -> None:
        super().__post_init__()  # the fields converted to their types, the declared ranges checked
        self._check_size()
        unknown = [r for r in self.recipe_list if r not in RECIPES]
        if unknown:
            raise UserError(f"long-context.recipes: unknown recipe {unknown[0]!r}; known: {', '.join(RECIPES)}")
        if len(set(self.recipe_list)) != len(self.recipe_list):
            raise UserError(f"long-context.recipes: a recipe is named twice in {self.recipes!r}")
        if any(s < 0 for s in self.seed_list):
            raise UserError(f"long-context.seeds: seeds must be >= 0, got {self.seeds!r}")
        if any(d < 1 for d in self.distances):
            raise UserError(f"long-context.recall_distances: distances must be >= 1, got {self.recall_distances!r}")
        if self.cut_stride > self.seq_len:
            raise UserError(f"long-context.cut_stride: at most seq_len ({self.seq_len}), got {self.cut_stride}")
        self._check_device()

    @property
    def recipe_list(self) -> tuple[str, ...]:
        return parse_list(self.recipes, str, self._key("recipes"))

    @property
    def seed_list(self) -> tuple[int, ...]:
        return parse_list(self.seeds, int, self._key("seeds"))

    @property
    def distances(self) -> tuple[int, ...]:
        return parse_list(self.recall_distances, int, self._key("recall_distances"))

    def model_section(self, recipe: str) -> dict[str, Any]:
        """The ``model`` section of a recipe's runs: the BDH with the recipe's model fields, or the GPT."""
        if recipe in WINDOW_ONLY:
            return self.gpt_section()
        return {**self.size.section(), **RECIPES[recipe].get("model", {})}

    def sections(self, recipe: str) -> dict[str, dict[str, Any]]:
        """The other run-config fields a recipe changes, by section, and the trainer's device and precision."""
        out = {k: dict(v) for k, v in RECIPES[recipe].items() if k != "model"}
        out["train"] = {**out.get("train", {}), "device": self.device, "precision": self.precision}
        return out

    def gpt_section(self) -> dict[str, Any]:
        """The GPT with the parameter count closest to the BDH's (`GPTConfig.for_budget`)."""
        import dataclasses

        from bdh.baselines.gpt import GPTConfig
        from bdh.model import BDHConfig

        bdh = BDHConfig(n_layer=self.n_layer, n_embd=self.n_embd, n_head=self.n_head, n_neurons=self.n_neurons)
        gpt = GPTConfig.for_budget(
            bdh.num_params(),
            vocab_size=256,
            seq_len=self.seq_len,
            n_layer=self.n_layer,
            n_head=self.n_head,
            causal=True,
        )
        return {"name": "gpt", **{k: v for k, v in dataclasses.asdict(gpt).items() if not k.startswith("_")}}
