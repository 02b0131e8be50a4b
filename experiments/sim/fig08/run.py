"""Fig. 8: drop rate with and without the single-fragment queue, for single- and multi-fragment requests."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import aggregate, command_line, here, markdown_table, sim, write_summary

SEEDS = 20
DISTS = ["single", "uniform", "multi", "large"]
# The large set-up: 1/4/64/128 fragments at 10/30/30/30 %, in buffers of 128 fragments.
LARGE = "1:10,4:30,64:30,128:30"


def main() -> None:
    out = here(__file__)
    frames = []
    for small in (True, False):
        for dist in DISTS:
            args = [
                "--clients",
                "8",
                "--mix",
                "33:33:33",
                "--sizes",
                LARGE if dist == "large" else dist,
                "--exec-us",
                "10,10,10",
                "--instances",
                "1,1,1",
                "--buffers",
                "4",
                "--buffer-frags",
                "128" if dist == "large" else "16",
                "--policy",
                "eligible-rr",
                "--on-refusal",
                "abort",
            ]
            if not small:
                args.append("--no-small-queue")
            df, _ = sim(args, seeds=SEEDS)
            # Requests of more than one fragment, pooled.
            multi = (
                df[df.group.isin(["size2", "size4", "size8", "size64", "size128"])]
                .groupby("seed", as_index=False)[["attempts", "drops"]]
                .sum()
            )
            multi = multi.assign(group="multi", drop_rate=multi.drops / multi.attempts)
            single = df[df.group == "size1"].assign(group="single")
            both = df[df.group == "all"]
            for part in (single, multi, both):
                frames.append(part.assign(small_queue="with" if small else "without", sizes=dist))
    data = pd.concat(frames)
    data.to_csv(out / "results.csv", index=False)
    agg = aggregate(data, ["small_queue", "sizes", "group"], "drop_rate")
    agg.to_csv(out / "drop_rate.csv", index=False)
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6), sharey=True)
    for ax, group in zip(axes, ["single", "multi", "all"], strict=True):
        for j, sq in enumerate(["without", "with"]):
            a = agg[(agg.group == group) & (agg.small_queue == sq)]
            ax.bar(
                [i + (j - 0.5) * 0.38 for i in range(len(DISTS))],
                a["mean"],
                0.38,
                yerr=a["ci95"],
                capsize=3,
                label=f"{sq} single-fragment queue",
            )
        ax.set_xticks(range(len(DISTS)), DISTS)
        ax.set_title(f"{group}-fragment requests" if group != "all" else "all requests")
    axes[0].set_ylabel("drop rate")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "fig08.png", dpi=120)
    body = (
        "Table 3 §3.3: 8 closed-loop clients x 100 requests, mix 33:33:33, accelerators 10 µs per fragment, "
        "one instance each, 4 buffers of 16 fragments, Eligible RR; the single-fragment queue holds 16 "
        "fragments; a refused client stops sending and retries 80-120 µs later (`--on-refusal abort`, "
        "as the paper's simulator). `large`: 1/4/64/128 fragments at 10/30/30/30 % in buffers of 128 "
        f"fragments. {SEEDS} seeds, 95% CI.\n\n![Fig. 8](fig08.png)\n\n" + markdown_table(agg)
    )
    write_summary(out, "Fig. 8: the single-fragment queue", command_line(__file__), body)


if __name__ == "__main__":
    main()
