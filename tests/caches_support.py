"""Caches in front of a registry, for tests: Debian's nginx with ``proxy_cache``, started on loopback.

A Distribution pull-through cache needs nothing here: it is ``LocalRegistry(proxy={"remoteurl": up.url})``
(drtp.registry.local).  nginx is the other kind of cache users put in a registry's pull path; this starts it
the way docs/caches.md recommends: blobs keyed by digest (one copy whatever the repository), manifests by URI
and ``Accept`` (a tag's answer depends on the media types asked for), ``proxy_cache_lock`` on or off with a
long ``proxy_cache_lock_timeout`` (waiters wait for the first fetch instead of fetching themselves), and
``X-Cache-Status`` on every answer.  Everything lives in a temporary directory (config, cache, temp files,
its own access and error logs) and the process is stopped on :meth:`NginxCache.stop`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from drtp.registry.local import free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

CONFIG = """\
{user}worker_processes 1;
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 512; }}
http {{
  access_log {dir}/access.log combined;
  client_body_temp_path {dir}/client_body;
  proxy_temp_path {dir}/proxy_temp;
  fastcgi_temp_path {dir}/fastcgi_temp;
  uwsgi_temp_path {dir}/uwsgi_temp;
  scgi_temp_path {dir}/scgi_temp;
  proxy_cache_path {dir}/cache levels=1:2 keys_zone=registry:10m {max_size}inactive=1d use_temp_path=off;
  # blobs by digest; manifests (and anything else) by URI and the media types asked for
  map $uri $registry_cache_key {{
    "~/blobs/(?<blob_digest>sha256:[0-9a-f]{{64}})$" "blob $blob_digest";
    default "$uri $http_accept";
  }}
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 0;
    location /v2/ {{
      proxy_pass {upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache registry;
      proxy_cache_key $registry_cache_key;
      proxy_cache_valid 200 1d;
      proxy_ignore_headers Cache-Control Expires Set-Cookie;
      proxy_cache_lock {lock};
      proxy_cache_lock_timeout 120s;
      proxy_cache_lock_age 120s;
      add_header X-Cache-Status $upstream_cache_status always;
    }}
  }}
{slow}}}
"""

# a second server between the cache and its upstream that sends each answer at ``rate`` bytes/s: a cold fetch
# then lasts long enough for clients arriving at the same instant to find it still under way
SLOW = """\
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 0;
    location / {{
      proxy_pass {upstream};
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      limit_rate {rate};
    }}
  }}
"""


class NginxCache:
    """nginx with ``proxy_cache`` in front of the registry at ``upstream`` (http://host:port), on loopback.

    ``lock``: ``proxy_cache_lock`` on (one upstream fetch per absent object; the other clients wait for it and
    are served from the cache as HIT) or off (each client that misses fetches it itself); ``max_size``: the
    cache's ``max_size`` (``"2m"``; None: unlimited); ``rate``: bytes/s at which the upstream's answers reach
    the cache (through a throttling server of the same nginx; None: at full speed).  :attr:`url` is the
    cache, :attr:`access_log` its own log; use as a context manager or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, upstream: str, lock: bool = True, max_size: str | None = None, rate: int | None = None):
        self.upstream = upstream.rstrip("/")
        self.lock = lock
        self.max_size = max_size
        self.rate = rate
        self.dir = Path(tempfile.mkdtemp(prefix="drtp-nginx-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        return self.dir / "access.log"

    def config_text(self) -> str:
        target, slow = self.upstream, ""
        if self.rate:
            slow_port = free_port()
            slow = SLOW.format(port=slow_port, upstream=self.upstream, rate=self.rate)
            target = f"http://127.0.0.1:{slow_port}"
        return CONFIG.format(
            user="user root;\n" if os.geteuid() == 0 else "",
            dir=self.dir,
            port=self.port,
            upstream=target,
            lock="on" if self.lock else "off",
            max_size=f"max_size={self.max_size} " if self.max_size else "",
            slow=slow,
        )

    def start(self, timeout: float = 10.0) -> NginxCache:
        conf = self.dir / "nginx.conf"
        conf.write_text(self.config_text())
        with open(self.dir / "stderr.log", "ab") as err:
            self.proc = subprocess.Popen(
                [NGINX, "-p", str(self.dir), "-e", str(self.dir / "error.log"), "-c", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        log = (self.dir / "error.log").read_text(errors="replace") if (self.dir / "error.log").exists() else ""
        self.stop()
        raise RuntimeError(f"nginx did not start: {log[-500:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> NginxCache:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
