"""Fig. 10 and Fig. 19: queueing latency in the accelerator queues, RR vs JSQ, three instances of A."""

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
DISTS = ["single", "uniform", "multi"]
EXEC = {"fig10": "10,5,1", "fig19": "1000,10,1"}
COLS = ["queue_min_us", "queue_p25_us", "queue_p50_us", "queue_p75_us", "queue_max_us"]


def main() -> None:
    out = here(__file__)
    frames = []
    for fig, exec_us in EXEC.items():
        for selector in ("rr", "jsq"):
            for dist in DISTS:
                args = [
                    "--clients",
                    "8",
                    "--mix",
                    "95:2.5:2.5",
                    "--sizes",
                    dist,
                    "--exec-us",
                    exec_us,
                    "--instances",
                    "3,1,1",
                    "--buffers",
                    "8",
                    "--policy",
                    "eligible-rr",
                    "--selector",
                    selector,
                ]
                df, _ = sim(args, seeds=SEEDS)
                frames.append(
                    df[df.group.isin(["A", "B", "C"])].assign(figure=fig, selector=selector, sizes=dist)
                )
    data = pd.concat(frames)
    data.to_csv(out / "results.csv", index=False)
    agg = data.groupby(["figure", "sizes", "group", "selector"], as_index=False)[COLS].mean()
    agg.to_csv(out / "queue_latency.csv", index=False)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for row, name in enumerate(EXEC):
        for col, dist in enumerate(DISTS):
            ax = axes[row][col]
            a = agg[(agg.figure == name) & (agg.sizes == dist)]
            stats = []
            labels = []
            for _, r in a.iterrows():
                stats.append(
                    {
                        "label": f"{r.group}\n{r.selector}",
                        "whislo": r.queue_min_us,
                        "q1": r.queue_p25_us,
                        "med": r.queue_p50_us,
                        "q3": r.queue_p75_us,
                        "whishi": r.queue_max_us,
                    }
                )
                labels.append(r.group)
            ax.bxp(stats, showfliers=False)
            ax.set_title(f"{name}, {dist}")
            ax.set_ylabel("queueing latency (µs)")
    fig.tight_layout()
    fig.savefig(out / "fig10_fig19.png", dpi=120)
    body = (
        "Table 3 §3.6: 8 closed-loop clients x 100 requests, mix 95:2.5:2.5, 8 buffers, Eligible RR, "
        "3 instances of A and 1 of B and C; queueing latency = complete in a slot queue until execution. "
        f"Boxes: min / quartiles / max per seed, averaged over {SEEDS} seeds.\n\n"
        "![Fig. 10/19](fig10_fig19.png)\n\n" + markdown_table(agg)
    )
    write_summary(out, "Fig. 10 / Fig. 19: RR vs JSQ", command_line(__file__), body)


if __name__ == "__main__":
    main()
