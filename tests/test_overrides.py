"""The one ``--set`` syntax (`bdh.typed_config.parse_override`, `apply_overrides`) and the one comma-separated list
(`parse_list`): their values and one-line errors, and that ``bdh train`` and ``bdh experiment`` both read ``--set``
through them and end with the same value for the same text."""

from __future__ import annotations

import pytest

from bdh import typed_config
from bdh.cli import main
from bdh.cli.experiment_cmds import experiment_module, resolve_config
from bdh.errors import UserError
from bdh.train.config import load_config
from bdh.typed_config import ConfigError, apply_overrides, parse_list, parse_override


@pytest.mark.parametrize(
    "item, key, value",
    [
        ("optim.lr=3e-4", "optim.lr", "3e-4"),  # YAML 1.1: a string, which a float field accepts
        ("steps=20", "steps", 20),
        ("lr=0.5", "lr", 0.5),
        ("controls=false", "controls", False),
        ("model.damping=null", "model.damping", None),
        ("seeds=[0, 1]", "seeds", [0, 1]),
        ("recipes=official,alibi", "recipes", "official,alibi"),
        ("prompt=a=b", "prompt", "a=b"),  # the first '=' splits
        (" name =x", "name", "x"),
        ("name=", "name", ""),
        ("name=[unclosed", "name", "[unclosed"),  # not valid YAML: the text itself
    ],
)
def test_parse_override_reads_the_value_as_yaml(item, key, value):
    assert parse_override(item) == (key, value)


@pytest.mark.parametrize(
    "item, message",
    [
        ("optim.lr", r"^--set 'optim.lr': expected key=value"),
        ("=1", r"^--set '=1': bad key ''"),
        ("optim..lr=1", r"^--set 'optim..lr=1': bad key 'optim..lr'"),
        ("optim.=1", r"bad key 'optim.'"),
    ],
)
def test_parse_override_refuses_a_malformed_item_in_one_line(item, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_override(item)
    assert "\n" not in str(info.value)


def test_apply_overrides_nests_dotted_keys_in_a_copy():
    data = {"optim": {"lr": 1e-3}, "model": None}
    out = apply_overrides(data, ["optim.lr=3e-4", "model.n_layer=2", "name=x", "name=y"])
    assert out == {"optim": {"lr": "3e-4"}, "model": {"n_layer": 2}, "name": "y"}  # later items win
    assert data == {"optim": {"lr": 1e-3}, "model": None}  # the given mapping is untouched
    with pytest.raises(ConfigError, match=r"^--set name.sub: name is not a section$"):
        apply_overrides({"name": "x"}, ["name.sub=1"])


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        ("1e-3, 3e-3", float, (1e-3, 3e-3)),
        ("0", int, (0,)),
        (7, int, (7,)),  # a YAML number where a list of one is meant
        ("official , alibi", str, ("official", "alibi")),
        ("-1e-3", float, (-1e-3,)),  # ranges are the caller's fields' (`bounded`)
    ],
)
def test_parse_list_values(text, kind, expected):
    assert parse_list(text, kind, "--x") == expected


@pytest.mark.parametrize(
    "text, kind, message",
    [
        ("1e-3,x", float, r"^--x: 'x' is not a number \(expected a comma-separated list of numbers\)$"),
        ("nan", float, "'nan' is not a finite number"),
        ("", float, "expected a comma-separated list of numbers, got ''"),
        ("0,,1", int, "comma-separated"),
        ("a", int, "'a' is not an integer"),
        ("1.5", int, "not an integer"),
        ("1,1", int, r"^--x: repeated values in '1,1'$"),
    ],
)
def test_parse_list_refuses_bad_lists_in_one_line(text, kind, message):
    with pytest.raises(ConfigError, match=message):
        parse_list(text, kind, "--x", unique=True)


def test_parse_list_allows_repeats_unless_asked():
    assert parse_list("1,1", int, "--x") == (1, 1)


@pytest.mark.parametrize("text", ["3e-4", "0.5", ".5", "5e-1", "0.001"])
def test_train_and_experiment_read_the_same_item_with_the_one_parser(text, monkeypatch):
    seen = []
    real = typed_config.parse_override

    def spy(item: str):
        seen.append(item)
        return real(item)

    monkeypatch.setattr(typed_config, "parse_override", spy)
    run = load_config(None, [f"optim.lr={text}"])
    merge = resolve_config(experiment_module("merge"), True, [f"lr={text}"])
    synapses = resolve_config(experiment_module("synapses"), True, [f"lr={text}"])
    assert seen == [f"optim.lr={text}", f"lr={text}", f"lr={text}"]
    assert type(run.optim.lr) is type(merge.lr) is type(synapses.lr) is float
    assert run.optim.lr == merge.lr == synapses.lr == float(text)


@pytest.mark.parametrize(
    "name, item, field, value",
    [
        ("merge", "lr=1e-3", "lr", 1e-3),  # YAML 1.1 reads 1e-3 as text
        ("merge", "dropout=0", "dropout", 0.0),
        ("merge", "tune_languages=[pt, fr]", "tune_languages", ("pt", "fr")),
        ("long-context", "seeds=0", "seeds", "0"),  # a number in a field of text (a comma-separated list)
        ("long-context", "recall_distances=64", "recall_distances", "64"),
        ("scaling", "seeds=1", "seeds", (1,)),  # a single value for a list of one
        ("synapses", "pairs=[[en, es], [en, fr]]", "pairs", (("en", "es"), ("en", "fr"))),
    ],
)
def test_every_experiment_converts_set_values_to_its_field_types(name, item, field, value):
    config = resolve_config(experiment_module(name), True, [item])
    assert getattr(config, field) == value and type(getattr(config, field)) is type(value)


@pytest.mark.parametrize(
    "name, item, key",
    [
        ("merge", "dropout=x", "merge.dropout"),
        ("merge", "controls=maybe", "merge.controls"),
        ("no-bptt", "steps=1.5", "no-bptt.steps"),
        ("long-context", "seeds=[0, 1]", "long-context.seeds"),
        ("synapses", "rotate=3", "rotate"),
    ],
)
def test_an_experiment_refuses_a_set_value_of_the_wrong_type_naming_the_field(name, item, key):
    with pytest.raises(UserError, match=key) as info:
        resolve_config(experiment_module(name), True, [item])
    assert "\n" not in str(info.value)


def test_a_set_item_without_equals_is_the_same_error_in_train_and_experiment(capsys):
    assert main(["train", "--set", "optim.lr", "--print-config"]) == 2
    train = capsys.readouterr().err
    assert main(["experiment", "merge", "--quick", "--show-config", "--set", "optim.lr"]) == 2
    experiment = capsys.readouterr().err
    assert train == experiment == "bdh: error: --set 'optim.lr': expected key=value, e.g. optim.lr=3e-4\n"
