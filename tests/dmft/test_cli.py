"""`bdh dmft` commands: outputs written, bad arguments -> one-line error with exit status 2."""

import json
import re

import numpy as np
import pytest
import torch

import bdh
from bdh.cli import main
from bdh.dmft.probe import ProbeConfig, run_probe
from bdh.train.run.checkpoint import resolve_model_dir


def _one_line_error(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bdh: error: ") and "\n" not in err
    return err


def test_bifurcation_writes_outputs(tmp_path, capsys, readable_figures):
    out = tmp_path / "bif"
    assert (
        main(
            [
                "dmft",
                "bifurcation",
                "--beta",
                "0.5:1.5:5",
                "--steps",
                "600",
                "--keep",
                "200",
                "--lyap-steps",
                "200",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert {p.name for p in out.iterdir()} == {"bifurcation.png", "bifurcation.npz", "summary.json"}
    with np.load(out / "bifurcation.npz") as z:
        assert z["mo_se"].shape == (5, 200, 3) and z["lyap"].shape == (5,)
    s = json.loads((out / "summary.json").read_text())
    assert s["n_beta"] == 5 and sum(s["regime_counts"].values()) == 5
    assert (out / "bifurcation.png").stat().st_size < 300_000
    assert "Bifurcation diagram" in readable_figures()["bifurcation.png"]


def test_trajectory_writes_outputs(tmp_path, capsys, readable_figures):
    out = tmp_path / "tr"
    assert (
        main(
            [
                "dmft",
                "trajectory",
                "--beta",
                "1.27,1.4",
                "--steps",
                "800",
                "--keep",
                "300",
                "--lyap-steps",
                "300",
                "--out",
                str(out),
                "--init",
                "token",
            ]
        )
        == 0
    )
    names = {p.name for p in out.iterdir()}
    assert {
        "trajectory-beta1.27.png",
        "trajectory-beta1.27.npz",
        "trajectory-beta1.4.npz",
        "portraits.png",
        "summary.json",
    } <= names
    with np.load(out / "trajectory-beta1.4.npz") as z:
        assert z["lyapunov"].shape == (12,) and np.all(np.diff(z["lyapunov"]) <= 1e-12)
        assert z["acf"][0] == pytest.approx(1.0)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind
    titles = readable_figures()
    assert "phase portraits" in titles["portraits.png"] and "1.27" in titles["trajectory-beta1.27.png"]


@pytest.mark.parametrize(
    "argv",
    [
        ["dmft", "bifurcation", "--beta", "3:0:x", "--out", "X"],
        ["dmft", "bifurcation", "--beta", "0:3:0", "--out", "X"],
        ["dmft", "trajectory", "--beta", "1.27", "--steps", "10", "--keep", "20", "--out", "X"],
        ["dmft", "trajectory", "--beta", "abc", "--out", "X"],
        ["dmft", "bifurcation", "--steps", "-5", "--out", "X"],
        ["dmft", "probe", "does/not/exist"],
    ],
)
def test_bad_arguments(tmp_path, capsys, argv):
    argv = [a if a != "X" else str(tmp_path / "x") for a in argv]
    _one_line_error(capsys, argv)
    assert not (tmp_path / "x").exists()


def _tiny(tmp_path):
    torch.manual_seed(0)
    model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256))
    model.save_pretrained(tmp_path / "run" / "best")
    return model


def test_probe_command_on_run_folder(tmp_path, capsys, readable_figures):
    _tiny(tmp_path)
    run = tmp_path / "run"
    assert main(["dmft", "probe", str(run), "--temperatures", "0.5,1.5", "--steps", "40", "--transient", "10"]) == 0
    out = run / "reports" / "dmft-probe"
    assert {p.name for p in out.iterdir()} == {"probe.json", "probe.npz", "probe.png"}
    rep = json.loads((out / "probe.json").read_text())
    assert [r["temperature"] for r in rep["per_temperature"]] == [0.5, 1.5]
    assert all(np.isfinite(r["lyapunov"]) for r in rep["per_temperature"])
    assert rep["model_dir"] == "best"
    assert "dynamical system" in readable_figures()["probe.png"]
    # an empty folder is an error, not a crash
    (tmp_path / "empty").mkdir()
    _one_line_error(capsys, ["dmft", "probe", str(tmp_path / "empty")])


def test_resolve_model_dir(tmp_path):
    model = _tiny(tmp_path)
    assert resolve_model_dir(tmp_path / "run") == tmp_path / "run" / "best"
    assert resolve_model_dir(tmp_path / "run" / "best") == tmp_path / "run" / "best"
    for n in (5, 20):
        model.save_pretrained(tmp_path / "run2" / "checkpoints" / f"step-{n}")
    assert resolve_model_dir(tmp_path / "run2").name == "step-20"


@pytest.mark.parametrize("retention", [0.9, 0.5])
def test_probe_lyapunov_follows_state_damping(retention):
    """With the damping U = u I of Eq. 8 the state recursion is rho_{t+1} = u rho_t + x_t v_t^T, so a
    perturbation of rho shrinks by about u per token: lambda_1 ~ log u (the feedback through x, v only
    adds a small correction in a random model). Without damping the perturbation persists: lambda_1 ~ 0."""
    torch.manual_seed(0)
    model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256, damping=retention))
    rep, _ = run_probe(model, ProbeConfig(temperatures=(0.0, 1.0), n_transient=20, n_steps=60, seed=3))
    for r in rep["per_temperature"]:
        assert r["lyapunov"] == pytest.approx(np.log(retention), abs=0.05)


def test_probe_is_reproducible_and_marginal_without_damping():
    torch.manual_seed(0)
    model = bdh.BDH(bdh.BDHConfig(n_layer=2, n_embd=32, n_head=2, n_neurons=256))
    pc = ProbeConfig(temperatures=(0.0, 1.0), n_transient=20, n_steps=60, seed=3)
    rep1, s1 = run_probe(model, pc)
    _, s2 = run_probe(model, pc)
    np.testing.assert_array_equal(s1["readout"], s2["readout"])
    np.testing.assert_array_equal(s1["log_growth"], s2["log_growth"])
    assert s1["readout"].shape == (2, 60, 3)
    for r in rep1["per_temperature"]:
        assert abs(r["lyapunov"]) < 0.01
        assert r["token_divergence_rate"] <= 0.05


def test_convergence_figure_is_readable(tmp_path, readable_figures):
    """The finite-size figure, drawn from arrays shaped as `finite_size_errors` returns them (sizes x seeds)."""
    from bdh.dmft.plots import convergence_figure
    from bdh.plotting import save_figure

    errors = np.array([[0.04, 0.05], [0.013, 0.012], [0.004, 0.0045]])
    save_figure(convergence_figure([990, 9900, 99000], errors, -0.5), tmp_path / "convergence", ("png",), tight=False)
    assert "mean field" in readable_figures()["convergence.png"]


# ------------------------------------------------------------------ a Python caller gets what the command printed
def _printed(capsys, argv) -> list[str]:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines()


def _same_arrays(a, b) -> None:
    # the same code on the same inputs in one process: the same arrays, bit for bit
    with np.load(a) as za, np.load(b) as zb:
        assert sorted(za.files) == sorted(zb.files)
        for k in za.files:
            np.testing.assert_array_equal(za[k], zb[k])


def test_a_python_caller_of_write_sweep_gets_what_bdh_dmft_bifurcation_printed(tmp_path, capsys):
    from bdh.dmft.folders import write_sweep

    run = ["--steps", "300", "--keep", "100", "--lyap-steps", "50"]
    (line,) = _printed(capsys, ["dmft", "bifurcation", "--beta", "0.5,1.3,2.5", *run, "--out", str(tmp_path / "cli")])
    written = write_sweep(np.array([0.5, 1.3, 2.5]), tmp_path / "lib", n_steps=300, n_keep=100, n_lyap=50)
    shape = r"3 betas in [\d.]+ s \(simulate [\d.]+ s, Lyapunov [\d.]+ s\); regimes (\{.*\}); wrote (.+)"
    cli, lib = re.fullmatch(shape, line), re.fullmatch(shape, written.summary())
    # the seconds are the one field two runs may not share
    assert cli[1] == lib[1] == str(written.regime_counts) and sum(written.regime_counts.values()) == 3
    assert (cli[2], lib[2]) == (str(tmp_path / "cli"), str(tmp_path / "lib")) and written.path == tmp_path / "lib"
    _same_arrays(tmp_path / "cli" / "bifurcation.npz", tmp_path / "lib" / "bifurcation.npz")
    assert list(written.result.regime) == list(
        np.load(tmp_path / "lib" / "bifurcation.npz", allow_pickle=True)["regime"]
    )


def test_a_python_caller_of_write_trajectories_gets_what_bdh_dmft_trajectory_printed(tmp_path, capsys):
    from bdh.dmft.folders import write_trajectories

    run = ["--steps", "300", "--keep", "100", "--lyap-steps", "50", "--max-lag", "20"]
    printed = _printed(capsys, ["dmft", "trajectory", "--beta", "1.27,1.4", *run, "--out", str(tmp_path / "cli")])
    written = write_trajectories(
        np.array([1.27, 1.4]), tmp_path / "lib", n_steps=300, n_keep=100, n_lyap=50, max_lag=20
    )
    lines = written.summary().splitlines()
    assert lines[:-1] == printed[:-1] and len(lines) == 3
    assert (printed[-1], lines[-1]) == (f"wrote {tmp_path / 'cli'}", f"wrote {tmp_path / 'lib'}")
    summary = json.loads((tmp_path / "lib" / "summary.json").read_text())
    assert summary["trajectories"] == list(written.entries) and [r.beta for r in written.results] == [1.27, 1.4]
    assert summary["config"] == json.loads((tmp_path / "cli" / "summary.json").read_text())["config"]
    _same_arrays(tmp_path / "cli" / "trajectory-beta1.4.npz", tmp_path / "lib" / "trajectory-beta1.4.npz")


def test_a_python_caller_of_write_convergence_gets_what_bdh_dmft_convergence_printed(tmp_path, capsys):
    from bdh.dmft.folders import write_convergence

    run = ["--seeds", "2", "--steps", "60", "--keep", "30"]
    printed = _printed(capsys, ["dmft", "convergence", "--n", "30,300", *run, "--out", str(tmp_path / "cli")])
    written = write_convergence(1.0, [30, 300], tmp_path / "lib", n_seeds=2, n_steps=60, n_keep=30)
    assert written.summary().replace(str(tmp_path / "lib"), str(tmp_path / "cli")) == printed[0] and len(printed) == 1
    assert written.result["errors"].shape == (2, 2) and written.summary().startswith(
        f"slope of log error vs log N: {written.result['slope']:.3f}"
    )
    _same_arrays(tmp_path / "cli" / "convergence.npz", tmp_path / "lib" / "convergence.npz")


def test_a_python_caller_of_write_probe_gets_what_bdh_dmft_probe_printed(tmp_path, capsys):
    from bdh.cli.checks import load_model
    from bdh.dmft.folders import write_probe

    _tiny(tmp_path)
    run = tmp_path / "run"
    argv = ["dmft", "probe", str(run), "--temperatures", "0.5,1.5", "--steps", "16", "--transient", "4"]
    printed = _printed(capsys, [*argv, "--out", str(tmp_path / "cli")])
    model = load_model(run / "best", announce=False)
    cfg = ProbeConfig(temperatures=(0.5, 1.5), n_transient=4, n_steps=16)
    written = write_probe(model, cfg, tmp_path / "lib", model_dir=run / "best", run_dir=run)
    lines = written.summary().splitlines()
    assert printed[0].startswith("model: ") and lines[:-1] == printed[1:-1] and len(lines) == 3
    assert (printed[-1], lines[-1]) == (f"wrote {tmp_path / 'cli'}", f"wrote {tmp_path / 'lib'}")
    assert (
        written.report == json.loads((tmp_path / "cli" / "probe.json").read_text())
        and written.report["model_dir"] == "best"
    )
    _same_arrays(tmp_path / "cli" / "probe.npz", tmp_path / "lib" / "probe.npz")


def test_the_dmft_folder_writers_refuse_bad_requests_in_one_line(tmp_path):
    from bdh.baselines.gpt import GPT, GPTConfig
    from bdh.dmft.folders import MAX_TRAJECTORIES, write_convergence, write_probe, write_trajectories
    from bdh.errors import UserError

    with pytest.raises(UserError, match=f"at most {MAX_TRAJECTORIES} betas"):
        write_trajectories(np.linspace(0, 3, MAX_TRAJECTORIES + 1), tmp_path / "t", n_steps=10, n_keep=5)
    with pytest.raises(UserError, match="init must be one of"):
        write_trajectories(np.array([1.0]), tmp_path / "t", n_steps=10, n_keep=5, n_lyap=5, init="random")
    for sizes in ([30], [2, 30]):
        with pytest.raises(UserError, match="at least two sizes >= 3"):
            write_convergence(1.0, sizes, tmp_path / "c", n_seeds=1, n_steps=10, n_keep=5)
    gpt = GPT(GPTConfig(n_layer=1, n_embd=16, n_head=2))
    with pytest.raises(UserError, match="a GPT model; the probe runs BDH models"):
        write_probe(gpt, ProbeConfig(temperatures=(1.0,), n_steps=8), tmp_path / "p", model_dir=tmp_path / "gpt")
    assert not list(tmp_path.iterdir())  # nothing written
