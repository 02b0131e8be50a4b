"""Fig. 9 and Fig. 18: per-accelerator latency as accelerator A's share of requests grows."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import command_line, here, markdown_table, sim, write_summary

SEEDS = 10
MIXES = ["33.3:33.3:33.3", "50:25:25", "75:12.5:12.5", "90:5:5", "95:2.5:2.5"]
EXEC = {"fig09": "10,5,1", "fig18": "1000,10,1"}


def main() -> None:
    out = here(__file__)
    frames = []
    for fig, exec_us in EXEC.items():
        for mix in MIXES:
            args = [
                "--clients",
                "4",
                "--mix",
                mix,
                "--sizes",
                "uniform",
                "--exec-us",
                exec_us,
                "--instances",
                "2,2,2",
                "--buffers",
                "4",
                "--policy",
                "eligible-rr",
            ]
            df, _ = sim(args, seeds=SEEDS)
            share = float(mix.split(":")[0])
            frames.append(df[df.group.isin(["A", "B", "C"])].assign(figure=fig, share_a=share))
    data = pd.concat(frames)
    data.to_csv(out / "results.csv", index=False)
    # Quartiles averaged over seeds (each seed's quartiles are over its requests).
    agg = data.groupby(["figure", "share_a", "group"], as_index=False)[
        ["lat_p25_us", "lat_p50_us", "lat_p75_us"]
    ].mean()
    agg.to_csv(out / "latency.csv", index=False)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, name in zip(axes, EXEC, strict=True):
        for g in ["A", "B", "C"]:
            a = agg[(agg.figure == name) & (agg.group == g)]
            ax.plot(a.share_a, a.lat_p50_us, marker="o", label=f"accelerator {g}")
            ax.fill_between(a.share_a, a.lat_p25_us, a.lat_p75_us, alpha=0.2)
        ax.set_yscale("log")
        ax.set_xlabel("share of requests for A (%)")
        ax.set_ylabel("service latency (µs): median, 25-75th")
        ax.set_title(f"{name}: exec A/B/C = {EXEC[name]} µs/frag")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig09_fig18.png", dpi=120)
    body = (
        "Table 3 §3.5: 4 closed-loop clients x 100 requests, uniform sizes, 4 buffers, Eligible RR, RR "
        "selector, 2 instances of each accelerator. Latency = first fragment of the accepted attempt to "
        f"the answer. {SEEDS} seeds; quartiles averaged over seeds.\n\n![Fig. 9/18](fig09_fig18.png)\n\n"
        + markdown_table(agg)
    )
    write_summary(out, "Fig. 9 / Fig. 18: latency isolation as A's share grows", command_line(__file__), body)


if __name__ == "__main__":
    main()
