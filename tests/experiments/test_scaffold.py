"""The experiments' shared scaffold: the marked output folder, resume against its config, and the one JSON encoder
of results (the runs ledger: test_ledger.py)."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bdh.errors import UserError
from bdh.experiments.scaffold import ExperimentFolder
from bdh.outputs import json_default, json_ready

FOLDER = ExperimentFolder("demo", selectors=("seeds",))


def test_resume_takes_a_new_an_empty_or_its_own_folder_and_refuses_another(tmp_path):
    assert FOLDER.prepare_resume(tmp_path / "new").is_dir()
    (tmp_path / "empty").mkdir()
    assert FOLDER.prepare_resume(tmp_path / "empty") == tmp_path / "empty"
    ours = tmp_path / "ours"
    FOLDER.mark({"steps": 10, "seeds": "0"}, ours, resume=False)
    (ours / "kept.txt").write_text("x")
    assert (FOLDER.prepare_resume(ours) / "kept.txt").is_file()  # kept as it is
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(UserError, match=r"is not a demo experiment folder \(no demo.json\)"):
        FOLDER.prepare_resume(other)


def test_the_marker_holds_the_config_and_resume_refuses_another_outside_the_selectors(tmp_path):
    FOLDER.mark({"steps": 10, "seeds": "0"}, tmp_path, resume=False)
    assert json.loads((tmp_path / "demo.json").read_text()) == {
        "experiment": "demo",
        "config": {"steps": 10, "seeds": "0"},
    }
    FOLDER.mark({"steps": 10, "seeds": "0,1"}, tmp_path, resume=True)  # a selector: more seeds may be added
    with pytest.raises(UserError, match=r"made with another config \(differs in steps\)"):
        FOLDER.mark({"steps": 20, "seeds": "0,1"}, tmp_path, resume=True)
    FOLDER.mark({"steps": 20, "seeds": "0"}, tmp_path, resume=False)  # a fresh start rewrites it
    ExperimentFolder("demo").mark({"steps": 30}, tmp_path, resume=True)  # no selectors: never compared


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"experiment": "demo"}', '{"config": [1]}'])
def test_a_damaged_marker_is_one_line_under_resume(tmp_path, text):
    (tmp_path / "demo.json").write_text(text)
    with pytest.raises(UserError, match="damaged") as err:
        FOLDER.mark({"steps": 10, "seeds": "0"}, tmp_path, resume=True)
    assert "\n" not in str(err.value)


@dataclasses.dataclass
class _Point:
    x: float


def test_one_encoder_for_numpy_dataclasses_and_paths_and_strict_json_on_request():
    data = {"f": np.float64(1.5), "i": np.int32(3), "b": np.bool_(True), "a": np.arange(2), "p": Path("x/y")}
    data["d"] = _Point(2.0)
    assert json.loads(json.dumps(data, default=json_default)) == {
        "f": 1.5, "i": 3, "b": True, "a": [0, 1], "p": "x/y", "d": {"x": 2.0}
    }  # fmt: skip
    with pytest.raises(TypeError, match="not JSON-serialisable: object"):
        json_default(object())
    assert json_ready({1: (np.float32(0.25), math.nan, -math.inf)}) == {"1": [0.25, None, None]}
