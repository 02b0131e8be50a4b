"""Plot helpers shared by the experiments: every series keeps its own look, a series drawn exactly
on top of another is named as such, and the legend stays off the data."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

# Ten colours that stay apart (tab10), and markers and line styles that do not repeat together
# before 10 series either: a series is told apart by any one of the three.
COLORS = [
    f"tab:{c}" for c in ("blue", "orange", "green", "red", "purple", "brown", "pink", "gray", "olive", "cyan")
]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]
LINESTYLES = ["-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1))]


def style(i: int) -> dict[str, Any]:
    """Colour, marker and line style of series ``i``."""
    return {
        "color": COLORS[i % len(COLORS)],
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[i % len(LINESTYLES)],
    }


def hollow() -> dict[str, Any]:
    """A large unfilled ring drawn beneath the other series: for a series identical to an earlier
    one, whose filled marker then shows inside the ring."""
    return {"marker": "o", "markerfacecolor": "none", "markersize": 12, "markeredgewidth": 1.8, "zorder": 1.5}


def _same(a: Sequence[float], b: Sequence[float], rel: float) -> bool:
    if len(a) != len(b) or not a:
        return False
    return all(
        (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=rel, abs_tol=1e-12)
        for x, y in zip(a, b, strict=True)
    )


def coinciding(series: Mapping[str, Sequence[float]], rel: float = 1e-9) -> dict[str, str]:
    """Series whose every value equals an earlier series' (same x assumed): label -> that one."""
    out: dict[str, str] = {}
    labels = list(series)
    for j, b in enumerate(labels):
        for a in labels[:j]:
            if a not in out and _same(series[a], series[b], rel):
                out[b] = a
                break
    return out


def note_coinciding(ax: Axes, same: Mapping[str, str]) -> None:
    """Say in the panel which series lie exactly on top of which."""
    if not same:
        return
    text = "\n".join(f"{b} coincides with {a} at every point" for b, a in same.items())
    ax.text(
        0.02,
        0.98,
        text,
        transform=ax.transAxes,
        va="top",
        fontsize=8,
        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "0.7"},
    )


def integer_ticks(ax: Axes, values: Sequence[int]) -> None:
    """Ticks at exactly these (integer) x values and nowhere else."""
    ax.set_xticks(list(values))
    ax.set_xticklabels([str(int(v)) for v in values])
    ax.xaxis.set_minor_locator(NullLocator())


def legend_outside(fig: Figure, ax: Axes, *, ncol: int = 1, where: str = "right") -> None:
    """One legend for the figure, outside every panel (right of them, or below)."""
    handles, labels = ax.get_legend_handles_labels()
    if where == "right":
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, ncol=ncol)
    else:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=9, ncol=ncol)
