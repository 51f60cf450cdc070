"""Regenerate the sample traces in this folder (see README.md here).

python traces/make_samples.py            # profile samples + the skopeo capture
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from drtp.registry.local import LocalRegistry  # noqa: E402
from drtp.trace.anonymize import Anonymizer  # noqa: E402
from drtp.trace.capture import capture_files  # noqa: E402
from drtp.trace.generate import generate  # noqa: E402
from drtp.trace.profiles import builtin_profiles, load_profile, options_for  # noqa: E402
from drtp.trace.reader import write_ibm  # noqa: E402
from tests.images import build_image, random_files  # noqa: E402


def profile_samples(n: int = 2000) -> None:
    for name in builtin_profiles():
        out = HERE / f"profile-{name}-2k.json"
        write_ibm(out, generate(options_for(load_profile(name), n, seed=1, max_layer_size=4 << 20)))
        print(f"{out.name}: {n} requests, profile {name}")


def skopeo_capture() -> None:
    """Real traffic: two images sharing a layer pushed, one re-tagged, pulled twice; captured."""
    if not shutil.which("skopeo"):
        print("skopeo not installed: skipping the capture sample")
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        shared = random_files(2, 20_000, seed=1)
        build_image(base / "img1", [shared, random_files(1, 30_000, seed=2)])
        build_image(base / "img2", [shared, random_files(3, 10_000, seed=3)])
        with LocalRegistry(base / "registry") as reg:
            dest = f"docker://{reg.host}/acme/webapp"
            tls = ["--src-tls-verify=false", "--dest-tls-verify=false"]
            for args in (
                [f"dir:{base / 'img1'}", f"{dest}:v1"],
                [f"dir:{base / 'img2'}", f"{dest}:v2"],
                [f"{dest}:v1", f"{dest}:stable"],
                [f"{dest}:v2", f"dir:{base / 'pull1'}"],
                [f"{dest}:v2", f"dir:{base / 'pull2'}"],
            ):
                subprocess.run(["skopeo", "copy", *tls, *args], check=True, capture_output=True)
            cap, records = capture_files([reg.log_path], Anonymizer("drtp-sample"), registry_url=reg.url)
            n = write_ibm(HERE / "skopeo-capture.json", records)
    print(f"skopeo-capture.json: {n} requests captured from real skopeo traffic")


if __name__ == "__main__":
    profile_samples()
    skopeo_capture()
