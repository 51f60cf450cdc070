"""What authentication and TLS cost: ``drtp bench`` push and pull against three local registries.

Baseline: an anonymous plain-http Distribution registry.  Compared: the same
registry behind TLS with htpasswd (basic) auth, and behind TLS with Docker
token auth (a token server issuing RS256 JWTs; tokens cached per repository).
Same machine, same images (``--images`` × 3 layers of ``--size``), same
concurrency, all in one run; ratio = baseline req/s ÷ case req/s (≥ 1: slower).

Usage: python bench/bench_realreg.py [--images 20] [--size 100KB] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drtp.master.commands.bench import Bench  # noqa: E402
from drtp.registry.local import LocalRegistry  # noqa: E402
from drtp.replay.messages import RegistryAuth  # noqa: E402
from drtp.units import parse_size  # noqa: E402
from tests.realreg_support import PASSWORD, USER, Pki, TokenServer, write_htpasswd  # noqa: E402


def measure(reg, auth, args, d: Path) -> dict[str, dict]:
    out = {}
    for mode in ("push", "pull"):
        b = Bench(reg.url, auth, mode, [parse_size(args.size)], layers=3, iterations=args.images,
                  concurrency=args.concurrency)  # fmt: skip
        s = b.run(d / mode)
        out[mode] = {"rps": s["throughput_rps"], "p50": s["latency_s"]["p50"], "p99": s["latency_s"]["p99"],
                     "failed": s["failed"], "requests": s["requests"]}  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--size", default="100KB")
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pki = Pki(d / "pki")
        ca = pki.ca.read_text()
        results = {}
        with LocalRegistry(d / "plain") as reg:
            results["anonymous http"] = measure(reg, None, args, d / "r1")
        with LocalRegistry(d / "basic", tls=(pki.cert, pki.key), htpasswd=write_htpasswd(d / "htpasswd")) as reg:
            results["basic auth + TLS"] = measure(reg, RegistryAuth(reg.url, USER, PASSWORD, ca), args, d / "r2")
        server = TokenServer(d, pki)
        with LocalRegistry(d / "token", tls=(pki.cert, pki.key), token=server.registry_config) as reg:
            results["token auth + TLS"] = measure(reg, RegistryAuth(reg.url, USER, PASSWORD, ca), args, d / "r3")
        server.stop()
    base = results["anonymous http"]
    print(f"{args.images} images × 3 layers × {args.size}, concurrency {args.concurrency}")
    print(
        f"{'case':<18} {'mode':<5} {'requests':>8} {'failed':>6} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'ratio':>6}"
    )
    for name, r in results.items():
        for mode, m in r.items():
            ratio = base[mode]["rps"] / m["rps"] if m["rps"] else float("nan")
            print(f"{name:<18} {mode:<5} {m['requests']:>8} {m['failed']:>6} {m['rps']:>8.1f} "
                  f"{m['p50'] * 1000:>7.2f} {m['p99'] * 1000:>7.2f} {ratio:>6.2f}")  # fmt: skip
    print(f"token server issued {server.issued} tokens")


if __name__ == "__main__":
    main()
