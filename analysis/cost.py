"""``drtp cost``: storage and egress cost of a workload for registry pricing tables (list prices per provider and tier).

Pricing is data: one YAML file per provider in ``configs/pricing/`` (editable;
see its README).  A workload's volume comes from a trace (egress = bytes of
successful GETs; storage = bytes of the distinct objects it reads or writes),
from replay run directories (``requests.csv``), or is given directly.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec

from drtp.cli_options import positive_float
from drtp.errors import ConfigError, DrtpError
from drtp.outputs import prepare_output_dir
from drtp.schema import convert

PRICING_DIR = Path(__file__).resolve().parent.parent / "configs" / "pricing"
GB = 1e9  # providers bill decimal gigabytes
Tiers = list[tuple[float | None, float]]
# A price or an amount of GB: a number ≥ 0, finite (no table comes near a billion terabytes); not a bool.
Amount = Annotated[float, msgspec.Meta(ge=0, le=1e15)]


class PlanSpec(msgspec.Struct, forbid_unknown_fields=True):
    """One plan of a pricing file, as written (``storage_gb_month`` and ``egress_gb``: a price or tiers)."""

    monthly_fee: Amount = 0.0
    included_storage_gb: Amount = 0.0
    storage_gb_month: Any = 0  # checked by _tiers, which says what tiers look like
    operations_per_gb: Amount = 0.0
    price_per_10k_operations: Amount = 0.0
    egress_gb: Any = 0
    included_egress_gb: Amount = 0.0
    limits: Any = ""  # free text about the plan's limits


class PricingFile(msgspec.Struct, forbid_unknown_fields=True):
    """A pricing file; each plan is validated on its own, so an error names the plan (``plans.<name>.<key>``)."""

    provider: Any = msgspec.UNSET  # default: the file's name
    source: Any = None  # where the prices were read
    plans: dict[Any, Any] | None = None


@dataclass
class Plan:
    provider: str
    name: str
    monthly_fee: float = 0.0
    included_storage_gb: float = 0.0
    storage: Tiers = field(default_factory=list)
    operations_per_gb: float = 0.0
    price_per_10k_operations: float = 0.0
    egress: Tiers = field(default_factory=list)
    included_egress_gb: float = 0.0
    limits: str = ""


def tiered(amount: float, tiers: Tiers) -> float:
    """Cost of ``amount`` GB when each GB costs the price of the tier it falls in."""
    cost, lower = 0.0, 0.0
    for upper, price in tiers:
        if amount <= lower:
            break
        top = amount if upper is None else min(amount, upper)
        cost += (top - lower) * price
        if upper is None:
            break
        lower = upper
    return cost


def _number(value: Any) -> bool:
    """A price or an amount of GB: a finite number ≥ 0 (a bool is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf


def _tiers(value: Any, where: str) -> Tiers:
    if _number(value):
        return [(None, float(value))]
    ok = (
        isinstance(value, list)
        and value
        and all(
            isinstance(t, list) and len(t) == 2 and (t[0] is None or _number(t[0])) and _number(t[1]) for t in value
        )
        and all(t[0] is not None for t in value[:-1])
    )
    if not ok or value[-1][0] is not None:
        raise ConfigError(f"{where}: expected a price or tiers [[up_to_gb, price], …, [null, price]] (numbers ≥ 0)")
    uppers = [t[0] for t in value[:-1]]
    if uppers != sorted(uppers):
        raise ConfigError(f"{where}: tier bounds must increase, got {uppers}")
    return [(None if u is None else float(u), float(p)) for u, p in value]


def load_pricing(paths: list[Path] | None = None) -> list[Plan]:
    """Plans from pricing YAML files (default: every file in configs/pricing/)."""
    from drtp.yamlfile import read_yaml_mapping  # YAML only when pricing is read: every drtp start imports this module

    files: list[Path] = []
    for p in paths or [PRICING_DIR]:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(p.glob("*.yaml")))
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"{p}: pricing file not found")
    plans = []
    for f in files:
        pricing = convert(read_yaml_mapping(f), PricingFile, str(f))
        provider = f.stem if pricing.provider is msgspec.UNSET else str(pricing.provider)
        for name, raw in (pricing.plans or {}).items():
            spec = convert(raw or {}, PlanSpec, str(f), prefix=f"plans.{name}.")
            where = f"{f}: key 'plans.{name}"
            plans.append(
                Plan(
                    provider=provider,
                    name=str(name),
                    monthly_fee=spec.monthly_fee,
                    included_storage_gb=spec.included_storage_gb,
                    storage=_tiers(spec.storage_gb_month, f"{where}.storage_gb_month'"),
                    operations_per_gb=spec.operations_per_gb,
                    price_per_10k_operations=spec.price_per_10k_operations,
                    egress=_tiers(spec.egress_gb, f"{where}.egress_gb'"),
                    included_egress_gb=spec.included_egress_gb,
                    limits=str(spec.limits),
                )
            )
    if not plans:
        raise ConfigError(f"no pricing plans found in {', '.join(map(str, paths or [PRICING_DIR]))}")
    return plans


def plan_cost(plan: Plan, storage_gb: float, egress_gb: float, months: float = 1.0) -> dict[str, float]:
    """Cost in USD of keeping ``storage_gb`` for ``months`` and serving ``egress_gb`` in that time."""
    storage = tiered(max(0.0, storage_gb - plan.included_storage_gb), plan.storage) * months
    operations = storage_gb * plan.operations_per_gb / 10_000 * plan.price_per_10k_operations * months
    egress = tiered(max(0.0, egress_gb - plan.included_egress_gb * months), plan.egress)
    fee = plan.monthly_fee * months
    return {
        "fee": fee,
        "storage": storage,
        "operations": operations,
        "egress": egress,
        "total": fee + storage + operations + egress,
    }


def trace_volume(paths: list[Path], **reader_options: Any) -> dict[str, float]:
    """Egress (successful GET bytes) and storage (distinct objects' bytes) of a trace, in GB."""
    from drtp.trace.reader import TraceReader
    from drtp.trace.records import parse_uri

    egress = 0
    objects: dict[tuple[str, str], int] = {}
    for batch in TraceReader(paths, **reader_options).batches():
        for r in batch:
            if r.status >= 400:
                continue
            parts = parse_uri(r.uri)
            if parts.reference.startswith("uploads/"):
                continue
            if r.method == "GET":
                egress += r.size
            if r.method in ("GET", "PUT") and r.size:
                key = ("", parts.reference) if parts.kind == "blob" else (parts.repository, parts.reference)
                objects[key] = max(objects.get(key, 0), r.size)
    return {"egress_gb": egress / GB, "storage_gb": sum(objects.values()) / GB}


def run_volume(run_dirs: list[Path]) -> dict[str, float]:
    """The same from replay runs' ``requests.csv`` (successful GETs; distinct digests or references)."""
    from drtp.analysis.results import load_requests  # the one checked reader of requests.csv

    egress = storage = 0.0
    for d in run_dirs:
        csv = d / "requests.csv"
        if not csv.is_file():
            raise DrtpError(f"{d}: not a run directory (no requests.csv)")
        df = load_requests(csv)
        ok = df[df["ok"].astype(bool)]
        if "auxiliary" in ok.columns:
            ok = ok[~ok["auxiliary"].astype(bool)]
        egress += ok.loc[ok["method"] == "GET", "size"].sum()
        key = "digest" if "digest" in ok.columns else "reference"
        stored = ok[ok["method"].isin(["GET", "PUT"]) & (ok["size"] > 0)]
        storage += stored.groupby(stored[key].fillna(""))["size"].max().sum()
    return {"egress_gb": egress / GB, "storage_gb": storage / GB}


def cost_rows(plans: list[Plan], storage_gb: float, egress_gb: float, months: float) -> list[dict[str, Any]]:
    rows = []
    for p in plans:
        c = plan_cost(p, storage_gb, egress_gb, months)
        rows.append(
            {"provider": p.provider, "plan": p.name, **{k: round(v, 2) for k, v in c.items()}, "limits": p.limits}
        )
    return sorted(rows, key=lambda r: r["total"])


def plot_costs(plans: list[Plan], path: Path, max_tb: float = 200.0, mark_gb: float | None = None) -> None:
    """Storage, egress and total cost against data volume (storage = egress)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    volumes_tb = np.linspace(0, max_tb, 201)
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), sharex=True)
    parts = (("storage", "storage (one month)"), ("egress", "egress"), ("total", "total: storage = egress"))
    for ax, (key, title) in zip(axes, parts, strict=True):
        ax.set_prop_cycle(color=plt.cm.tab20.colors)
        for p in plans:
            costs = []
            for v in volumes_tb:
                c = plan_cost(p, v * 1000, v * 1000)
                costs.append(c["storage"] + c["operations"] + c["fee"] if key == "storage" else c[key])
            ax.plot(volumes_tb, np.array(costs) / 1000, label=p.name)
        if mark_gb:
            ax.axvline(mark_gb / 1000, color="grey", ls=":", lw=1)
        ax.set_title(title)
        ax.set_xlabel("data volume (TB)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cost per month (thousand USD)")
    axes[-1].legend(fontsize=7, ncol=2)
    fig.suptitle("Registry cost against data volume (list prices; edit configs/pricing/*.yaml)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the command ------------------------------------------------------------------


def cmd_cost(args: argparse.Namespace) -> int:
    from drtp.units import parse_size

    if args.out:
        prepare_output_dir(Path(args.out), "--out")
    plans = load_pricing([Path(p) for p in args.pricing] if args.pricing else None)
    if args.plans:
        wanted = set(args.plans.split(","))
        unknown = wanted - {p.name for p in plans}
        if unknown:
            raise DrtpError(f"--plans: unknown plan '{sorted(unknown)[0]}' (see drtp cost --list)")
        plans = [p for p in plans if p.name in wanted]
    if args.list:
        for p in plans:
            print(f"{p.name:<22} {p.provider:<26} {p.limits}")
        return 0
    inputs = [Path(x) for x in args.inputs]
    if inputs and all(p.is_dir() for p in inputs):
        volume, source = run_volume(inputs), "replay runs"
    elif inputs:
        volume, source = trace_volume(inputs), "trace"
    else:
        volume = {}
        for option, key, text in (("--storage", "storage_gb", args.storage), ("--egress", "egress_gb", args.egress)):
            try:
                volume[key] = parse_size(text or "0") / 1e9
            except ValueError as e:
                raise DrtpError(f"{option}: {e}") from None
        source = "given"
    rows = cost_rows(plans, volume["storage_gb"], volume["egress_gb"], args.months)
    print(
        f"volume ({source}): storage {volume['storage_gb']:,.3f} GB, egress {volume['egress_gb']:,.3f} GB, "
        f"{args.months:g} month(s); USD, list prices from the pricing tables"
    )
    print(f"{'plan':<22} {'fee':>10} {'storage':>10} {'ops':>8} {'egress':>10} {'total':>11}")
    for r in rows:
        print(
            f"{r['plan']:<22} {r['fee']:>10,.2f} {r['storage']:>10,.2f} {r['operations']:>8,.2f} "
            f"{r['egress']:>10,.2f} {r['total']:>11,.2f}"
        )
    if args.out:
        out = Path(args.out)
        import pandas as pd

        pd.DataFrame(rows).to_csv(out / "cost.csv", index=False)
        (out / "cost.json").write_text(json.dumps({"volume": volume, "months": args.months, "plans": rows}, indent=2))
        plot_costs(plans, out / "cost_vs_volume.png", mark_gb=max(volume.values()) or None)
        print(f"results: {out}/cost.csv, cost.json, cost_vs_volume.png")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cost",
        help="storage and egress cost of a trace or run for registry pricing tables",
        description="Cost of a workload (trace files, replay run directories, or --storage/--egress) for the "
        "pricing tables in configs/pricing/ (list prices; editable YAML).",
    )
    p.add_argument("inputs", nargs="*", help="trace files or run directories (optional)")
    p.add_argument("--storage", help="storage volume when no inputs are given, e.g. 2TB")
    p.add_argument("--egress", help="egress volume per month when no inputs are given, e.g. 10TB")
    p.add_argument("--months", type=positive_float, default=1.0, help="months the storage is kept (default 1)")
    p.add_argument("--pricing", nargs="+", help="pricing YAML files or folders (default configs/pricing/)")
    p.add_argument("--plans", help="comma-separated plan names to include")
    p.add_argument("--list", action="store_true", help="list the plans and exit")
    p.add_argument("--out", help="write cost.csv, cost.json and cost_vs_volume.png here")
    p.set_defaults(func=cmd_cost)
