"""Replay fidelity: how closely a replay of real skopeo traffic follows the trace it was captured from.

skopeo pushes two images sharing a layer to a Distribution registry, re-tags one
and copies one into another repository of the same registry (a cross-repository
mount); ``drtp capture`` turns the registry's log into a trace, which is warmed up
and replayed (two client nodes) against a fresh registry.  Reported, as the code
does it today (a mount the replay does not send as a mount shows in the status
match): the share of trace requests replayed with the trace's status, manifest
bytes and blob bytes replayed ÷ the trace's, and the upload sessions the replay
left open in the registry (read from its storage).

Usage: python bench/bench_fidelity.py [--json]   (runs from a source checkout; needs skopeo, docker-registry)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests/skopeo_capture.py lives in the checkout, not in the package

from tests.skopeo_capture import capture_session, fidelity, replay_session  # noqa: E402


def measure(work: Path | None = None) -> dict:
    """Capture a skopeo session with a cross-repository copy, replay it, and compare (tests.skopeo_capture)."""
    with tempfile.TemporaryDirectory(prefix="drtp-fidelity-") as tmp:
        base = Path(work or tmp)
        (base / "capture").mkdir(parents=True, exist_ok=True)
        (base / "replay").mkdir(parents=True, exist_ok=True)
        captured = capture_session(base / "capture", copy=True)
        run = replay_session(captured.trace, base / "replay")
        return fidelity(captured.trace, run)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)
    res = measure()
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"trace requests                     {res['requests']}")
    print(f"status match (replayed == trace)   {res['status_match']:.3f}")
    print(f"manifest bytes replayed ÷ trace    {res['manifest_bytes_ratio']:.3f}")
    print(f"  manifest PUT bytes ÷ trace       {res['manifest_put_bytes_ratio']:.3f}")
    print(f"blob bytes replayed ÷ trace        {res['blob_bytes_ratio']:.3f}")
    print(f"upload sessions left open          {res['open_uploads']}")
    print(f"helper requests                    {res['helper_requests']}")


if __name__ == "__main__":
    main()
