"""``bdh dmft``: the mean-field lab (dynamical mean-field theory of self-attention, Poc-López & Aguilera 2024).

bdh dmft bifurcation --beta 0:3:401 --out DIR     beta sweep: bifurcation diagram + lambda_1(beta)
bdh dmft trajectory --beta 1.27 --out DIR         one (or a few) beta: phase portrait, ACF, spectrum
bdh dmft convergence --out DIR                    finite-size network vs mean field against N
bdh dmft probe RUN_DIR                            a trained BDH as a dynamical system (temperature sweep)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bdh.errors import UserError

from .checks import add_overwrite, checked_model_dir, integer, load_model, number


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
        "--steps", type=integer(1), default=120_000, help="steps per beta (default 120000, as the released configs)"
    )
    b.add_argument("--keep", type=integer(1), default=20_000, help="steps kept at the end (default 20000)")
    b.add_argument("--lyap-steps", type=integer(1), default=5_000, help="steps for lambda_1 (default 5000)")
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
    t.add_argument("--steps", type=integer(1), default=120_000)
    t.add_argument("--keep", type=integer(1), default=20_000)
    t.add_argument("--lyap-steps", type=integer(1), default=5_000)
    t.add_argument("--max-lag", type=integer(1), default=200, help="largest lag of the autocorrelation (default 200)")
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
    c.add_argument("--seeds", type=integer(1), default=8, help="independent samples per N (default 8)")
    c.add_argument("--steps", type=integer(1), default=2000)
    c.add_argument("--keep", type=integer(1), default=1000)
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
    p.add_argument("--steps", type=integer(1), default=1000, help="recorded tokens (default 1000)")
    p.add_argument("--transient", type=integer(0), default=200, help="tokens discarded first (default 200)")
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
    import numpy as np

    from bdh.dmft.experiments import parse_range, run_sweep
    from bdh.dmft.output import OutputDir
    from bdh.dmft.plots import bifurcation_figure

    beta = parse_range(args.beta)
    _check_keep(args)
    out_dir = _out(args, args.out)
    w, params = _weights_params(args)
    res = run_sweep(
        beta,
        n_steps=args.steps,
        n_keep=args.keep,
        n_lyap=args.lyap_steps,
        init=args.init,
        weights=w,
        params=params,
        chunk=args.chunk,
    )
    counts = {r: int((res.regime == r).sum()) for r in ("periodic", "quasi-periodic", "chaotic")}
    with OutputDir.create(out_dir) as out:
        out.npz(
            "bifurcation.npz",
            beta=res.beta,
            mo_se=res.mo_se.astype(np.float32),
            lyap=res.lyap[:, 0],
            n_distinct=res.n_distinct,
            regime=res.regime,
        )
        out.figure("bifurcation.png", bifurcation_figure(res.beta, res.mo_se, res.regime, res.lyap[:, 0]))
        out.json(
            "summary.json",
            {
                "n_beta": int(beta.size),
                "beta_range": [float(beta.min()), float(beta.max())],
                "regime_counts": counts,
                "seconds": res.seconds,
                "config": res.config,
            },
        )
    print(
        f"{beta.size} betas in {res.seconds['total']:.1f} s (simulate {res.seconds['simulate']:.1f} s, "
        f"Lyapunov {res.seconds['lyapunov']:.1f} s); regimes {counts}; wrote {args.out}"
    )
    return 0


def cmd_trajectory(args) -> int:
    from bdh.dmft.experiments import initial_window, parse_range, run_trajectory
    from bdh.dmft.meanfield import MeanField
    from bdh.dmft.output import OutputDir
    from bdh.dmft.plots import portraits_figure

    betas = parse_range(args.beta)
    if betas.size > 12:
        raise UserError(
            f"trajectory: at most 12 betas at a time, got {betas.size} (use 'bdh dmft bifurcation' for sweeps)"
        )
    _check_keep(args)
    out_dir = _out(args, args.out)
    w, params = _weights_params(args)
    results, summary = [], []
    t0 = time.perf_counter()
    start = None
    if args.init == "continue":  # the paper's start: the final window of beta = 3 (the top of its sweep)
        start = initial_window(MeanField(w, params), 3.0, args.steps)
    for b in betas:
        results.append(
            run_trajectory(
                float(b),
                n_steps=args.steps,
                n_keep=args.keep,
                n_lyap=args.lyap_steps,
                max_lag=args.max_lag,
                init=args.init,
                weights=w,
                params=params,
                start=start,
            )
        )
    with OutputDir.create(out_dir) as out:
        for r in results:
            summary.append(_write_trajectory(out, r))
        if len(results) > 1:
            out.figure("portraits.png", portraits_figure(results))
        out.json(
            "summary.json",
            {
                "trajectories": summary,
                "seconds": time.perf_counter() - t0,
                "config": {
                    "steps": args.steps,
                    "keep": args.keep,
                    "lyap_steps": args.lyap_steps,
                    "init": args.init,
                    "gamma": args.gamma,
                    "epsilon": args.epsilon,
                    "seed": args.seed,
                },
            },
        )
    for s in summary:
        print(
            f"beta={s['beta']:g}: {s['regime']} ({s['n_distinct']} distinct points), lambda_1 = {s['lyapunov'][0]:+.4f}"
        )
    print(f"wrote {args.out}")
    return 0


def _write_trajectory(out, r) -> dict:
    """trajectory-beta<B>.npz and .png of one trajectory result ``r``; its entry of summary.json."""
    from bdh.dmft.plots import trajectory_figure

    tag = f"beta{r.beta:g}"
    out.npz(
        f"trajectory-{tag}.npz",
        beta=r.beta,
        t=r.traj.t,
        mo_se=r.traj.mo_se[0],
        att=r.traj.att[0],
        mq=r.traj.m["q"][0],
        mk=r.traj.m["k"][0],
        mv=r.traj.m["v"][0],
        mo=r.traj.m["o"][0],
        lyapunov=r.lyap,
        acf=r.acf,
        freq=r.freq,
        spectrum=r.spectrum,
    )
    out.figure(f"trajectory-{tag}.png", trajectory_figure(r))
    return {"beta": r.beta, "regime": r.regime, "n_distinct": r.n_distinct, "lyapunov": [float(v) for v in r.lyap]}


def cmd_convergence(args) -> int:
    import numpy as np

    from bdh.dmft.convergence import finite_size_errors
    from bdh.dmft.output import OutputDir
    from bdh.dmft.plots import convergence_figure

    try:
        ns = [int(v) for v in args.n.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"--n must be a comma list of integers, got {args.n!r}") from None
    if len(ns) < 2 or min(ns) < 3:
        raise UserError("--n needs at least two sizes >= 3")
    _check_keep(args)
    out_dir = _out(args, args.out)
    w, params = _weights_params(args)
    res = finite_size_errors(
        w, params, args.beta, ns, n_seeds=args.seeds, n_steps=args.steps, n_keep=args.keep, init=args.init
    )
    with OutputDir.create(out_dir) as out:
        out.npz("convergence.npz", n=np.array(ns), errors=res["errors"], slope=res["slope"])
        out.figure(
            "convergence.png",
            convergence_figure(
                ns, res["errors"], res["slope"], title=rf"finite N vs mean field, $\beta$={args.beta:g}"
            ),
        )
        out.json(
            "summary.json",
            {k: v for k, v in res.items() if k != "errors"} | {"mean_errors": res["errors"].mean(1).tolist()},
        )
    print(f"slope of log error vs log N: {res['slope']:.3f} (theory -0.5); wrote {args.out}")
    return 0


def cmd_probe(args) -> int:
    from bdh.dmft.experiments import parse_range
    from bdh.dmft.output import OutputDir
    from bdh.dmft.plots import probe_figure
    from bdh.dmft.probe import ProbeConfig, run_probe

    if not args.prompt:
        raise UserError("--prompt: the prompt is empty; give at least one character")
    model_dir = checked_model_dir(args.run_dir)
    temps = tuple(float(t) for t in parse_range(args.temperatures))
    cfg = ProbeConfig(
        temperatures=temps,
        n_transient=args.transient,
        n_steps=args.steps,
        n_features=args.features,
        delta=args.delta,
        prompt=args.prompt,
        seed=args.seed,
        threads=args.threads,
    )
    out_dir = _out(
        args, args.out if args.out else Path(args.run_dir) / "reports" / "dmft-probe", inputs=[args.run_dir, model_dir]
    )
    from bdh.train.recurrent import Recurrent

    model = load_model(model_dir)
    if not isinstance(model, Recurrent):
        raise UserError(
            f"{model_dir}: a {type(model).__name__} model; the probe runs BDH models (it needs the recurrent state)"
        )
    report, series = run_probe(model, cfg)
    report["model_dir"] = (
        model_dir.name if model_dir == Path(args.run_dir) else str(model_dir.relative_to(args.run_dir))
    )
    with OutputDir.create(out_dir) as out:
        out.json("probe.json", report)
        out.npz("probe.npz", **series)
        out.figure("probe.png", probe_figure(report, series))
    for r in report["per_temperature"]:
        smooth = r["lyapunov_same_tokens"]
        print(
            f"T={r['temperature']:g}: lambda_1 = {r['lyapunov']:+.5f} per token "
            f"({'n/a' if smooth is None else f'{smooth:+.5f}'} on agreeing tokens), "
            f"token flips {r['token_divergence_rate']:.3f}, "
            f"free pair first differs at {r['free_pair']['first_token_divergence']}, ACF decay lag {r['acf_decay_lag']}"
        )
    print(f"wrote {out_dir}", file=sys.stdout)
    return 0
