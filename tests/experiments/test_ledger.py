"""The one ledger of the experiments' finished runs (`bdh.experiments.ledger`): what a resume skips, read back
from files as each experiment wrote them before it had this ledger (long-context's and length's
``results/<run>.json``, scaling's ``runs/<run>/result.json``), written again byte for byte."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bdh.bench.engine import train_or_reuse
from bdh.errors import UserError
from bdh.experiments.ledger import Ledger, RecordError
from bdh.experiments.length.records import ledger as length_ledger
from bdh.experiments.scaling.runs import RunLedger, RunSpec


def test_a_resume_reuses_finished_runs_and_makes_the_rest(tmp_path):
    records = Ledger(tmp_path / "results")
    made: list[str] = []

    def make(run: str) -> dict:
        made.append(run)
        return {"run": run, "loss": np.float32(0.5)}  # a NumPy value, written through the one encoder

    first = records.make_all(["a", "b"], make, resume=False)
    assert made == ["a", "b"] and [r["run"] for r in first] == ["a", "b"]
    (tmp_path / "results" / "b.json").write_text("{cut")  # damaged, and no rebuild advice: that run is made again
    reused: list[str] = []
    again = records.make_all(["a", "b", "c"], make, resume=True, reused=reused.append)
    assert reused == ["a"] and made == ["a", "b", "b", "c"]
    assert again[0] == {"run": "a", "loss": 0.5} and records.find("c") == {"run": "c", "loss": 0.5}
    records.make_all(["a"], make, resume=False)  # without resume every run is made
    assert made[-1] == "a"


def test_records_as_the_experiments_wrote_them_before_read_back_and_are_written_alike(tmp_path):
    """The bytes the long-context (``indent=1``) and length (``indent=1``) experiments wrote before this ledger."""
    record = {"recipe": "gpt", "seed": 0, "cut": {"bits": [1.5, 2.25]}, "train_seconds": 3.5}
    old = (json.dumps(record, indent=1) + "\n").encode()
    path = tmp_path / "results" / "gpt-s0.json"
    path.parent.mkdir()
    path.write_bytes(old)
    ledger = Ledger(tmp_path / "results")
    assert ledger.path("gpt-s0") == path and ledger.find("gpt-s0") == record
    assert ledger.make_all(["gpt-s0"], lambda run: pytest.fail("a finished run is made again"), resume=True) == [record]
    ledger.add("gpt-s0", record)
    assert path.read_bytes() == old


def test_scaling_reads_a_folder_written_before_and_retrains_another_spec(tmp_path):
    """A result.json as the scaling experiment wrote it before (sorted keys, indent 1, the spec's identity under
    "spec") is read back; a damaged file or another spec is trained again."""
    spec = RunSpec(
        "gpt", 0, 0.5, 0, {"name": "gpt"}, {"name": "text", "data": "/x"}, "d", 4, 2, None, 2, 1, 1, "cpu", "fp32"
    )
    folder = tmp_path / "runs" / "gpt" / "size0-lr0.5-s0"
    folder.mkdir(parents=True)
    old = {"spec": json.loads(json.dumps({**spec.__dict__, "task": {"name": "text"}})), "val_loss": 1.5}
    written = (json.dumps(old, indent=1, sort_keys=True) + "\n").encode()
    (folder / "result.json").write_bytes(written)
    ledger = RunLedger(tmp_path / "runs")
    assert ledger.folder(spec) == folder and ledger.find(spec) == old
    ledger.add(spec, folder, old)
    assert (folder / "result.json").read_bytes() == written
    other = RunSpec(*[*spec.__dict__.values()][:7], 5, *[*spec.__dict__.values()][8:])
    assert ledger.find(other) is None
    (folder / "result.json").write_bytes(b"\xff\xfe")
    assert ledger.find(spec) is None

    def train(s, run_dir):
        run_dir.mkdir(parents=True)
        return {"spec": s.key(), "val_loss": 2.0}

    row, reused = train_or_reuse(spec, folder, ledger, train, resume=True)
    assert not reused and ledger.find(spec) == row


@pytest.mark.parametrize(
    "data, said", [(b"{cut", "is not JSON"), (b"\xff\xfe", "is not text"), (b"[1]", "holds a JSON list")]
)
def test_a_damaged_record_with_rebuild_advice_is_one_line_naming_the_file(tmp_path, data, said):
    ledger = Ledger(tmp_path, rebuild="run it again with --resume")
    ledger.path("r").write_bytes(data)
    with pytest.raises(RecordError) as info:
        ledger.find("r")
    message = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in message
    assert message.startswith(f"{ledger.path('r')}: {said}") and message.endswith("; run it again with --resume")


def test_the_experiments_check_runs_on_the_object_read_back(tmp_path):
    ledger = Ledger(tmp_path, rebuild="rebuild it")
    ledger.add("r", {"score": 2.0})
    check = lambda r: None if 0 <= r["score"] <= 1 else "has a score outside [0, 1]"  # noqa: E731
    with pytest.raises(RecordError, match="r.json: has a score outside"):
        ledger.find("r", check=check)
    assert Ledger(tmp_path).find("r", check=check) is None  # without advice: a run to make again
    assert length_ledger(tmp_path).folder == tmp_path / "results"
