"""Fig. 7 and Fig. 17: drop rate under Naive RR, Eligible RR and JSB (4-8 clients); SimPy cross-check.

`--plot-only` redraws fig07_fig17.png from drop_rate.csv.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import _plots as plots
import simpy_model
from common import aggregate, command_line, here, markdown_table, mean_ci, sim, write_summary

SEEDS = 20
POLICIES = ["naive-rr", "eligible-rr", "jsb"]
CLIENTS = [4, 5, 6, 7, 8]
EXEC = {"fig07": "10,5,1", "fig17": "1000,10,1"}


def plot(agg: pd.DataFrame) -> None:
    """fig07_fig17.png from the aggregated drop rates (drop_rate.csv)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, name in zip(axes, EXEC, strict=True):
        means: dict[str, list[float]] = {}
        for i, policy in enumerate(POLICIES):
            a = agg[(agg.figure == name) & (agg.policy == policy)].sort_values("clients")
            means[policy] = [float(v) for v in a["mean"]]
            same = plots.coinciding(means).get(policy)
            # A series exactly on top of an earlier one: large rings beneath it, so both show,
            # and the legend says so.
            extra = plots.hollow() if same else {}
            label = f"{policy} (identical to {same})" if same else policy
            ax.errorbar(
                a.clients, a["mean"], yerr=a["ci95"], capsize=3, label=label, **{**plots.style(i), **extra}
            )
        plots.note_coinciding(ax, plots.coinciding(means))
        ax.set_title(f"{name}: exec A/B/C = {EXEC[name]} µs/frag")
        ax.set_xlabel("clients")
        ax.set_ylabel("drop rate (refused / attempts)")
        plots.integer_ticks(ax, CLIENTS)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.18), fontsize=8, ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(here(__file__) / "fig07_fig17.png", dpi=120, bbox_inches="tight")


def main() -> None:
    out = here(__file__)
    if "--plot-only" in sys.argv:  # redraw the figure from drop_rate.csv, without simulating
        plot(pd.read_csv(out / "drop_rate.csv"))
        return
    frames = []
    rust_attempts, rust_wall = 0, 0.0
    for fig, exec_us in EXEC.items():
        for policy in POLICIES:
            for clients in CLIENTS:
                args = [
                    "--clients",
                    str(clients),
                    "--mix",
                    "33:33:33",
                    "--sizes",
                    "multi",
                    "--buffers",
                    "4",
                    "--policy",
                    policy,
                    "--exec-us",
                    exec_us,
                    "--instances",
                    "4,4,4",
                    "--on-refusal",
                    "abort",
                ]
                df, speed = sim(args, seeds=SEEDS)
                df = df[df.group == "all"].assign(figure=fig, policy=policy, clients=clients)
                frames.append(df)
                if fig == "fig07":
                    rust_attempts += int(speed["attempts"])
                    rust_wall += float(speed["attempts"]) / float(speed["attempts_per_s_per_core"])
    data = pd.concat(frames)
    data.to_csv(out / "results.csv", index=False)
    agg = aggregate(data, ["figure", "policy", "clients"], "drop_rate")
    agg.to_csv(out / "drop_rate.csv", index=False)

    plot(agg)

    # SimPy cross-check on Fig. 7 (exec 10/5/1): same inputs, independent model and RNG.
    cross = []
    simpy_attempts, simpy_wall = 0, 0.0
    cross_seeds = 10
    for policy in POLICIES:
        for clients in (4, 8):
            runs = [
                simpy_model.run(policy, clients, seed, [10.0, 5.0, 1.0]) for seed in range(1, cross_seeds + 1)
            ]
            simpy_attempts += sum(int(r["attempts"]) for r in runs)
            simpy_wall += sum(r["wall_s"] for r in runs)
            m, ci = mean_ci([r["drops"] / r["attempts"] for r in runs])
            a = agg[(agg.figure == "fig07") & (agg.policy == policy) & (agg.clients == clients)].iloc[0]
            overlap = abs(m - a["mean"]) <= ci + a["ci95"]
            cross.append(
                {
                    "policy": policy,
                    "clients": clients,
                    "offrac_sim": a["mean"],
                    "offrac_ci95": a["ci95"],
                    "simpy": m,
                    "simpy_ci95": ci,
                    "CIs_overlap": "yes" if overlap else "NO",
                }
            )
    cross_df = pd.DataFrame(cross)
    cross_df.to_csv(out / "simpy_crosscheck.csv", index=False)
    rust_rate = rust_attempts / rust_wall
    simpy_rate = simpy_attempts / simpy_wall
    body = (
        "Setup (Table 3, §3.4): 4-8 closed-loop clients x 100 requests, mix 33:33:33, "
        "multi-fragment-dominant "
        "sizes (10/30/30/30 % over 1/2/4/8 fragments), fragments 5-15 µs apart, a refused client stops "
        "sending and retries after 80-120 µs (`--on-refusal abort`, as the paper's simulator), "
        "4 reassembly buffers of 16 fragments, single-fragment queue on, 4 instances of each accelerator, "
        f"RR selector; {SEEDS} seeds per point, 95% CI.\n\n![drop rate](fig07_fig17.png)\n\n"
        + markdown_table(agg)
        + f"\n\n## SimPy cross-check (Fig. 7 setup, {cross_seeds} SimPy vs {SEEDS} offrac sim seeds)\n\n"
        + markdown_table(cross_df)
        + f"\n\nSpeed, simulated request attempts per wall-clock second of one core: offrac sim "
        f"{rust_rate:,.0f}/s (all Fig. 7 runs), SimPy {simpy_rate:,.0f}/s; "
        f"ratio {rust_rate / simpy_rate:,.0f}x (`experiments/sim/speed`: per core and per machine).\n"
    )
    write_summary(out, "Fig. 7 / Fig. 17: buffer admission policies", command_line(__file__), body)


if __name__ == "__main__":
    main()
