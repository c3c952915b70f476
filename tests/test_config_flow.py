"""`tools/config_flow.py`: the run config of ``bdh train`` is built once, in one place, and the counts of its path."""

import importlib.util
from collections import Counter
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "config_flow.py"


def _tool():
    spec = importlib.util.spec_from_file_location("config_flow", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_path_and_returns_count_files_left_and_visited_again():
    flow = _tool()
    steps = [(f, "f", False) for f in ("a", "a", "b", "a", "c", "b", "b")]
    assert flow.path_of(steps) == ["a", "b", "a", "c", "b"]
    assert flow.returns(["a", "b", "a", "c", "b"]) == 2  # back to a, back to b


def test_every_config_of_a_training_run_is_built_once_while_the_run_config_is_parsed(tmp_path):
    flow = _tool()
    argv = ["train", "--quick", "--run-dir", str(tmp_path / "run"), "--set", "train.max_steps=1", *flow.SMALL]
    steps, built = flow.trace_train([*argv, "--set", "sample.max_new_tokens=0", "--set", "train.threads=1"])
    times = Counter(kind for kind, _, _ in built)
    assert {"RunConfig", "BDHConfig", "TextConfig", "TrainConfig", "OptimConfig"} <= set(times)
    assert set(times.values()) == {1}, times  # none rebuilt on its way down (BDHConfig and TextConfig were, 3 times)
    assert {file for _, file, _ in built} == {"train/config.py"}  # one place: the run config's parse
    assert any(file == "model/bdh.py" for file, _, _ in steps)  # the model received its config: the trace reached it
