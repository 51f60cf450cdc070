"""The config file's schema: one struct per section, each key with its type and range.

msgspec validates a file against these structs (through drtp.schema, so an
error names the key); a key's own range is in its type (``msgspec.Meta``
bounds), and the rules that span keys or need a value's grammar are in
drtp.config.checks.  The original trace player's keys are accepted unchanged,
so its users' files still load: ``client_info``, ``verbose``, ``trace``,
``registry``, ``warmup``, ``simulate``; drtp's own keys extend those sections.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from drtp.errors import ConfigError

SECRET_KEYS = ("token", "password")  # their values are never printed (drtp.config.loading.redacted)
WEEK_S = 7 * 86_400.0

# Numbers as the keys need them.  The bounds are what refuses NaN (it fails every comparison) and
# infinity (above every upper bound); msgspec refuses a bool where an int or float is expected.
Port = Annotated[int, msgspec.Meta(ge=1, le=65_535)]
Threads = Annotated[int, msgspec.Meta(ge=1, le=1024)]  # a client node refuses more than 1024
Timeout = Annotated[float, msgspec.Meta(gt=0, le=WEEK_S)]  # seconds: > 0 and finite


class _Section(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class ClientInfo(_Section):
    """``client_info:``: the client nodes and how they replay.

    ``port`` is the original trace player's key: there, the port of the
    master's own server, on which the client nodes sent their results back.
    drtp has no such callback (results come back on the connection the master
    opened to each node), so the key is accepted, checked as a port, and not
    used: an original config loads and replays unchanged.  Every
    ``client_list`` entry names its node's port itself (``host:port``), as in
    the original's configs.
    """

    client_list: list[str] = []  # host:port of client nodes
    port: Port | None = None  # the original's master callback port: accepted, unused (drtp needs none)
    threads: Threads = 16
    wait: bool = False  # True: replay "as is" (trace timing); False: as fast as possible
    route: bool = False  # True: consistent hash of the client address; False: round-robin
    token: str | None = None  # shared secret between master and client nodes
    # drtp's own keys
    batch: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 200  # requests per batch sent to a node
    inflight: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] = 2000  # requests out at a node at most (bounds memory)
    timeout: Timeout = 30.0  # read timeout: seconds without progress on an answer before it fails as a timeout
    connect_timeout: Timeout = 5.0  # seconds to open a connection to the registry (TCP and TLS)
    retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 0  # GET/HEAD re-sent when no answer byte came (opt-in)
    max_failed: int | str = 0  # failed trace requests tolerated for exit code 0: a count, or a percentage "1%"
    speedup: Annotated[float, msgspec.Meta(gt=0, le=1e6)] = 1.0  # as-is mode: replay this many times faster
    # as-is mode: a request started this late still counts as on time
    on_time_ms: Annotated[float, msgspec.Meta(ge=0, le=WEEK_S * 1000)] = 10.0
    # how nodes execute: "auto" = one event loop in stress mode, the thread pool as-is (finer timed waits)
    engine: Literal["auto", "loop", "threads"] = "auto"
    # How many requests of one trace client run at once (drtp.replay.client_profiles): "trace" (None: the default)
    # overlaps them as they overlapped in the trace and orders the rest; N runs up to N at once in trace
    # order; "unlimited" lets any ``threads`` run at once (the original player's behaviour).
    client_concurrency: Literal["trace", "unlimited"] | Threads | None = None
    # how each trace client behaves: connections, idle timeout, parallel downloads/uploads, user agent
    profile: Literal["drtp", "docker", "containerd", "skopeo", "crane"] = "drtp"
    idle_timeout: Timeout | None = None  # seconds a kept connection may idle (None: the profile's)
    user_agent: str | None = None  # "trace": each request's own from the trace; other text: sent as is
    # open-loop: requests start at this many per second whatever the answers (None: closed loop or as is)
    rate: Annotated[float, msgspec.Meta(gt=0, le=1e6)] | None = None
    arrivals: Literal["constant", "poisson"] = "constant"  # how rate-mode starts are spaced
    seed: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None  # poisson arrivals: reproducible
    slo: str | None = None  # objectives a run must hold, e.g. "p99<200ms,failed<1%" (drtp.replay.slo)
    # true: a replayer-limited run (summary.json's replayer_limited: a client node short of CPU or late) exits 1
    max_replayer_limited: bool = False


class Limit(_Section):
    type: Literal["seconds", "requests"]
    # a limit of nothing would read nothing; an int stays an int (a count of requests prints as one)
    amount: Annotated[int, msgspec.Meta(ge=1, le=10**15)] | Annotated[float, msgspec.Meta(gt=0, le=1e15)]


class TraceSection(_Section):
    location: str
    traces: list[str]
    limit: Limit | None = None
    output: str | None = None
    format: Literal["auto", "ibm", "jsonl", "registry-log", "parquet"] = "auto"
    skip_bad: bool = False
    # seconds of disorder tolerated while streaming
    reorder_window: Annotated[float, msgspec.Meta(ge=0, le=WEEK_S)] = 60.0
    sort_files: bool = False  # sort each file in memory (for unordered files)


class Warmup(_Section):
    output: str = "warmup-map.json"
    threads: Threads = 8
    random: bool = True
    # images: every pushed blob is a layer of at least one tagged manifest of its repository (a garbage
    # collector keeps them); loose: the trace's manifests name at most 3 blobs each, the rest no manifest
    shape: Literal["images", "loose"] = "images"


class UpstreamEntry(_Section):
    """``registries[].upstream:``: the registry a pull-through cache or mirror (the entry's ``url``) fetches from.

    Its keys are a registries entry's, without ``id`` (it is named after its entry), plus ``access_log``: the
    upstream's own access log, which the master reads after a run to count what reached the upstream
    (Distribution's JSON log, or nginx's combined log).  Warmup, the preflight's probe and, with
    ``upstream_writes: upstream``, the trace's pushes go to the upstream directly."""

    url: str  # http(s)://host:port
    repository: str = ""
    repository_map: str = "prefix"
    create_repository: list[str] = []
    username: str | None = None
    password: str | None = None
    password_file: str | None = None
    credential_helper: str | None = None
    password_command: list[str] | None = None
    credential_ttl: str | float | None = None
    ca_file: str | None = None
    insecure: bool = False
    delete_repository: Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    metrics: str | Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    access_log: str | None = None  # the upstream's access log: Distribution's JSON lines, or nginx's combined log


class RegistryEntry(_Section):
    """One registry of an experiment (``registries:``), with how to reach and authenticate to it."""

    id: str
    url: str  # http(s)://host:port
    repository: str = ""  # prefix put before every trace repository (e.g. "myorg/")
    # how a trace repository becomes the registry's: prefix, flatten or a template (drtp/registry/repo_names.py)
    repository_map: str = "prefix"
    # argv run on the master for each repository before warmup pushes to it ({repository} substituted)
    create_repository: list[str] = []
    username: str | None = None
    password: str | None = None  # a literal or ${ENV_VAR}
    password_file: str | None = None  # or a file holding the password (the whole file, trailing newline dropped)
    credential_helper: str | None = None  # or NAME: docker-credential-NAME get, run on the master
    password_command: list[str] | None = None  # or a command (argv, no shell) whose output is the password
    credential_ttl: str | float | None = None  # ask the helper/command again after this ("50m"; default per helper)
    ca_file: str | None = None  # CA bundle (PEM) that signed the registry's certificate
    insecure: bool = False  # allow plain http, or https without certificate verification
    # drtp clean, when the registry refuses DELETE: argv run on the master for each repository drtp pushed to,
    # "{repository}" replaced by its name (no shell; a relative program path is relative to the config's folder)
    delete_repository: Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    # the registry's own Prometheus metrics: a URL, or one per member behind a load balancer (summed)
    metrics: str | Annotated[list[str], msgspec.Meta(min_length=1)] | None = None
    # the registry a pull-through cache or mirror at ``url`` fetches from (None: ``url`` is the registry itself)
    upstream: UpstreamEntry | None = None
    # with an upstream, where the trace's pushes go: "upstream" (sent to it directly, as a CI system pushes to the
    # origin while clients pull through the mirror), or "skip" (not sent, counted: a pull-only study)
    upstream_writes: Literal["upstream", "skip"] = "upstream"


class Simulate(_Section):
    name: str
    args: dict[str, Any] = {}


class Slurm(_Section):
    """``slurm:``: how ``drtp slurm submit`` asks Slurm for the client nodes and the master (docs/cluster.md)."""

    partition: str | None = None
    account: str | None = None
    nodes: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1  # nodes of the client job
    tasks_per_node: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1  # drtp client processes per node (own ports)
    cpus_per_task: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 1
    time: str = "01:00:00"  # time limit of each job (sbatch --time)
    master_time: str | None = None  # the master job's limit (default: time)
    master_cpus: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 2
    extra: list[str] = []  # more sbatch options, e.g. "--mem=4G" (or whole "#SBATCH …" lines)
    setup: list[str] = []  # shell lines run first in each job: "module load python", "source venv/bin/activate"
    drtp: str = "drtp"  # how the jobs run drtp, e.g. "python -m drtp.cli"
    client_port: Port = 8081  # task i of the client job listens on client_port + i
    bind: str = "0.0.0.0"  # address the client nodes listen on
    workdir: str = "slurm-jobs"  # shared folder that holds one folder per experiment
    register_timeout: Timeout = 300.0  # seconds the master waits for every client to come up
    poll: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 2.0  # seconds between status polls
    each_registry: bool = False  # one run per registry in registry:, in turn, on the same client nodes


class SshHost(_Section):
    """One SSH endpoint: the deploy target, a jump host, or a client host."""

    host: str
    port: Port = 22
    user: str | None = None
    key_file: str | None = None  # default: the SSH agent and ~/.ssh keys
    password: str | None = None  # use ${ENV_VAR}; never written anywhere


class Deploy(_Section):
    """``deploy:``: where ``drtp deploy`` copies the project and runs the experiment (docs/cluster.md)."""

    host: str
    port: Port = 22
    user: str | None = None
    key_file: str | None = None
    password: str | None = None
    jump: SshHost | None = None  # reach ``host`` through this host (ssh -J)
    known_hosts: str | None = None  # default ~/.ssh/known_hosts
    accept_new_host_keys: bool = True  # False: an unknown host key is an error
    remote_dir: str = "drtp-deploy"  # relative to the remote home
    python: str = "python3"  # the remote interpreter the venv is made from
    venv: str | None = None  # default <remote_dir>/venv
    install: Literal["always", "auto", "never"] = "auto"  # auto: pip install only if drtp is not importable
    system_site_packages: bool = False  # venv --system-site-packages
    pip_args: list[str] = []
    mode: Literal["slurm", "ssh"] = "slurm"  # slurm: drtp slurm submit there; ssh: clients on client_hosts
    client_hosts: list[SshHost] = []  # mode ssh: one drtp client on each (as the master reaches them)
    env: dict[str, str] = {}  # extra environment for remote commands (not secrets: use ${VAR} in the config)


class LiveMetricsSection(_Section):
    """``live_metrics:``: serve the run's figures to Prometheus while it goes (as ``--metrics-port``/``--metrics-host``
    do, which override it), so a batch job that takes no options serves them too (drtp.master.outputs.live_metrics)."""

    port: Port
    host: str = "127.0.0.1"  # the address to listen on: loopback unless another is wanted
    # at the end: wait this long at most for a scrape of the final values (0: none)
    linger: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 15.0


class EventEntry(_Section):
    """``events[]``: one maintenance command the master runs on the run's clock (drtp.master.outputs.events).

    ``at`` (a duration from the run's first request) or ``after`` (a count of the run's answered trace
    requests): exactly one of them (drtp.config.checks).  ``run`` is an argv list, never run through a shell;
    ``until`` ends the event's window: a duration after its start, or a command run once ``run`` ended, whose
    end is the event's end.  A failing event is a warning; ``required: true`` stops the run (exit 3)."""

    name: str  # events/<name>.log, events.csv's and summary.json's name of it
    run: list[str]  # argv; a program given as a relative path (with a /) is relative to the config's folder
    at: str | float | None = None  # "30s", "2m", 90
    after: Annotated[int, msgspec.Meta(ge=1, le=10**15)] | None = None  # answered trace requests
    until: str | float | list[str] | None = None  # a duration after the start, or an argv list
    required: bool = False  # a failure stops the run (exit 3, what was measured kept)


class Config(_Section):
    trace: TraceSection | None = None
    client_info: ClientInfo = msgspec.field(default_factory=ClientInfo)
    verbose: bool = False
    registry: list[str] = []
    registries: list[RegistryEntry] = []  # drtp's own: registries with credentials; one experiment each
    # beside a plain registry: list, each registry's Prometheus metrics: host:port -> a URL or a list of URLs
    registry_metrics: dict[str, str | Annotated[list[str], msgspec.Meta(min_length=1)]] = {}
    warmup: Warmup = msgspec.field(default_factory=Warmup)
    simulate: Simulate | None = None
    results: str = "results"  # where run directories go
    slurm: Slurm | None = None  # drtp slurm (docs/cluster.md)
    deploy: Deploy | None = None  # drtp deploy (docs/cluster.md)
    # drtp run / experiment: replay this many times (interleaved across an experiment's registries), each
    # repetition into rep-<k>/ of the run's directory (drtp/master/series/repeat.py)
    repeat: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1
    # fresh: each repetition replays into repositories of its own (prefix rep<k>-), warmed up for it;
    # reuse: every repetition replays into the same repositories, as left by the one before
    repeat_state: Literal["fresh", "reuse"] = "fresh"
    # drtp experiment: after each registry's run, check what drtp's records say it holds (drtp verify)
    verify: bool = False
    live_metrics: LiveMetricsSection | None = (
        None  # a Prometheus endpoint of the run (drtp.master.outputs.live_metrics)
    )
    # maintenance commands run on the run's clock (drtp.master.outputs.events); --event replaces them
    events: list[EventEntry] = []

    # where the file was loaded from (errors name it); relative paths are resolved against its folder
    base_dir: str = "."
    source: str = "<config>"
    # set by drtp itself, never by a file: the repository prefix of one repetition (rep<k>-), put after each
    # registry's own prefix by drtp.registry.repo_names
    namespace: str = ""

    def trace_paths(self) -> list[Path]:
        """The trace files, ``trace.location`` joined with each of ``trace.traces``."""
        t = self.require("trace")
        loc = self.path(t.location)
        return [loc / name for name in t.traces]

    def path(self, value: str) -> Path:
        """A path from the config: absolute, or relative to the config file's folder."""
        p = Path(os.path.expanduser(value))
        return p if p.is_absolute() else Path(self.base_dir) / p

    def require(self, key: str) -> Any:
        """The value at a dotted key, or a ConfigError saying it is missing."""
        value: Any = self
        for part in key.split("."):
            value = getattr(value, part, None)
            if value in (None, [], ""):
                raise ConfigError(f"{self.source}: missing key '{key}' (required for this command)")
        return value

    def reader_options(self) -> dict[str, Any]:
        t = self.require("trace")
        opts: dict[str, Any] = {
            "fmt": t.format,
            "skip_bad": t.skip_bad,
            "reorder_window": t.reorder_window,
            "sort_files": t.sort_files,
        }
        if t.limit is not None:
            opts.update(limit_type=t.limit.type, amount=t.limit.amount)
        if self.client_info.user_agent == "trace":  # decoded only when a run sends it
            opts["user_agent"] = True
        return opts
