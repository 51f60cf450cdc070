"""PNG figures of simulation results: hit ratio against cache size, and hits per prefetch.

They take the form of the cache and prefetch figures of the IBM Cloud registry
workload study (Anwar et al., FAST '18), so a sweep can be set beside them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


def _ordered(values) -> list:
    return list(dict.fromkeys(values))


def hit_ratio_vs_size(df: pd.DataFrame, path: Path) -> Path:
    """Hit ratio against cache size, one line per level / other swept value.

    Left panel over all GET layer requests, right panel after the warm-up.
    """
    xs = _ordered(df["arg_capacity"])
    pos = {x: i for i, x in enumerate(xs)}
    others = [c for c in df.columns if c.startswith("arg_") and c != "arg_capacity"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, suffix, title in ((axes[0], "", "all requests"), (axes[1], "_warm", "after the first eviction")):
        if "hit_ratio_memory" in df.columns:
            mem_groups = [c for c in others if c != "arg_ssd_multiplier"]
            for key, g in _groups(df, mem_groups):
                g = g.drop_duplicates("arg_capacity")
                ax.plot(
                    [pos[x] for x in g["arg_capacity"]],
                    g[f"hit_ratio_memory{suffix}"].astype(float),
                    marker="s",
                    linestyle="--",
                    label=_name("memory", mem_groups, key),
                )
        for key, g in _groups(df, others):
            label = "memory + SSD" if "hit_ratio_memory" in df.columns else "hit ratio"
            ax.plot(
                [pos[x] for x in g["arg_capacity"]],
                g[f"hit_ratio{suffix}"].astype(float),
                marker="o",
                label=_name(label, others, key),
            )
        ax.set_xticks(range(len(xs)), [str(x) for x in xs])
        ax.set_xlabel("cache size" + (" (memory level)" if "hit_ratio_memory" in df.columns else ""))
        ax.set_title(title)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("hit ratio")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Hit ratio vs cache size ({df['policy'].iloc[0] if 'policy' in df else ''})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def hits_per_prefetch(df: pd.DataFrame, path: Path) -> Path:
    """Hits per prefetch, bars grouped by LM_thresh, one bar per ML_thresh."""
    lms = _ordered(df["arg_lm_thresh"]) if "arg_lm_thresh" in df else [df["lm_thresh_s"].iloc[0]]
    mls = _ordered(df["arg_ml_thresh"]) if "arg_ml_thresh" in df else [df["ml_thresh_s"].iloc[0]]
    width = 0.8 / len(mls)
    fig, ax = plt.subplots(figsize=(7, 4))
    for j, ml in enumerate(mls):
        heights = []
        for lm in lms:
            sel = df
            if "arg_lm_thresh" in df:
                sel = sel[sel["arg_lm_thresh"] == lm]
            if "arg_ml_thresh" in df:
                sel = sel[sel["arg_ml_thresh"] == ml]
            value = sel["hits_per_prefetch"].astype(float).iloc[0] if len(sel) else np.nan
            heights.append(0.0 if pd.isna(value) else value)
        ax.bar(np.arange(len(lms)) + (j - (len(mls) - 1) / 2) * width, heights, width, label=f"ML_thresh {ml}")
    ax.set_xticks(range(len(lms)), [f"LM_thresh {lm}" for lm in lms])
    ax.set_ylabel("hits / prefetch")
    ax.set_title("Prefetch: hits per prefetch")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def hit_ratio_timeline(df: pd.DataFrame, path: Path) -> Path:
    """Hit ratio per time bucket of one cache run, stacked by level."""
    levels = [c for c in df.columns if c.startswith("hits_")]
    times = pd.to_datetime(df["start"], format="ISO8601")  # a whole second has no fraction: no guessing
    fig, ax = plt.subplots(figsize=(9, 3.8))
    denom = df["requests"].clip(lower=1)
    ax.stackplot(times, *[df[c] / denom for c in levels], labels=[c[5:] for c in levels], alpha=0.8)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("hit ratio")
    ax.set_title("Hit ratio over the trace")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _groups(df: pd.DataFrame, keys: list[str]):
    if not keys:
        yield (), df
        return
    for key, g in df.groupby(keys, sort=False):
        yield (key if isinstance(key, tuple) else (key,)), g


def _name(base: str, keys: list[str], values: tuple) -> str:
    if not values:
        return base
    return f"{base} ({', '.join(f'{k[4:]}={v}' for k, v in zip(keys, values, strict=False))})"
