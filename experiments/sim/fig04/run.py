"""Fig. 4a/4b: accelerator utilization (one client) and throughput (two clients), immediate vs reassembled."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import aggregate, command_line, here, markdown_table, sim, write_summary

SEEDS = 10
FRAGS = [1, 2, 4, 8]
NODES = ["immediate", "reassembled"]


def main() -> None:
    out = here(__file__)
    frames = []
    for clients in (1, 2):
        for node in NODES:
            for k in FRAGS:
                args = [
                    "--clients",
                    str(clients),
                    "--mix",
                    "1",
                    "--sizes",
                    str(k),
                    "--gap",
                    "uniform:30:40",
                    "--exec-us",
                    "20",
                    "--instances",
                    "1",
                    "--node",
                    node,
                ]
                df, _ = sim(args, seeds=SEEDS)
                frames.append(df[df.group == "A"].assign(clients=clients, node=node, frags=k))
    data = pd.concat(frames)
    data.to_csv(out / "results.csv", index=False)
    util = aggregate(data[data.clients == 1], ["node", "frags"], "util_held")
    tput = aggregate(data[data.clients == 2], ["node", "frags"], "throughput_rps")
    util.to_csv(out / "fig04a_utilization.csv", index=False)
    tput.to_csv(out / "fig04b_throughput.csv", index=False)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, agg, label in (
        (axes[0], util, "utilization (executing / held)"),
        (axes[1], tput, "requests / s"),
    ):
        width = 0.38
        for j, node in enumerate(NODES):
            a = agg[agg.node == node]
            xs = [i + (j - 0.5) * width for i in range(len(FRAGS))]
            ax.bar(xs, a["mean"], width, yerr=a["ci95"], capsize=3, label=node)
        ax.set_xticks(range(len(FRAGS)), [str(k) for k in FRAGS])
        ax.set_xlabel("fragments per request")
        ax.set_ylabel(label)
        ax.legend()
    axes[0].set_title("Fig. 4a: one client")
    axes[1].set_title("Fig. 4b: two clients")
    fig.tight_layout()
    fig.savefig(out / "fig04.png", dpi=120)
    body = (
        "One accelerator, 20 µs per fragment, fragments 30-40 µs apart, closed loop x 100 requests, "
        "4 buffers; "
        "refused requests (immediate mode: accelerator held by the other client) retry after 80-120 µs. "
        f"{SEEDS} seeds, 95% CI. Utilization = time executing / time the accelerator was held by a request "
        "(the immediate accelerator is held from the first fragment to the end of the last).\n\n"
        "![Fig. 4](fig04.png)\n\n## Fig. 4a utilization (1 client)\n\n"
        + markdown_table(util)
        + "\n\n## Fig. 4b throughput (2 clients)\n\n"
        + markdown_table(tput)
    )
    write_summary(out, "Fig. 4: immediate vs reassembled ingestion", command_line(__file__), body)


if __name__ == "__main__":
    main()
