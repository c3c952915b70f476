"""The one config mechanism: every config class is a TypedConfig whose from_dict checks keys and types, and
whose declared ranges (`bounded`, `one_of`) are checked however the object is built."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import pkgutil
import re
import typing

import pytest

import bdh
from bdh.errors import UserError
from bdh.typed_config import Declared, Range, TypedConfig, bounded, check_value, declared_ranges, one_of


def _config_classes() -> list[type]:
    for info in pkgutil.walk_packages(bdh.__path__, "bdh."):
        if info.name.startswith(("bdh.hf", "bdh.cli")):
            continue
        if info.name.endswith("_jit") and importlib.util.find_spec("triton") is None:
            continue  # the Triton kernels themselves (the gpu extra): no configs (tests/test_optional_extras.py)
        importlib.import_module(info.name)
    found, todo = set(), [TypedConfig]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("bdh.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return sorted((c for c in found if dataclasses.is_dataclass(c)), key=lambda c: (c.__qualname__, c.__module__))


CLASSES = _config_classes()


def test_the_package_s_configs_are_typed_configs():
    names = {c.__name__ for c in CLASSES}
    assert {"BDHConfig", "GPTConfig", "TextConfig", "MQARConfig", "OptimConfig", "TrainConfig"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_every_config_round_trips_and_has_resolvable_hints(cls):
    typing.get_type_hints(cls)  # from_dict checks keys against these
    try:
        default = cls()
    except (TypeError, UserError):
        pytest.skip(f"{cls.__name__} has required fields")
    assert cls.from_dict(default.to_dict()) == default
    key = re.escape(cls._key("no_such_field"))
    with pytest.raises(UserError, match=rf"^{key}: unknown field 'no_such_field'"):
        cls.from_dict({"no_such_field": 1})


@pytest.mark.parametrize(
    "value, tp, message",
    [
        ("fast", float, r"lr: expected a finite number, got 'fast'"),
        (float("nan"), float, r"lr: must be a finite number, got nan"),
        ("1e400", float | None, r"lr: must be a finite number, got inf"),
        (True, int, r"lr: expected an integer, got True"),
        (2.5, int, r"lr: expected an integer, got 2.5"),
        ([0.9], tuple[float, float], r"lr: expected a list of 2 numbers, got \[0.9\]"),
        ("cos", typing.Literal["linear", "cosine"], r"lr: expected one of 'linear', 'cosine', got 'cos'"),
    ],
)
def test_check_value_names_the_key(value, tp, message):
    with pytest.raises(UserError, match="^" + message + "$"):
        check_value(value, tp, "lr")


def test_check_value_converts_what_configs_write():
    assert check_value(1e6, int, "k") == 1_000_000 and check_value("1e-3", float, "k") == 0.001
    assert check_value([0.9, 0.95], tuple[float, float], "k") == (0.9, 0.95)
    assert check_value(None, int | None, "k") is None


def test_nested_sections_are_checked_under_their_prefix():
    from bdh.train.config import ConfigError, RunConfig

    with pytest.raises(ConfigError, match=r"^optim\.lr: expected a finite number, got 'fast'$"):
        RunConfig.from_dict({"optim": {"lr": "fast"}})
    with pytest.raises(ConfigError, match=r"^train\.nope: unknown field 'nope'"):
        RunConfig.from_dict({"train": {"nope": 1}})


# ---------------------------------------------------------------------- declared ranges
def _class(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _refused(build, key: str, rule: str) -> None:
    with pytest.raises(UserError, match="^" + re.escape(f"{key}: {rule}") + "$"):
        build()


def _below(x: float, integer: bool) -> float:
    return x - 1 if integer else math.nextafter(x, -math.inf)


def _above(x: float, integer: bool) -> float:
    return x + 1 if integer else math.nextafter(x, math.inf)


#: (class, field, a value just inside the range, one just outside, the rule the error states)
EDGES = [
    ("bdh.model.config.BDHConfig", "n_layer", 1, 0, "must be an integer >= 1, got 0"),
    ("bdh.model.config.BDHConfig", "dropout", _below(1.0, False), 1.0, "must be a number in [0, 1), got 1.0"),
    ("bdh.model.config.BDHConfig", "rope_theta", _above(1.0, False), 1.0, "must be a number > 1 or null, got 1.0"),
    (
        "bdh.model.config.BDHConfig",
        "attention",
        "chunked",
        "flash",
        "must be one of parallel, chunked, recurrent; got 'flash'",
    ),
    ("bdh.baselines.gpt.GPTConfig", "ln_eps", _below(1.0, False), 1.0, "must be a number in (0, 1), got 1.0"),
    ("bdh.tasks.sudoku.SudokuConfig", "max_givens", 81, 82, "must be an integer in [17, 81], got 82"),
    ("bdh.tasks.boardpath.BoardPathConfig", "wall_prob", 0.0, -5e-324, "must be a number in [0, 1), got -5e-324"),
    ("bdh.tasks.mqar.MQARConfig", "data_seed", 0, -1, "must be an integer >= 0 or null, got -1"),
    ("bdh.train.config.OptimConfig", "lr", 5e-324, 0.0, "must be a number > 0, got 0.0"),
    (
        "bdh.train.config.OptimConfig",
        "betas",
        (0.0, _below(1.0, False)),
        (0.9, 1.0),
        "must be numbers in [0, 1), got [0.9, 1.0]",
    ),
    ("bdh.train.config.TrainConfig", "seed", 2**63 - 1, 2**63, f"must be an integer in [0, 2**63), got {2**63}"),
    ("bdh.train.config.TrainConfig", "micro_batch_size", 1, 0, "must be an integer >= 1 or null, got 0"),
    ("bdh.train.config.SampleConfig", "temperature", 0.0, -5e-324, "must be a number >= 0, got -5e-324"),
    ("bdh.experiments.merge.Config", "uncond_steps", 0, -1, "must be an integer >= 0, got -1"),
    (
        "bdh.experiments.scaling.config.Config",
        "val_fraction",
        0.5,
        _above(0.5, False),
        f"must be a number in (0, 0.5], got {_above(0.5, False)!r}",
    ),
    (
        "bdh.experiments.synapses.experiment.Config",
        "n_layer",
        2,
        1,
        "must be an integer >= 2 (sigma links two layers), got 1",
    ),
    (
        "bdh.tasks.multilingual.StreamConfig",
        "concept_rate",
        1.0,
        _above(1.0, False),
        f"must be a number in [0, 1], got {_above(1.0, False)!r}",
    ),
    ("bdh.dmft.weights.DMFTParams", "n_pe", 0, -1, "must be an integer >= 0, got -1"),
    ("bdh.dmft.probe.ProbeConfig", "n_steps", 8, 7, "must be an integer in [8, 1000000], got 7"),
    ("bdh.dmft.probe.ProbeConfig", "n_steps", 10**6, 10**6 + 1, "must be an integer in [8, 1000000], got 1000001"),
    ("bdh.viz.export.ViewOptions", "hubs", 1, 0, "must be an integer >= 1, got 0"),
]


@pytest.mark.parametrize("path, name, inside, outside, rule", EDGES, ids=lambda v: v if isinstance(v, str) else "")
def test_a_value_just_inside_a_declared_range_passes_and_one_just_outside_is_refused(path, name, inside, outside, rule):
    cls = _class(path)
    assert getattr(dataclasses.replace(cls(), **{name: inside}), name) == inside
    assert getattr(cls.from_dict({name: inside}, prefix="cfg"), name) == inside
    _refused(lambda: dataclasses.replace(cls(), **{name: outside}), cls._key(name), rule)  # the constructor
    _refused(lambda: cls.from_dict({name: outside}, prefix="cfg"), f"cfg.{name}", rule)  # a run config section


def _outside(cls: type, declared: Declared) -> list[tuple[str, typing.Any]]:
    """(which edge, a value) just outside each edge of a declared range."""
    r, integer = declared.range, declared.integer
    if r.choices is not None:
        values = [("choice", "no-such-choice")]
    else:
        values = [(">=", _below(r.ge, integer))] if r.ge is not None else [(">", r.gt)] if r.gt is not None else []
        values += [("<=", _above(r.le, integer))] if r.le is not None else [("<", r.lt)] if r.lt is not None else []
    if declared.items:  # one bad item in the default list
        default = list(getattr(cls(), declared.name))
        values = [(edge, tuple([bad, *default[1:]])) for edge, bad in values]
    return values


RANGES = [
    pytest.param(cls, d, edge, bad, id=f"{cls.__module__.removeprefix('bdh.')}.{cls.__qualname__}.{d.name}{edge}")
    for cls in CLASSES
    for d in declared_ranges(cls)
    for edge, bad in _outside(cls, d)
]


def test_the_package_declares_its_ranges():
    assert len({(p.values[0], p.values[1].name) for p in RANGES}) >= 150
    assert {p.values[0].__name__ for p in RANGES} >= {"BDHConfig", "GPTConfig", "MQARConfig", "TrainConfig"}


@pytest.mark.parametrize("cls, declared, edge, bad", RANGES)
def test_every_declared_range_refuses_a_value_outside_it(cls, declared, edge, bad):
    """Built either way, the error is one line naming the field: a class whose own ``__post_init__`` forgot
    ``super().__post_init__()`` fails here."""
    name = declared.name
    key = re.escape(cls._key(name))
    with pytest.raises(UserError, match=rf"^{key}: must be [^\n]*[,;] got [^\n]*$"):
        dataclasses.replace(cls(), **{name: bad})
    with pytest.raises(UserError, match=rf"^cfg\.{name}: must be [^\n]*[,;] got [^\n]*$"):
        cls.from_dict({name: bad}, prefix="cfg")


@dataclasses.dataclass
class Demo(TypedConfig):
    lr: float = bounded(1e-3, gt=0)
    threads: int | None = bounded(None, ge=1, lt=2**31)
    ratio: float = bounded(4.0, ge=0, lt=1e6)
    layers: tuple[int, ...] = bounded((2, 3), ge=1, why="one pass at least")
    mode: str | None = one_of("a", ("a", "b"))


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(lr=-1), "Demo.lr: must be a number > 0, got -1"),
        (dict(lr=math.inf), "Demo.lr: must be a number > 0, got inf"),
        (dict(lr=True), "Demo.lr: must be a number > 0, got True"),
        (dict(threads=2**31), f"Demo.threads: must be an integer in [1, 2**31) or null, got {2**31}"),
        (dict(threads=2.0), "Demo.threads: must be an integer in [1, 2**31) or null, got 2.0"),
        (dict(ratio=1e6), "Demo.ratio: must be a number in [0, 1000000), got 1000000.0"),
        (dict(layers=(2, 0)), "Demo.layers: must be integers >= 1 (one pass at least), got [2, 0]"),
        (dict(layers=3), "Demo.layers: must be integers >= 1 (one pass at least), got 3"),
        (dict(mode="c"), "Demo.mode: must be one of a, b or null; got 'c'"),
    ],
)
def test_range_errors_are_one_line_naming_the_field(changes, message):
    with pytest.raises(UserError, match="^" + re.escape(message) + "$"):
        Demo(**changes)


def test_null_passes_only_where_the_hint_allows_it():
    assert Demo(threads=None, mode=None).threads is None
    with pytest.raises(UserError, match=r"^Demo\.lr: must be a number > 0, got None$"):
        Demo(lr=None)


def test_choices_given_by_a_callable_are_read_each_time_a_value_is_checked():
    known = ["a"]

    @dataclasses.dataclass
    class Late(TypedConfig):
        names: tuple[str, ...] = one_of(("a",), lambda: known, why="known now")

    with pytest.raises(UserError, match=re.escape("Late.names: must be one of a (known now); got ['a', 'b']") + "$"):
        Late(names=("a", "b"))
    known.append("b")  # e.g. a model registered after the class was defined
    assert Late(names=("a", "b")).names == ("a", "b")
    assert Late.from_dict({"names": ["b"]}).names == ("b",)
    calls = []

    def counted():
        calls.append(1)
        return known

    @dataclasses.dataclass
    class Counted(TypedConfig):
        names: tuple[str, ...] = one_of(("a",), counted)

    assert not calls  # nothing read at class creation
    Counted(names=("a", "b", "a"))
    assert len(calls) == 1  # read once for the whole list


def test_a_range_must_be_declared_on_a_field_it_can_check():
    with pytest.raises(TypeError, match="at most one lower bound"):
        Range(ge=0, gt=0)
    with pytest.raises(TypeError, match="bounds or choices"):
        Range()

    @dataclasses.dataclass
    class Bad(TypedConfig):
        name: str = bounded("x", ge=1)

    with pytest.raises(TypeError, match=r"Bad\.name: bounds need an int or float field"):
        Bad()


def test_a_run_config_changed_after_loading_is_checked_again():
    from bdh.train.config import ConfigError, RunConfig

    config = RunConfig.from_dict({"train": {"batch_size": 4}})
    config.train.batch_size = 0
    with pytest.raises(ConfigError, match=r"^train\.batch_size: must be an integer >= 1, got 0$"):
        config.validate()
    with pytest.raises(ConfigError, match=r"^optim\.lr: must be a number > 0, got -1$"):
        RunConfig.from_dict({"optim": {"lr": -1}})


def test_an_unknown_field_suggests_the_closest_and_only_a_close_one():
    from bdh.errors import UserError
    from bdh.model.config import BDHConfig

    with pytest.raises(UserError, match=r"unknown field 'n_layers' \(did you mean 'n_layer'\?\)"):
        BDHConfig.from_dict({"n_layers": 3})
    with pytest.raises(UserError) as info:
        BDHConfig.from_dict({"zzzz": 3})
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(
    "name, text, value",
    [("n_layer", "3", 3), ("n_neurons", "64", 64), ("dropout", "1e-1", 0.1), ("attention", "chunked", "chunked")],
)
def test_a_field_given_as_text_is_read_as_a_set_value_and_converted(name, text, value):
    from bdh.model.config import BDHConfig
    from bdh.typed_config import parse_override

    got = BDHConfig.field_value(name, text)
    assert got == value and type(got) is type(value)
    assert BDHConfig.from_dict({name: parse_override(f"{name}={text}")[1]}).to_dict()[name] == value


@pytest.mark.parametrize("name, text", [("n_layer", "0"), ("n_embd", "wide"), ("dropout", "1.5"), ("dropout", "nan")])
def test_a_field_given_as_text_is_refused_in_the_words_of_from_dict(name, text):
    """One wording for a bad value, whether it comes from a flag generated from the field or a config file."""
    from bdh.model.config import BDHConfig
    from bdh.typed_config import read_value

    with pytest.raises(UserError) as from_dict:
        BDHConfig.from_dict({name: read_value(text)})
    with pytest.raises(UserError) as from_text:
        BDHConfig.field_value(name, text)
    assert str(from_text.value) == str(from_dict.value)
    assert str(from_text.value).startswith(f"BDHConfig.{name}: ")


def test_a_field_given_as_text_checks_its_range_unless_the_caller_leaves_it_to_the_config():
    from bdh.model.config import BDHConfig

    with pytest.raises(UserError, match=r"^BDHConfig.attention: must be one of .*; got 'flash'$"):
        BDHConfig.field_value("attention", "flash")
    assert BDHConfig.field_value("attention", "flash", ranges=False) == "flash"  # argparse's choices refuse it
    assert BDHConfig.field_value("n_layer", "0", ranges=False) == 0  # BDHConfig refuses it when built
    with pytest.raises(UserError, match="expected an integer, got None"):  # a flag left out is the default
        BDHConfig.field_value("n_neurons", "null")
