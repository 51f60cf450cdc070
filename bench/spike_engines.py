"""Which HTTP engine should a client node use for registry GETs? CPU per request, side by side with wrk.

Candidates, each in a process of its own issuing ``--requests`` GETs with ``--concurrency`` in flight
over keep-alive connections to the same real Distribution registry:

* ``loop`` — drtp's own engine: uvloop + httptools (drtp.registry.transport.AsyncConnection), with TLS
  through the event loop; the body is counted, not copied;
* ``curl`` — pycurl's CurlMulti (libcurl: TLS, keep-alive), the body handed to ``len`` (counted, not
  kept), headers to a list's ``append``;
* ``curl1`` — the same, made to send each request once: a PREREQFUNCTION (libcurl ≥ 7.80 calls it each
  time it is about to send the request on a connection) aborts the transfer when it is called a second
  time, which is when libcurl would send the request again on a fresh connection (see the check below);
* ``wrk`` — the baseline (Debian wrk, ``-t1``), the same URL, connections and Authorization header.

Each engine reads status, Content-Length, Docker-Content-Digest and Location, as a node must. The CPU
per request is taken over the middle half of each run (from 25 % to 75 % of its requests, or of wrk's
time), so connection and TLS set-up stay outside. Cases: plain http and https + basic auth (htpasswd,
bcrypt), a ~1 KB blob and a 300 KB blob. Engines alternate, ``--rounds`` times; medians are printed.

It also checks the property that decides whether libcurl may carry drtp's requests at all: a request
must never be sent twice without the user asking. A loopback server answers the first request of each
connection and closes the second without a byte of answer; the server counts what it receives. The
check runs on drtp's transport, pycurl (plain and with the ``curl1`` guard) and curl_cffi (both libcurl;
curl_cffi only here, not timed).

Usage: python bench/spike_engines.py [--quick] (pycurl and curl_cffi are not drtp dependencies: pip install
pycurl curl_cffi)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ENGINE = r"""
import asyncio, json, resource, sys, time
kind, url, n, conc, auth, ca = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
marks = {}
done = 0
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def tick():
    global done
    done += 1
    if done == n // 4 or done == 3 * n // 4:
        marks[done] = (cpu(), time.perf_counter())
headers = {"Authorization": auth} if auth else {}
if kind == "loop":
    import ssl, uvloop
    from urllib.parse import urlsplit
    from drtp.registry.async_transport import AsyncConnection
    u = urlsplit(url)
    ctx = None
    if u.scheme == "https":
        ctx = ssl.create_default_context(); ctx.load_verify_locations(cadata=open(ca).read())
    async def worker(count):
        conn = AsyncConnection(u.netloc, 30, scheme=u.scheme, context=ctx)
        for _ in range(count):
            r = await conn.request("GET", u.path, headers)
            assert r.status == 200, r.status
            r.header("content-length"); r.header("docker-content-digest"); r.header("location")
            tick()
    async def main():
        await asyncio.gather(*(worker(n // conc) for _ in range(conc)))
    uvloop.run(main())
else:
    import pycurl
    m = pycurl.CurlMulti()
    left = n
    hdrs = [f"{k}: {v}" for k, v in headers.items()]
    handles = []
    def start(c):
        global left
        left -= 1
        c.lines = []
        c.sends = 0
        c.setopt(pycurl.HEADERFUNCTION, c.lines.append)
        m.add_handle(c)
    for _ in range(conc):
        c = pycurl.Curl()
        c.setopt(pycurl.URL, url)
        c.setopt(pycurl.HTTPHEADER, hdrs)
        c.setopt(pycurl.WRITEFUNCTION, len)
        if ca:
            c.setopt(pycurl.CAINFO, ca)
        if kind == "curl1":
            def once(ip, local_ip, port, local_port, c=c):
                c.sends += 1
                return pycurl.PREREQFUNC_OK if c.sends == 1 else pycurl.PREREQFUNC_ABORT
            c.setopt(pycurl.PREREQFUNCTION, once)
        handles.append(c)
        start(c)
    running = conc
    while running:
        m.select(1.0)
        while True:
            ret, _ = m.perform()
            if ret != pycurl.E_CALL_MULTI_PERFORM:
                break
        while True:
            queued, ok, failed = m.info_read()
            for c in ok:
                m.remove_handle(c)
                assert c.getinfo(pycurl.RESPONSE_CODE) == 200
                for line in c.lines:  # the headers a node reads
                    if line[:15].lower() in (b"content-length:", b"docker-content-"):
                        pass
                tick()
                if left > 0:
                    start(c)
                else:
                    running -= 1
            for c, code, msg in failed:
                raise SystemExit(f"curl failed: {code} {msg}")
            if not queued:
                break
(c0, t0), (c1, t1) = marks[n // 4], marks[3 * n // 4]
print(json.dumps({"rps": (n // 2) / (t1 - t0), "cpu_us": (c1 - c0) / (n // 2) * 1e6}))
"""


def proc_cpu(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def run_engine(kind: str, url: str, n: int, conc: int, auth: str, ca: str) -> dict:
    out = subprocess.run([sys.executable, "-c", ENGINE, kind, url, str(n), str(conc), auth, ca],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"{kind}: {out.stderr[-1500:]}")
    return json.loads(out.stdout)


def run_wrk(url: str, conc: int, seconds: float, auth: str) -> dict:
    auth_header = ["-H", f"Authorization: {auth}"] if auth else []
    cmd = ["wrk", "-t1", f"-c{conc}", f"-d{round(seconds)}s", *auth_header, url]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    time.sleep(seconds * 0.25)
    c0 = proc_cpu(p.pid)
    time.sleep(seconds * 0.5)
    c1 = proc_cpu(p.pid)
    out = p.communicate()[0]
    rps = float(out.split("Requests/sec:")[1].split()[0])
    if "Non-2xx" in out:
        raise RuntimeError(f"wrk got errors:\n{out}")
    return {"rps": rps, "cpu_us": (c1 - c0) / (rps * seconds * 0.5) * 1e6}


def resend_check() -> dict[str, int]:
    """Requests the server received for ONE request of each client whose reused connection closes unanswered."""
    counts: dict[str, int] = {}
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    def handle(conn: socket.socket) -> None:
        with conn:
            seen = 0
            buf = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                while b"\r\n\r\n" in buf:
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    buf = buf[length:]
                    tag = head.split(b" ")[1].decode()
                    counts[tag] = counts.get(tag, 0) + 1
                    seen += 1
                    if seen == 1:
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    else:
                        return  # the second request on this connection: closed without an answer

    threading.Thread(target=serve, daemon=True).start()
    results: dict[str, int] = {}

    def libcurl(name: str, curl, opt, error, once: bool = False) -> None:
        """The same two requests per method on one libcurl handle (pycurl's or curl_cffi's binding); ``once``:
        a PREREQFUNCTION aborts a transfer that libcurl is about to send a second time."""
        for method in ("GET", "PUT"):
            c = curl()
            c.setopt(opt.WRITEFUNCTION, len)
            sends = [0]
            if once:

                def prereq(ip: str, local_ip: str, port: int, local_port: int, sends: list = sends) -> int:
                    sends[0] += 1
                    return opt.PREREQFUNC_OK if sends[0] == 1 else opt.PREREQFUNC_ABORT

                c.setopt(opt.PREREQFUNCTION, prereq)
            c.setopt(opt.URL, f"http://127.0.0.1:{port}/warm-{name}-{method}".encode())
            c.perform()
            c.setopt(opt.URL, f"http://127.0.0.1:{port}/{name}-{method}".encode())
            if method == "PUT":
                c.setopt(opt.CUSTOMREQUEST, b"PUT")
                c.setopt(opt.POSTFIELDS, b"x" * 100)
            sends[0] = 0
            try:
                c.perform()
                results[f"{name} {method}: second request answered"] = 1
            except error as e:
                results[f"{name} {method}: error {str(e)[:60]}"] = 1
            results[f"{name} {method}: times the server received it"] = counts.get(f"/{name}-{method}", 0)

    try:
        import pycurl

        libcurl("curl", pycurl.Curl, pycurl, pycurl.error)
        libcurl("curl1", pycurl.Curl, pycurl, pycurl.error, once=True)
    except ImportError:
        results["curl: pycurl not installed"] = 1
    try:
        from curl_cffi import requests as cffi

        for method in ("GET", "PUT"):
            with cffi.Session() as session:  # one libcurl handle: the second request reuses the connection
                session.request(method, f"http://127.0.0.1:{port}/warm-cffi-{method}", data=b"x" * 100)
                try:
                    session.request(method, f"http://127.0.0.1:{port}/curl_cffi-{method}", data=b"x" * 100)
                    results[f"curl_cffi {method}: second request answered"] = 1
                except cffi.RequestsError as e:
                    results[f"curl_cffi {method}: error {str(e)[:60]}"] = 1
            results[f"curl_cffi {method}: times the server received it"] = counts.get(f"/curl_cffi-{method}", 0)
    except ImportError:
        results["curl_cffi: not installed"] = 1
    from drtp.registry.transport import Connection, RequestError

    conn = Connection("http", f"127.0.0.1:{port}", 5.0)
    conn.request("GET", "/warm-drtp")
    try:
        conn.request("GET", "/drtp-GET")
        results["drtp GET: second request answered"] = 1
    except RequestError as e:
        results[f"drtp GET: {e.outcome}"] = 1
    results["drtp GET: times the server received it"] = counts.get("/drtp-GET", 0)
    srv.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="5,000 requests, one round")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.rounds = 5_000, 1
    from drtp.registry.calls import RegistryCalls
    from drtp.registry.local import LocalRegistry
    from drtp.registry.manifest import digest_of
    from drtp.replay.messages import RegistryAuth
    from tests.realreg_support import PASSWORD, USER, Pki, write_htpasswd

    engines = ["loop", "wrk"]
    try:
        import pycurl  # noqa: F401

        engines[1:1] = ["curl", "curl1"]
    except ImportError:
        print("pycurl is not installed: the curl engine is left out (pip install pycurl)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pki = Pki(d / "pki")
        basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        kinds = [("plain http", {}, None, ""), ("https + basic", {"tls": (pki.cert, pki.key),
                 "htpasswd": write_htpasswd(d / "htpasswd")}, RegistryAuth("", USER, PASSWORD, pki.ca.read_text()),
                 basic)]  # fmt: skip
        for kind, opts, auth, header in kinds:
            with LocalRegistry(d / kind.replace(" ", ""), **opts) as reg:
                client = RegistryCalls(reg.url, RegistryAuth(reg.url, auth.username, auth.password, auth.ca_pem)
                                        if auth else None)  # fmt: skip
                for size in (1000, 300_000):
                    data = os.urandom(size)
                    client.push_blob("spike/engines", data, digest_of(data))
                    url = f"{reg.url}/v2/spike/engines/blobs/{digest_of(data)}"
                    got: dict[str, list[dict]] = {e: [] for e in engines}
                    ca = str(pki.ca) if auth else ""
                    run_engine("loop", url, 2000, args.concurrency, header, ca)  # warm the registry
                    for _ in range(args.rounds):
                        for e in engines:
                            if e == "wrk":
                                secs = float(max(3, round(args.requests / max(1.0, got["loop"][-1]["rps"]))))
                                got[e].append(run_wrk(url, args.concurrency, secs, header))
                            else:
                                got[e].append(run_engine(e, url, args.requests, args.concurrency, header, ca))
                    wrk_us = statistics.median(r["cpu_us"] for r in got["wrk"])
                    wrk_rps = statistics.median(r["rps"] for r in got["wrk"])
                    for e in engines:
                        us = statistics.median(r["cpu_us"] for r in got[e])
                        rps = statistics.median(r["rps"] for r in got[e])
                        spread = [round(r["cpu_us"]) for r in got[e]]
                        rows.append((kind, f"{size // 1000} KB", e, rps, us, rps / wrk_rps, us / wrk_us, spread))
    print(f"{'registry':<14} {'blob':>6} {'engine':<6} {'req/s':>8} {'CPU µs/req':>10} {'rate ÷ wrk':>10} "
          f"{'CPU × wrk':>9}  rounds (µs)")  # fmt: skip
    for kind, size, e, rps, us, rr, cr, spread in rows:
        print(f"{kind:<14} {size:>6} {e:<6} {rps:>8.0f} {us:>10.1f} {rr:>10.2f} {cr:>9.2f}  {spread}")
    print("\nre-send check (a reused connection closed without an answer to the second request):")
    for k, v in resend_check().items():
        print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
