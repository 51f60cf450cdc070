"""``drtp bench push|pull|manifest``: synthetic push and pull benchmarks of a registry, results in the replay format.

An *image* is N layers of the given size(s) (random content, new for every
image) plus a config blob and a schema-2 manifest referencing them.

* ``push``: per image, per layer: ``HEAD`` the blob (404 expected), ``POST``
  an upload, then one ``PUT`` with the whole layer (monolithic) or ``PATCH``
  chunks of ``--chunk`` bytes and a closing ``PUT``; then the config blob the
  same way (one config shared by all images, pushed once before them: its
  ``HEAD`` finds it) and ``PUT`` of the manifest.
* ``pull``: all the images are pushed first (not measured); then per image
  ``GET`` of the manifest and ``GET`` of every layer (bytes counted).
* ``manifest``: all layers pushed first (not measured); then per image ``PUT`` of the
  manifest, ``GET`` and ``HEAD`` of it by tag.

``--iterations`` images are done by ``--concurrency`` worker threads, through
the client nodes' session (drtp.registry.spec_session: keep-alive, auth, TLS), and
written with the replay's writers (master.outputs.results): ``requests.csv`` and
``summary.json`` in the run directory, the same columns and summary as a
replay run.  ``--append DATASET.csv`` also appends the rows, with the run's
name in a first ``run`` column, to one dataset for periodic monitoring.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode, urljoin

from drtp.master.outputs.results import COLUMNS, RunResults, format_table
from drtp.registry.content import STREAM_ABOVE, chunks, new_seed
from drtp.registry.content import digest as stream_digest
from drtp.registry.manifest import ACCEPT, CONFIG_BLOB, CONFIG_DIGEST, SCHEMA2, build_manifest, digest_of
from drtp.registry.repo_names import RepositoryMap
from drtp.registry.spec_session import spec_session
from drtp.registry.transport import Response
from drtp.replay.messages import RegistryAuth, ReplayRequest, ReplayResult, RunSpec, registry_base
from drtp.replay.outcome import HTTP, OK
from drtp.replay.run_clock import monotonic_clock


class Layer:
    """One random layer: in memory when small, else a seeded chunk stream (hash pass + send pass)."""

    def __init__(self, size: int) -> None:
        self.size = size
        if size <= STREAM_ABOVE:
            self.data: bytes | None = os.urandom(size)
            self.digest = digest_of(self.data)
            self.seed = 0
        else:
            self.data = None
            self.seed = new_seed()
            self.digest = stream_digest(self.seed, size, True)

    @classmethod
    def of(cls, data: bytes, digest: str) -> Layer:
        """A blob of known bytes (the config blob)."""
        layer = cls(0)
        layer.data, layer.size, layer.digest = data, len(data), digest
        return layer

    def pieces(self, chunk: int) -> Iterator[bytes]:
        """The content in pieces of ``chunk`` bytes (the last may be shorter)."""
        if self.data is not None:
            for i in range(0, self.size, chunk):
                yield self.data[i : i + chunk]
            return
        buf = bytearray()
        for part in chunks(self.seed, self.size, True):
            buf += part
            while len(buf) >= chunk:
                yield bytes(buf[:chunk])
                del buf[:chunk]
        if buf:
            yield bytes(buf)

    def body(self):
        return self.data if self.data is not None else (lambda: chunks(self.seed, self.size, True))


class Bench:
    def __init__(
        self,
        registry: str,
        auth: RegistryAuth | None,
        mode: str,
        sizes: list[int],
        layers: int = 3,
        iterations: int = 1,
        concurrency: int = 1,
        chunk: int = 0,
        repository: str = "drtp-bench",
        timeout: float = 60.0,
        names: RepositoryMap | None = None,
    ) -> None:
        self.base = registry_base(registry)
        self.registry = registry
        self.mode = mode
        self.sizes = sizes
        self.layers = layers
        self.iterations = iterations
        self.concurrency = max(1, concurrency)
        self.chunk = chunk
        self.repository = repository
        # one repository per mode (tags differ), as pushes of one project do: <repository>/<mode> as a trace
        # name, mapped as the registry entry's repository_map says (a replay's names and bench's agree)
        self.repo = (names or RepositoryMap()).map(f"{repository}/{mode}")
        spec = RunSpec(
            "bench", time.time(), self.concurrency, timeout, auth=[auth] if auth else [], registries=[self.base]
        )
        self.clock = monotonic_clock(spec.start_epoch)
        self.session = spec_session(spec)
        self.lock = threading.Lock()
        self.results: RunResults | None = None
        self.seq = 0

    # -- measuring ---------------------------------------------------------------------------

    def _measure(self, image: int, step: str, method: str, kind: str, ref: str, size: int, expect: int, url: str, **kw):
        start = self.clock()
        r = self.session.request(method, url, **kw)
        latency = self.clock() - start
        if method in ("PUT", "PATCH", "POST") and r.status and r.status < 400:
            r.bytes = size
        self._record(image, step, method, kind, ref, size, expect, r, start, latency)
        return r

    def _record(self, image, step, method, kind, ref, size, expect, r: Response, start, latency) -> None:
        if r.outcome:
            ok = False  # no complete answer
        elif method == "HEAD" and kind == "blob":
            ok = r.status in (200, 404)  # the existence check: either answer is a success
        else:
            ok = not r.error and (r.status == expect or (expect < 400 and 0 < r.status < 400))
        digest = ref if ref.startswith("sha256:") else None
        with self.lock:
            seq = self.seq
            self.seq += 1
            req = ReplayRequest(
                seq, f"{image}-{step}", f"image-{image}", method, kind, "get", self.registry,
                self._repo(image), ref, size, expect, digest=digest,
            )  # fmt: skip
            outcome = r.outcome or (OK if ok else HTTP)
            ok = outcome == OK
            error = r.error or ("" if ok else f"HTTP {r.status}")
            res = ReplayResult(
                seq,
                r.status,
                ok,
                start,
                latency,
                r.bytes,
                digest,
                error=error,
                outcome=outcome,
                attempts=r.attempts,
                retry_after=r.retry_after(),
            )
            self.results.add("bench", req, res)

    def _repo(self, image: int) -> str:
        """Every image goes to one repository per mode (tags differ), as pushes of one project do."""
        return self.repo

    # -- steps ------------------------------------------------------------------------------------

    def _push_blob(self, image: int, i: int, layer: Layer, measure: bool) -> bool:
        repo, base, d = self._repo(image), self.base, layer.digest
        blob_url = f"{base}/v2/{repo}/blobs/{d}"

        def call(step, method, ref, size, expect, url, **kw):
            if measure:
                return self._measure(image, step, method, "blob", ref, size, expect, url, **kw)
            return self.session.request(method, url, **kw)

        r = call(f"{i}-head", "HEAD", d, layer.size, 404, blob_url)
        if r.status == 200:
            return True  # already there: nothing to push (as docker push does)
        r = call(f"{i}-post", "POST", "uploads/", 0, 202, f"{base}/v2/{repo}/blobs/uploads/")
        if r.status != 202 or not r.header("location"):
            return False
        location = urljoin(base + "/", r.header("location"))
        body, size = layer.body(), layer.size
        if self.chunk:
            offset = 0
            for n, piece in enumerate(layer.pieces(self.chunk)):
                headers = {
                    "Content-Type": "application/octet-stream",
                    "Content-Length": str(len(piece)),
                    "Content-Range": f"{offset}-{offset + len(piece) - 1}",
                }
                r = call(f"{i}-patch{n}", "PATCH", "uploads/", len(piece), 202, location, body=piece, headers=headers)
                if r.status != 202:
                    return False
                offset += len(piece)
                location = urljoin(base + "/", r.header("location") or location)
            body, size = b"", 0
        sep = "&" if "?" in location else "?"
        url = location + sep + urlencode({"digest": d})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        r = call(f"{i}-put", "PUT", d, layer.size if not self.chunk else 0, 201, url, body=body, headers=headers)
        return r.status == 201

    def _image(self, image: int, measure_push: bool) -> tuple[list[Layer], bytes] | None:
        layers = [Layer(self.sizes[i % len(self.sizes)]) for i in range(self.layers)]
        for i, layer in enumerate(layers):
            if not self._push_blob(image, i, layer, measure_push):
                return None
        config = Layer.of(CONFIG_BLOB, CONFIG_DIGEST)
        if not self._push_blob(image, "config", config, measure_push):
            return None
        manifest = build_manifest([(x.digest, x.size) for x in layers])
        return layers, manifest

    def _put_manifest(self, image: int, manifest: bytes, measure: bool) -> bool:
        url = f"{self.base}/v2/{self._repo(image)}/manifests/{self._tag(image)}"
        kw = {"body": manifest, "headers": {"Content-Type": SCHEMA2}}
        if measure:
            r = self._measure(image, "manifest-put", "PUT", "manifest", self._tag(image), len(manifest), 201, url, **kw)
        else:
            r = self.session.request("PUT", url, **kw)
        return r.status == 201

    def _tag(self, image: int) -> str:
        return f"{self.stamp}-{image}"

    def prepare(self, image: int):
        """Push mode: nothing (it is all measured); pull and manifest: push the image first, unmeasured."""
        if self.mode == "push":
            return None
        made = self._image(image, False)
        if made is None or self.mode == "manifest":
            return made
        return made if self._put_manifest(image, made[1], False) else None

    def job(self, image: int, prepared=None) -> None:
        if self.mode == "push":
            made = self._image(image, True)
            if made is not None:
                self._put_manifest(image, made[1], True)
            return
        if prepared is None:
            return
        layers, manifest = prepared
        tag = self._tag(image)
        url = f"{self.base}/v2/{self._repo(image)}/manifests/{tag}"
        accept = {"Accept": ACCEPT}
        if self.mode == "manifest":
            if self._put_manifest(image, manifest, True):
                for method in ("GET", "HEAD"):
                    step = f"manifest-{method.lower()}"
                    self._measure(image, step, method, "manifest", tag, len(manifest), 200, url, headers=accept)
            return
        self._measure(image, "manifest-get", "GET", "manifest", tag, len(manifest), 200, url, headers=accept)
        for i, layer in enumerate(layers):
            blob = f"{self.base}/v2/{self._repo(image)}/blobs/{layer.digest}"
            self._measure(image, f"{i}-get", "GET", "blob", layer.digest, layer.size, 200, blob)

    def run(self, out_dir: Path) -> dict:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.stamp = _dt.datetime.now().strftime("%Y%m%d%H%M%S")
        self.results = RunResults(out_dir, timed=False, on_time_s=0.01)
        # the config blob every image's manifest names, pushed once first: images pushing one blob at the same
        # time race in the registry (a manifest can be refused while another image's upload of it commits)
        self._push_blob(0, "config", Layer.of(CONFIG_BLOB, CONFIG_DIGEST), False)
        with ThreadPoolExecutor(self.concurrency) as pool:
            images = range(self.iterations)
            prepared = list(pool.map(self.prepare, images))  # setup first: the measured phase is alone
            t0 = time.perf_counter()
            list(pool.map(self.job, images, prepared))
        wall = time.perf_counter() - t0
        params = {
            "mode": f"bench-{self.mode}",
            "registries": [self.registry],
            "layers": self.layers,
            "sizes": self.sizes,
            "iterations": self.iterations,
            "concurrency": self.concurrency,
            "chunk": self.chunk,
            "wall_s": wall,
        }
        (out_dir / "config.json").write_text(json.dumps(params, indent=2))
        return self.results.close(**params)


def append_dataset(dataset: Path, run_name: str, requests_csv: Path) -> int:
    """Append a run's rows to one dataset CSV (``run`` column first); returns rows appended."""
    new = not dataset.exists() or dataset.stat().st_size == 0
    dataset.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(requests_csv, newline="") as src, open(dataset, "a", newline="") as dst:
        rows = csv.reader(src)
        next(rows, None)
        w = csv.writer(dst)
        if new:
            w.writerow(("run", *COLUMNS))
        for row in rows:
            w.writerow((run_name, *row))
            n += 1
    return n


def print_summary(summary: dict) -> None:
    print(format_table(summary))
