"""The calibration study's figure: each method's size (left) or coverage (right) against n, with its bound."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from headstab.statistics.calibration import ALPHA  # noqa: E402


def plot_summary(summary: pd.DataFrame, path: Path) -> None:
    """Rate against n per method and scenario; the nominal level dashed; failures marked with a cross."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharex=True)
    for ax, kind, nominal in ((axes[0], "size", ALPHA), (axes[1], "coverage", 0.95)):
        rows = summary[summary["kind"] == kind]
        for (method, scenario), group in rows.groupby(["method", "scenario"], sort=True):
            group = group.sort_values("n")
            (line,) = ax.plot(group["n"], group["rate"], marker="o", label=f"{method} ({scenario})")
            failed = group[~group["passed"]]
            ax.scatter(failed["n"], failed["rate"], marker="x", s=80, color=line.get_color())
        ax.axhline(nominal, color="black", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("n (units the method is reported at)")
        ax.set_ylabel("rejection rate at alpha = 0.05" if kind == "size" else "coverage of the 95% interval")
        ax.set_title(kind)
    handles, labels = axes[0].get_legend_handles_labels()
    more = axes[1].get_legend_handles_labels()
    fig.legend(handles + more[0], labels + more[1], loc="lower center", ncol=2, fontsize=6)
    fig.tight_layout(rect=(0, 0.25, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
