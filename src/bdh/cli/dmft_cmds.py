"""``bdh dmft``: the mean-field lab (dynamical mean-field theory of self-attention, Poc-López & Aguilera 2024)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bdh.errors import UserError

from .checks import add_overwrite, checked_model_dir, declared_integer, integer, load_model, number


def _count(name: str, config: str = "bdh.dmft.experiments:RunLength"):
    """The argparse type of a count: the range declared on ``config``'s field ``name``, imported only to read
    a value."""

    def parse(text: str) -> int:
        import importlib

        module, _, cls = config.partition(":")
        return declared_integer(getattr(importlib.import_module(module), cls), name)(text)

    parse.__name__ = "integer"
    return parse


def _probe(name: str):
    """The argparse type of a count of the probe: the range declared on `bdh.dmft.probe.ProbeConfig`."""
    return _count(name, "bdh.dmft.probe:ProbeConfig")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gamma", type=number(0), default=220.0, help="attention inverse temperature gamma (default 220)")
    p.add_argument("--epsilon", type=number(0), default=0.02, help="weight of the positional encoding (default 0.02)")
    p.add_argument(
        "--seed", type=integer(), default=1, help="weight seed (paper's draw order; default 1 = the paper's network)"
    )
    p.add_argument(
        "--init",
        choices=("continue", "token"),
        default="continue",
        help=(
            "continue: start every beta from the final window of the largest beta (paper, default); "
            "token: from x0 = W^o_1"
        ),
    )


def register(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser(
        "dmft",
        help="mean-field lab: attention dynamics in the mean field, and BDH as a dynamical system",
        description="Dynamical mean-field theory of self-attention networks (Poc-López & Aguilera 2024): "
        "reproduce the paper's beta sweeps, trajectories and Lyapunov exponents, and probe a trained BDH.",
    )
    gs = g.add_subparsers(dest="dmft_command", metavar="COMMAND", parser_class=type(g))
    g.set_defaults(func=lambda args: (g.print_help(), 0)[1])
    _register_bifurcation(gs)
    _register_trajectory(gs)
    _register_convergence(gs)
    _register_probe(gs)


def _register_bifurcation(gs: argparse._SubParsersAction) -> None:
    """``bdh dmft bifurcation``: the beta sweep (paper Fig. 3)."""
    b = gs.add_parser(
        "bifurcation",
        help="beta sweep: bifurcation diagram (paper Fig. 3) and largest Lyapunov exponent",
        description="Simulate the mean-field equations for every beta at once (vectorised) and write "
        "bifurcation.png, bifurcation.npz (beta, m^o trajectories, lambda_1, regimes) and summary.json.",
    )
    b.add_argument("--beta", default="0:3:401", help="START:STOP:NUM or a comma list (default 0:3:401)")
    b.add_argument("--out", required=True, help="output folder")
    add_overwrite(b, "the --out folder")
    b.add_argument(
        "--steps",
        type=_count("steps"),
        default=120_000,
        help="steps per beta (default 120000, as the released configs)",
    )
    b.add_argument("--keep", type=_count("keep"), default=20_000, help="steps kept at the end (default 20000)")
    b.add_argument("--lyap-steps", type=_count("lyap_steps"), default=5_000, help="steps for lambda_1 (default 5000)")
    b.add_argument("--chunk", type=integer(1), default=None, help="betas per batch (default all; lower to save memory)")
    _add_model_args(b)
    b.set_defaults(func=cmd_bifurcation)


def _register_trajectory(gs: argparse._SubParsersAction) -> None:
    """``bdh dmft trajectory``: trajectories at given betas (paper Figs. 4-5)."""
    t = gs.add_parser(
        "trajectory",
        help="trajectory, phase portrait, autocorrelation, spectrum and Lyapunov spectrum at given betas",
        description=(
            "For each beta write trajectory-beta<B>.png/.npz (paper Figs. 4-5), portraits.png and summary.json."
        ),
    )
    t.add_argument("--beta", required=True, help="a beta, a comma list, or START:STOP:NUM")
    t.add_argument("--out", required=True, help="output folder")
    add_overwrite(t, "the --out folder")
    t.add_argument("--steps", type=_count("steps"), default=120_000)
    t.add_argument("--keep", type=_count("keep"), default=20_000)
    t.add_argument("--lyap-steps", type=_count("lyap_steps"), default=5_000)
    t.add_argument(
        "--max-lag", type=_count("max_lag"), default=200, help="largest lag of the autocorrelation (default 200)"
    )
    _add_model_args(t)
    t.set_defaults(func=cmd_trajectory)


def _register_convergence(gs: argparse._SubParsersAction) -> None:
    """``bdh dmft convergence``: the finite network against the mean field."""
    c = gs.add_parser(
        "convergence",
        help="finite-size network vs mean field: error against N (expect N^-1/2)",
        description="Simulate the finite network (exact bit-by-bit output sampling, in its binomial form) for "
        "several sizes and seeds at one beta, and fit the slope of log error against log N.",
    )
    c.add_argument("--beta", type=number(0), default=1.0, help="inverse temperature beta (default 1)")
    c.add_argument("--n", default="990,9900,99000,990000", help="semantic sizes N_se, comma list (multiples of 3)")
    c.add_argument("--seeds", type=_count("seeds"), default=8, help="independent samples per N (default 8)")
    c.add_argument("--steps", type=_count("steps"), default=2000)
    c.add_argument("--keep", type=_count("keep"), default=1000)
    c.add_argument("--out", required=True, help="output folder")
    add_overwrite(c, "the --out folder")
    _add_model_args(c)
    c.set_defaults(func=cmd_convergence)


def _register_probe(gs: argparse._SubParsersAction) -> None:
    """``bdh dmft probe``: a trained BDH as a dynamical system."""
    p = gs.add_parser(
        "probe",
        help="run a trained BDH as a dynamical system: readout trajectory, ACF, spectrum, lambda_1 vs temperature",
        description="Generate autoregressively at several sampling temperatures (the control parameter, like beta) and "
        "report a low-dimensional readout, its autocorrelation and spectrum, and the largest Lyapunov exponent from "
        "two nearby states. Writes probe.json, probe.npz and probe.png into RUN_DIR/reports/dmft-probe (or --out).",
    )
    p.add_argument("run_dir", help="a save_pretrained model folder, or a run folder with best/ or checkpoints/step-N/")
    p.add_argument("--out", default=None, help="output folder (default RUN_DIR/reports/dmft-probe)")
    add_overwrite(p, "the --out folder")
    p.add_argument(
        "--temperatures",
        default="0.5,0.8,1.0,1.3,1.6",
        help="comma list or START:STOP:NUM (default 0.5,0.8,1.0,1.3,1.6)",
    )
    p.add_argument("--steps", type=_probe("n_steps"), default=1000, help="recorded tokens (default 1000)")
    p.add_argument("--transient", type=_probe("n_transient"), default=200, help="tokens discarded first (default 200)")
    p.add_argument("--features", type=integer(1), default=3, help="readout dimension M (default 3)")
    p.add_argument(
        "--delta",
        type=number(0, 1, low_open=True),
        default=1e-4,
        help="relative size of the state perturbation (default 1e-4)",
    )
    p.add_argument("--prompt", default="\n", help="prompt text (UTF-8 bytes, modulo the vocabulary; default newline)")
    p.add_argument("--seed", type=integer(), default=0, help="sampling seed (default 0)")
    p.add_argument("--threads", type=integer(1), default=1, help="torch threads (default 1)")
    p.set_defaults(func=cmd_probe)


def _weights_params(args):
    from bdh.dmft.weights import DMFTParams, paper_weights

    params = DMFTParams(epsilon=args.epsilon, gamma=args.gamma)
    return paper_weights(seed=args.seed, params=params), params


def _out(args, path, inputs=()) -> Path:
    """The checked --out folder (refused if it exists and is not empty, unless --overwrite)."""
    from bdh.outputs import check_output

    return check_output(path, overwrite=args.overwrite, folder=True, inputs=inputs)


def _check_keep(args) -> None:
    if args.keep > args.steps:
        raise UserError(f"--keep ({args.keep}) must not exceed --steps ({args.steps})")


def cmd_bifurcation(args) -> int:
    """The beta sweep (`bdh.dmft.folders.write_sweep`)."""
    from bdh.dmft.experiments import parse_range
    from bdh.dmft.folders import write_sweep

    beta = parse_range(args.beta, "--beta")
    _check_keep(args)
    out_dir = _out(args, args.out)
    w, params = _weights_params(args)
    written = write_sweep(
        beta,
        out_dir,
        n_steps=args.steps,
        n_keep=args.keep,
        n_lyap=args.lyap_steps,
        init=args.init,
        weights=w,
        params=params,
        chunk=args.chunk,
    )
    print(written.summary())
    return 0


def cmd_trajectory(args) -> int:
    """Trajectories at a few betas (`bdh.dmft.folders.write_trajectories`)."""
    from bdh.dmft.experiments import parse_range
    from bdh.dmft.folders import check_trajectory_count, write_trajectories

    betas = parse_range(args.beta, "--beta")
    check_trajectory_count(betas)
    _check_keep(args)
    out_dir = _out(args, args.out)
    w, params = _weights_params(args)
    run = dict(n_steps=args.steps, n_keep=args.keep, n_lyap=args.lyap_steps, max_lag=args.max_lag, init=args.init)
    print(write_trajectories(betas, out_dir, weights=w, params=params, **run).summary())
    return 0


def cmd_convergence(args) -> int:
    """The finite network against the mean field (`bdh.dmft.folders.write_convergence`)."""
    from bdh.dmft.folders import check_sizes, write_convergence

    try:
        ns = [int(v) for v in args.n.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"--n must be a comma list of integers, got {args.n!r}") from None
    check_sizes(ns, "--n")
    _check_keep(args)
    out_dir = _out(args, args.out)
    w, params = _weights_params(args)
    run = dict(n_seeds=args.seeds, n_steps=args.steps, n_keep=args.keep, init=args.init)
    print(write_convergence(args.beta, ns, out_dir, weights=w, params=params, **run).summary())
    return 0


def cmd_probe(args) -> int:
    """A trained BDH as a dynamical system (`bdh.dmft.folders.write_probe`)."""
    from bdh.dmft.experiments import parse_range
    from bdh.dmft.folders import write_probe
    from bdh.dmft.probe import ProbeConfig

    if not args.prompt:
        raise UserError("--prompt: the prompt is empty; give at least one character")
    model_dir = checked_model_dir(args.run_dir)
    cfg = ProbeConfig(
        temperatures=tuple(float(t) for t in parse_range(args.temperatures, "--temperatures")),
        n_transient=args.transient,
        n_steps=args.steps,
        n_features=args.features,
        delta=args.delta,
        prompt=args.prompt,
        seed=args.seed,
        threads=args.threads,
    )
    out = args.out if args.out else Path(args.run_dir) / "reports" / "dmft-probe"
    out_dir = _out(args, out, inputs=[args.run_dir, model_dir])
    written = write_probe(load_model(model_dir), cfg, out_dir, model_dir=model_dir, run_dir=Path(args.run_dir))
    print(written.summary())
    return 0
