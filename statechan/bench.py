"""Benchmarks (``make bench`` / ``python -m statechan.bench``): speed figures, each beside a
baseline measured in the same run, so ratios survive a noisy machine.

Not a test: nothing here asserts a time. Results go to stdout (and ``--json FILE``); with
``--markdown`` each engine's run is stored in ``docs/benchmarks.json`` and ``docs/benchmarks.md`` is
written again from that file (``statechan.benchharness``), so the page holds exactly what was
measured, with its command, size, commit, date and machine.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from statechan.benchharness import (
    Figure,
    commit,
    load_results,
    machine,
    record,
    render,
    run_info,
    save_results,
)
from statechan.resolver import offer, resolve, rules_for, should_reject
from statechan.states import ServiceUnitState, StorageType
from statechan.values import ServiceUnitStateData, next_version

S = ServiceUnitState
Pair = tuple[ServiceUnitStateData | None, ServiceUnitStateData | None]


def realistic_pairs(count: int, seed: int = 7) -> list[Pair]:
    """``count`` (held, offered) pairs in the mix a channel reader sees.

    Mostly consecutive steps of assign / transfer / unload / split flows, with the losers of
    races (stale versions), post-compaction version jumps, invalid transitions, broker
    mismatches, forced overrides and tombstones mixed in.
    """
    rng = random.Random(seed)
    brokers = [f"broker-{i}:8080" for i in range(8)]
    pairs: list[Pair] = []

    def v(state: S, dst: str | None, src: str | None, version: int, force: bool = False) -> ServiceUnitStateData:
        return ServiceUnitStateData(
            state=state, dst_broker=dst, source_broker=src, version_id=version, force=force, timestamp=version * 1000
        )

    while len(pairs) < count:
        a, b = rng.sample(brokers, 2)
        held: ServiceUnitStateData | None = None
        flow: list[ServiceUnitStateData | None] = []
        nv = next_version(held)
        assigning = v(S.Assigning, a, None, nv)
        owned = v(S.Owned, a, None, nv + 1)
        flow += [assigning, owned]
        kind = rng.random()
        if kind < 0.45:  # transfer
            flow += [v(S.Releasing, b, a, nv + 2), v(S.Assigning, b, a, nv + 3), v(S.Owned, b, a, nv + 4)]
        elif kind < 0.75:  # unload and tombstone
            flow += [v(S.Releasing, None, a, nv + 2), v(S.Free, None, a, nv + 3), None]
        else:  # split and tombstone
            flow += [v(S.Splitting, None, a, nv + 2), v(S.Deleted, None, a, nv + 3), None]
        for offered in flow:
            pairs.append((held, offered))
            noise = rng.random()
            if offered is not None and noise < 0.10:  # a racing duplicate at the same version
                pairs.append((offered, offered.model_copy(update={"dst_broker": b})))
            elif offered is not None and noise < 0.14:  # a lagging reader jumps versions
                pairs.append((held, offered.model_copy(update={"version_id": offered.version_id + 3})))
            elif held is not None and noise < 0.18:  # an assign on an owned bundle
                pairs.append((held, v(S.Assigning, b, None, held.version_id + 1)))
            elif held is not None and noise < 0.20:  # the leader's override
                pairs.append((held, v(S.Owned, b, None, held.version_id + 1, force=True)))
            elif held is not None and held.state is S.Owned and noise < 0.22:  # transfer to itself
                pairs.append((held, v(S.Releasing, held.dst_broker, held.dst_broker, held.version_id + 1)))
            held = offered
    return pairs[:count]


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_resolver(count: int) -> list[Figure]:
    """``should_reject`` on value objects, and decode-then-decide on Pulsar JSON."""
    pairs = realistic_pairs(count)

    def loop_floor() -> None:
        for prev, new in pairs:
            (lambda p, n: False)(prev, new)

    def decide_all() -> None:
        for prev, new in pairs:
            should_reject(prev, new)

    mix: dict[str, int] = {}
    for prev, new in pairs:
        reason = resolve(prev, new).reason
        mix[reason.value] = mix.get(reason.value, 0) + 1
    floor = _timed(loop_floor)
    decide = _timed(decide_all)
    decide_store = _timed(lambda: [should_reject(p, n, StorageType.MetadataStore) for p, n in pairs])
    figures = [
        Figure(
            "should_reject, system topic (value objects)",
            count,
            decide,
            "loop floor",
            floor,
            {"mix": dict(sorted(mix.items()))},
        ),
        Figure("should_reject, metadata store (value objects)", count, decide_store, "loop floor", floor),
    ]

    encoded = [(p.to_json() if p else None, n.to_json() if n else None) for p, n in pairs]
    decode = ServiceUnitStateData.model_validate_json

    def json_floor() -> None:
        for p, n in encoded:
            if p is not None:
                json.loads(p)
            if n is not None:
                json.loads(n)

    def decode_and_decide() -> None:
        for p, n in encoded:
            should_reject(decode(p) if p is not None else None, decode(n) if n is not None else None)

    figures.append(
        Figure(
            "decode 2 Pulsar JSON values + should_reject",
            count,
            _timed(decode_and_decide),
            "json.loads floor",
            _timed(json_floor),
        )
    )
    # An auditor decodes each record once and folds it against the value it already holds.
    records = [n for _, n in encoded]

    rules = rules_for(StorageType.SystemTopic)

    def audit_fold() -> None:
        held: ServiceUnitStateData | None = None
        for text in records:
            held, _ = offer(rules, held, decode(text) if text is not None else None)

    figures.append(
        Figure(
            "decode 1 record + resolve (auditor's cost)",
            count,
            _timed(audit_fold),
            "json.loads floor",
            _timed(lambda: [json.loads(t) for t in records if t is not None]),
        )
    )
    return figures


def realistic_log(count: int, bundles: int = 10_000, seed: int = 11) -> list[tuple[str, ServiceUnitStateData | None]]:
    """``count`` channel records from ``bundles`` bundles moving through their flows, interleaved.

    Each bundle cycles assign -> (transfer | unload + tombstone | transfer ...); about one record in
    ten is a racing duplicate at a taken version, as two brokers assigning at once produce.
    """
    rng = random.Random(seed)
    brokers = [f"broker-{i}.example.com:8080" for i in range(8)]
    keys = [
        f"tenant-{i % 50}/ns-{i % 997}/0x{i * 4096 % 2**32:08x}_0x{(i * 4096 + 4096) % 2**32:08x}"
        for i in range(bundles)
    ]
    flows: dict[str, list[ServiceUnitStateData | None]] = {}
    owner: dict[str, str | None] = dict.fromkeys(keys)
    version: dict[str, int] = dict.fromkeys(keys, 0)
    log: list[tuple[str, ServiceUnitStateData | None]] = []
    clock = 0

    def step(key: str) -> list[ServiceUnitStateData | None]:
        held_owner, v = owner[key], version[key]
        a = rng.choice(brokers)
        if held_owner is None:
            owner[key], version[key] = a, 2
            return [
                ServiceUnitStateData(state=S.Assigning, dst_broker=a, version_id=1, timestamp=clock),
                ServiceUnitStateData(state=S.Owned, dst_broker=a, version_id=2, timestamp=clock),
            ]
        if rng.random() < 0.6 and a != held_owner:
            owner[key], version[key] = a, v + 3
            return [
                ServiceUnitStateData(
                    state=S.Releasing, dst_broker=a, source_broker=held_owner, version_id=v + 1, timestamp=clock
                ),
                ServiceUnitStateData(
                    state=S.Assigning, dst_broker=a, source_broker=held_owner, version_id=v + 2, timestamp=clock
                ),
                ServiceUnitStateData(
                    state=S.Owned, dst_broker=a, source_broker=held_owner, version_id=v + 3, timestamp=clock
                ),
            ]
        owner[key], version[key] = None, 0
        return [
            ServiceUnitStateData(state=S.Releasing, source_broker=held_owner, version_id=v + 1, timestamp=clock),
            ServiceUnitStateData(state=S.Free, source_broker=held_owner, version_id=v + 2, timestamp=clock),
            None,
        ]

    while len(log) < count:
        clock += 1
        key = keys[rng.randrange(bundles)]
        queue = flows.get(key)
        if not queue:
            queue = flows[key] = step(key)
        value = queue.pop(0)
        log.append((key, value))
        if value is not None and rng.random() < 0.1:
            log.append((key, value.model_copy(update={"dst_broker": rng.choice(brokers)})))
    return log[:count]


def bench_replay(count: int) -> list[Figure]:
    """One system-topic reader folding a long log into its view, and compaction of that log."""
    from statechan.stores import SystemTopicTableView, Topic

    log = realistic_log(count)
    topic = Topic()
    for key, value in log:
        topic.publish(key, value)

    def last_value_wins() -> None:
        data: dict[str, object] = {}
        for message in topic:
            if message.payload is None:
                data.pop(message.key, None)
            else:
                data[message.key] = message._value

    view = SystemTopicTableView(topic, "bench")
    replay = _timed(view.start)
    floor = _timed(last_value_wins)
    figures = [
        Figure(
            "topic replay: one reader folds the log",
            count,
            replay,
            "last-value-wins dict loop",
            floor,
            {"keys": len(view), "rejected": sum(view.stats.rejected.values())},
        )
    ]

    raw = Topic()
    for message in topic:
        raw.publish_raw(message.key, message.payload, publish_time=message.publish_time)
    cold_view = SystemTopicTableView(raw, "bench-cold")
    payloads = [m.payload for m in raw if m.payload]
    figures.append(
        Figure(
            "topic replay, decoding every payload (cold)",
            count,
            _timed(cold_view.start),
            "json.loads of the payloads",
            _timed(lambda: [json.loads(p) for p in payloads]),
        )
    )

    def last_value_per_key() -> None:
        latest: dict[str, object] = {}
        for message in topic:
            latest[message.key] = message

    compaction = _timed(topic.compact)
    figures.append(
        Figure(
            "strategic compaction of the whole log",
            count,
            compaction,
            "last-value-per-key dict",
            _timed(last_value_per_key),
            {"kept keys": len(topic.compacted)},
        )
    )
    return figures


def bench_simulate(baseline: str | None) -> list[Figure]:
    """The cluster simulator: 5 brokers, 1,000 bundles, one simulated day with faults; with a
    ``baseline`` revision, the same day against it too."""
    from statechan.cluster import SimConfig, Wait
    from statechan.cluster.runner import Simulation, Workload

    config = SimConfig(brokers=5, namespaces=10, bundles_per_namespace=100, seed=1, trace_views=False)
    workload = Workload(
        crashes_per_hour=0.25,
        session_losses_per_hour=0.25,
        shutdowns_per_hour=0.1,
        leader_changes_per_hour=0.1,
        transfers_per_hour=120,
        lookups_per_hour=3600,
    )
    simulation = Simulation(config, workload)
    seconds = _timed(lambda: simulation.run(24 * 3_600_000))
    cluster = simulation.cluster
    actions = len(cluster.history)
    records = sum(1 for r in cluster.trace if r["kind"] == "channel")
    probe = Simulation(config, workload).cluster

    def dispatch_floor() -> None:
        for _ in range(actions):
            probe.step(Wait(0))

    floor = _timed(dispatch_floor)
    notes: dict[str, object] = {
        "channel records": records,
        "simulated hours": 26,
        "actions by kind": dict(cluster.counters.most_common(8)),
    }
    return [
        Figure("simulate: actions", actions, seconds, "step(Wait(0)) dispatch floor", floor, notes),
        Figure("simulate: channel records", records, seconds),
        *(against_baseline(baseline, _SIMULATED_DAY, "the simulator") if baseline else []),
    ]


def bench_hypothesis(baseline: str | None) -> list[Figure]:
    """The Hypothesis bench: the system-topic machine on the current protocol, 500 examples. Its
    machines are on the test side, so it runs as ``python -m properties.speed`` in a process of
    its own, from the checkout this library is in; with a ``baseline`` revision, against it too."""
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "properties" / "speed.py").is_file():
        raise RuntimeError("the Hypothesis bench needs the repository's properties package: run it from a checkout")
    done = subprocess.run(
        [sys.executable, "-m", "properties.speed"], cwd=checkout, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"python -m properties.speed failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    examples, steps = int(measured["examples"]), int(measured["steps"])
    seconds, floor = float(measured["seconds"]), float(measured["floor_seconds"])
    notes: dict[str, object] = {"examples": examples, "steps per example": round(steps / max(1, examples), 1)}
    return [
        Figure("hypothesis bench: simulator steps", steps, seconds, "unchecked random walks, same steps", floor, notes),
        Figure("hypothesis bench: examples", examples, seconds),
        *(against_baseline(baseline, _HYPOTHESIS_BENCH, "the Hypothesis bench", repeats=1) if baseline else []),
    ]


class _PeakMemory:
    """Polls the resident memory of a process and all its descendants (a Spark JVM and its Python
    workers), keeping the largest sum seen and each process's own peak under a role (see
    :func:`_role`). Linux ``/proc`` only; elsewhere it stays 0."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_bytes = 0
        self.peaks: dict[int, tuple[str, int]] = {}
        """Each process seen: its role and its own peak resident memory (bytes)."""
        self.cpu: dict[int, tuple[float, float]] = {}
        """Each process seen: its CPU seconds (user + system) when first and when last sampled."""

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        return tree

    def sample(self) -> None:
        total = 0
        for pid in self._tree():
            try:
                with open(f"/proc/{pid}/statm", encoding="utf-8") as statm:
                    resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
                role = _role(pid)  # read each time: a launcher script becomes the JVM by exec
            except (OSError, IndexError, ValueError):
                continue
            total += resident
            self.peaks[pid] = (role, max(resident, self.peaks.get(pid, (role, 0))[1]))
            used = _cpu_seconds(pid)
            if used is not None:
                self.cpu[pid] = (self.cpu.get(pid, (used, used))[0], used)
        self.peak_bytes = max(self.peak_bytes, total)

    def cpu_seconds(self, since_start: bool = True) -> float:
        """The tree's CPU seconds: since each process started, or (``since_start`` false: a
        server's tree watched over one client's run) since the first sample."""
        return sum(last - (0.0 if since_start else first) for first, last in self.cpu.values())

    def by_role(self) -> dict[str, int]:
        """The largest single-process peak of each role (bytes)."""
        found: dict[str, int] = {}
        for role, peak in self.peaks.values():
            found[role] = max(found.get(role, 0), peak)
        return found


def _cpu_seconds(pid: int) -> float | None:
    """A process's own CPU seconds so far (user + system, ``/proc/PID/stat``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _role(pid: int) -> str:
    """What a process of a Spark run is: ``jvm`` (the driver and, in local mode, the executor),
    ``worker`` (a PySpark Python worker or its daemon), or ``driver`` (the Python that started it)."""
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        words = handle.read().split(b"\0")
    if os.path.basename(words[0]) == b"java":
        return "jvm"
    return "worker" if any(b"pyspark.daemon" in w or b"pyspark.worker" in w for w in words) else "driver"


@dataclass
class Measured:
    """One command's run: wall seconds, the process tree's peak resident memory (bytes), each
    role's largest single-process peak (bytes), the CPU seconds the machine spent, its output."""

    seconds: float
    peak_bytes: int
    roles: dict[str, int]
    cpu_seconds: float
    output: str
    tree_cpu_seconds: float = 0.0
    """The CPU seconds of the command's own process tree (and of the watched server's tree over
    the run): unlike ``cpu_seconds``, not the other work on a shared machine."""


def _busy_cpu_seconds() -> float:
    """The machine's busy CPU time so far (all processes, ``/proc/stat``); 0 where there is none."""
    try:
        with open("/proc/stat", encoding="utf-8") as stat:
            fields = [int(f) for f in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _measure(command: list[str], ok: tuple[int, ...] = (0,), server: int | None = None) -> Measured:
    """Run a command, sampling its process tree's memory and CPU every 0.5 s (and the tree of the
    ``server`` process it talks to, over the same time: a Spark Connect server's JVM and workers)."""
    import threading

    started = time.perf_counter()
    busy = _busy_cpu_seconds()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    memory = _PeakMemory(process.pid)
    served = _PeakMemory(server) if server is not None else None
    done = threading.Event()

    def poll() -> None:
        if served is not None:
            served.sample()
        while not done.wait(0.5):
            memory.sample()
            if served is not None:
                served.sample()

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    output, _ = process.communicate()
    seconds = time.perf_counter() - started
    cpu = _busy_cpu_seconds() - busy
    done.set()
    watcher.join()
    if served is not None:
        served.sample()
    if process.returncode not in ok:
        raise RuntimeError(f"{' '.join(command)} failed ({process.returncode}):\n{output[-3000:]}")
    roles = memory.by_role()
    tree_cpu = memory.cpu_seconds()
    peak = memory.peak_bytes
    if served is not None:  # the server does the work: its JVM and workers, beside the client's Python
        roles = {("client" if role == "driver" else role): size for role, size in roles.items()}
        for role, size in served.by_role().items():  # the server's own "driver" is its launching script
            roles[role if role != "driver" else "launcher"] = max(roles.get(role, 0), size)
        tree_cpu += served.cpu_seconds(since_start=False)
        peak += served.peak_bytes
    return Measured(seconds, peak, roles, cpu, output, tree_cpu)


_SPARK_FLOOR = """
import sys
from statechan.audit import CHANNEL_COLUMNS, default_partitions, spark_session
from pyspark.sql import functions as F
target = sys.argv[2]
spark = spark_session(remote=target) if target.startswith("sc://") else spark_session(target)
frame = spark.read.parquet(sys.argv[1]).where(F.col("kind") == "channel")
n = frame.count()
columns = [F.col(c) for c in CHANNEL_COLUMNS[:-1]] + [(F.col("_metadata.row_index") + 1).alias("row")]
(frame.select(*columns).repartition(default_partitions(spark, n), F.substring_index("key", "/", 2))
    .sortWithinPartitions("offset").write.format("noop").mode("overwrite").save())
print("rows", n)
"""
"""Spark's floor for a trace: session start, read, the same columns, partitions, shuffle by
namespace and sort by offset as the audit, materialised into Spark's no-op sink (a bare
``count()`` would let Spark prune the columns and drop the sort)."""


_SPARK_READ_FLOOR = """
import sys
from statechan.audit import spark_session
from pyspark.sql import functions as F
target = sys.argv[2]
spark = spark_session(remote=target) if target.startswith("sc://") else spark_session(target)
frame = spark.read.parquet(sys.argv[1]).where(F.col("kind") == "channel")
found = frame.groupBy(F.substring_index("key", "/", 2)).agg(F.count(F.lit(1)).alias("n"), F.max("offset")).collect()
print("rows", sum(row["n"] for row in found))
"""
"""A lower floor: session start, read, and a trivial aggregation (records and last offset per
namespace) of the same file; no shuffle of the records, no sort."""


def _duckdb_checks(path: str) -> tuple[float, dict[str, int]]:
    """Transition-pair and version checks in SQL, record against the previous record of its key;
    the transition table comes from the protocol model (not restated)."""
    import duckdb

    pairs = ", ".join(
        f"('{a.value}', '{b.value}')" for a, b in sorted(rules_for(StorageType.SystemTopic).edges, key=str)
    )
    query = f"""
        WITH t(prev_state, state) AS (VALUES {pairs}),
        c AS (
            SELECT key, "offset", state, version_id, has_value,
                   lag(state) OVER w AS prev_state, lag(version_id) OVER w AS prev_version,
                   lag(has_value) OVER w AS prev_has_value
            FROM read_parquet('{path}') WHERE kind = 'channel'
            WINDOW w AS (PARTITION BY key ORDER BY "offset")
        )
        SELECT
            count(*) AS channel_records,
            count(*) FILTER (WHERE has_value AND prev_has_value AND NOT EXISTS (
                SELECT 1 FROM t WHERE t.prev_state = c.prev_state AND t.state = c.state)) AS invalid_pairs,
            count(*) FILTER (WHERE has_value AND prev_has_value AND version_id <> prev_version + 1) AS version_breaks
        FROM c
    """
    started = time.perf_counter()
    row = duckdb.connect().execute(query).fetchone()
    seconds = time.perf_counter() - started
    assert row is not None
    return seconds, {"channel records": row[0], "invalid pairs": row[1], "version breaks": row[2]}


def _bench_trace(records: int) -> tuple[str, bool]:
    """The benchmark's generated Parquet trace of about ``records`` records (seed 1, every core),
    made if absent: its path, and whether this run made it."""
    from statechan.tracegen import write_generated

    folder = os.environ.get("STATECHAN_BENCH_DIR", ".bench")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"trace-{records}.parquet")
    if os.path.exists(path):
        return path, False
    part = path.removesuffix(".parquet") + ".part.parquet"
    write_generated(part, records, seed=1, workers=os.cpu_count() or 1)
    os.replace(part, path)
    return path, True


def _spark_runs(path: str, master: str, server: int | None = None) -> tuple[Measured, int, Measured, dict[str, Any]]:
    """Spark's floor for the trace and the Spark audit of it, one after the other, each a fresh
    process tree: the floor's run and rows, the audit's run and report. ``master`` may be a Spark
    Connect URL (``server``: the server's process, whose tree does the work)."""
    python = sys.executable
    floor = _measure([python, "-c", _SPARK_FLOOR, path, master], server=server)
    rows = int(floor.output.rsplit("rows", 1)[1].split()[0])
    connect = master.startswith("sc://")
    report = os.path.join(os.path.dirname(path), "audit-report-connect.json" if connect else "audit-report.json")
    target = ["--remote", master] if connect else ["--master", master]
    audit = _measure([python, "-m", "statechan", "audit", path, "--report", report, *target], ok=(0, 1), server=server)
    with open(report, encoding="utf-8") as handle:
        summary: dict[str, Any] = json.load(handle)
    return floor, rows, audit, summary


def _memory(run: Measured) -> str:
    """A run's peak resident memory: the tree's, and each role's largest process."""
    mib = 1 << 20
    roles = ", ".join(f"{role} {peak / mib:,.0f}" for role, peak in sorted(run.roles.items()))
    return f"tree {run.peak_bytes / mib:,.0f} MiB ({roles} MiB)"


def _same_report(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Two audits' reports agree on everything but how and how long they ran."""
    skip = {"engine", "elapsed_s", "inputs", "quarantine"}
    return {k: v for k, v in one.items() if k not in skip} == {k: v for k, v in other.items() if k not in skip}


def bench_audit(records: int) -> list[Figure]:
    """The trace auditor on a generated Parquet trace, on classic Spark (``local[2]``, a driver
    in the process) and through a Spark Connect server (``local[2]``, started from the installed
    PySpark's own script; the server's start is not counted, as a client finds it running), each
    beside Spark's floor for the file on the same engine in the same run (read, shuffle by
    namespace, sort, no-op sink) and a lower one (read and a trivial aggregation); then a
    single-process replay with the same library functions, and DuckDB's SQL checks."""
    from statechan.sparkservers import connect_server_process

    path, _ = _bench_trace(records)
    master = os.environ.get("STATECHAN_BENCH_MASTER", "local[2]")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    python = sys.executable
    read_floor = _measure([python, "-c", _SPARK_READ_FLOOR, path, master])
    floor, rows, audit, summary = _spark_runs(path, master)
    with connect_server_process(master, memory="4g") as (url, server):  # the memory of the auditor's own driver
        _measure([python, "-c", _SPARK_READ_FLOOR, path, url], server=server)  # a first run warms the server's JVM
        connect_read_floor = _measure([python, "-c", _SPARK_READ_FLOOR, path, url], server=server)
        connect_floor, _, connect, connect_summary = _spark_runs(path, url, server)
    local_report = os.path.join(os.path.dirname(path), "audit-report-local.json")
    local = _measure(
        [sys.executable, "-m", "statechan", "audit", path, "--report", local_report, "--engine", "local"], ok=(0, 1)
    )
    with open(local_report, encoding="utf-8") as handle:
        local_summary = json.load(handle)
    duck_s, duck = _duckdb_checks(path)
    mib = 1 << 20
    total = summary["records"]

    def per_record(run: Measured) -> str:
        return f"{run.seconds / total * 1e6:.2f} µs wall, {run.tree_cpu_seconds / total * 1e6:.2f} µs CPU"

    notes: dict[str, object] = {
        "file": f"{path} ({os.path.getsize(path) / mib:.0f} MiB, {summary['records']:,} records, "
        f"{summary['bundles']:,} bundles, {summary['namespaces']:,} namespaces)",
        "master": master,
        "read": "the audit's default (auto): for a Parquet trace in offset order each Spark task reads the file "
        "through Arrow and replays its share of the namespaces, without Spark's shuffle and sort, which the floor "
        "keeps; the read floor reads and aggregates",
        "load average before (1, 5, 15 min)": ", ".join(f"{x:.2f}" for x in load),
        "time per record": f"audit {per_record(audit)}; floor {per_record(floor)}",
        "CPU seconds of the process trees": f"audit {audit.tree_cpu_seconds:.0f}, floor {floor.tree_cpu_seconds:.0f}, "
        f"read floor {read_floor.tree_cpu_seconds:.0f} (ratios {audit.tree_cpu_seconds / floor.tree_cpu_seconds:.2f}x, "
        f"{audit.tree_cpu_seconds / read_floor.tree_cpu_seconds:.2f}x); "
        f"machine busy: audit {audit.cpu_seconds:.0f}, floor {floor.cpu_seconds:.0f}",
        "peak memory": f"floor {_memory(floor)}; audit {_memory(audit)}; local {_memory(local)}",
        "violations": {k: v["count"] for k, v in summary["violations"].items() if v["count"]} or "none",
        "connect and local engines give the classic report": (
            _same_report(connect_summary, summary),
            _same_report(local_summary, summary),
        ),
        "duckdb": duck,
    }
    connect_notes: dict[str, object] = {
        "server": f"{url} on {master}, started from the package's sbin/start-connect-server.sh (not counted)",
        "time per record": f"audit {per_record(connect)}; floor {per_record(connect_floor)}",
        "CPU seconds (client and server trees)": f"audit {connect.tree_cpu_seconds:.0f}, floor "
        f"{connect_floor.tree_cpu_seconds:.0f}, read floor {connect_read_floor.tree_cpu_seconds:.0f} "
        f"(ratios {connect.tree_cpu_seconds / connect_floor.tree_cpu_seconds:.2f}x, "
        f"{connect.tree_cpu_seconds / connect_read_floor.tree_cpu_seconds:.2f}x)",
        "peak memory": f"floor {_memory(connect_floor)}; audit {_memory(connect)}",
    }
    return [
        Figure(
            "audit: classic spark, full (session start included)",
            total,
            audit.seconds,
            "spark floor (read, shuffle, sort; no-op sink)",
            floor.seconds,
            notes,
        ),
        Figure("audit: classic spark floor, no checks", rows, floor.seconds),
        Figure(
            "audit: classic spark, against read + aggregate", total, audit.seconds, "read floor", read_floor.seconds
        ),
        Figure(
            "audit: spark connect, full (client start included)",
            total,
            connect.seconds,
            "spark floor through connect",
            connect_floor.seconds,
            connect_notes,
        ),
        Figure(
            "audit: spark connect, against read + aggregate",
            total,
            connect.seconds,
            "read floor through connect",
            connect_read_floor.seconds,
        ),
        Figure(
            "audit: single process, same library functions", total, local.seconds, "spark full audit", audit.seconds
        ),
        Figure(
            "audit: duckdb, transition pairs + versions in SQL",
            duck["channel records"],
            duck_s,
            "spark full audit",
            audit.seconds,
        ),
    ]


def bench_audit_scale(sizes: Sequence[int]) -> list[Figure]:
    """The Spark audit and Spark's floor at each size of ``--audit-records`` (e.g. 10M and 100M),
    each run's time per record and its memory (the tree's peak, and the largest single JVM, Python
    worker and driver), with the machine's load average before each size. A trace this run
    generates is deleted after its runs (``STATECHAN_BENCH_KEEP=1`` keeps it); the last figure is
    the time per record at the largest size against the smallest."""
    master = os.environ.get("STATECHAN_BENCH_MASTER", "local[*]")
    figures: list[Figure] = []
    per_record: dict[int, float] = {}
    for records in sorted(sizes):
        started = time.perf_counter()
        path, made = _bench_trace(records)
        generated = time.perf_counter() - started
        load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
        try:
            floor, rows, audit, summary = _spark_runs(path, master)
            size = os.path.getsize(path)
        finally:
            if made and not os.environ.get("STATECHAN_BENCH_KEEP"):
                os.remove(path)
        total = summary["records"]
        per_record[records] = audit.seconds / total
        figures.append(
            Figure(
                f"audit at scale: spark, {records:,} records",
                total,
                audit.seconds,
                "spark floor, same trace, same run",
                floor.seconds,
                {
                    "file": f"{size / (1 << 20):,.0f} MiB, {summary['bundles']:,} bundles, "
                    f"{summary['namespaces']:,} namespaces" + (f", generated in {generated:.0f} s" if made else ""),
                    "load average before (1, 5, 15 min)": ", ".join(f"{x:.2f}" for x in load),
                    "time per record": f"audit {audit.seconds / total * 1e6:.2f} µs, floor "
                    f"{floor.seconds / rows * 1e6:.2f} µs",
                    "busy CPU seconds (whole machine)": f"audit {audit.cpu_seconds:.0f}, floor {floor.cpu_seconds:.0f}",
                    "peak memory": f"audit {_memory(audit)}; floor {_memory(floor)}",
                    "violations": {k: v["count"] for k, v in summary["violations"].items() if v["count"]} or "none",
                },
            )
        )
    if len(per_record) > 1:
        small, large = min(per_record), max(per_record)
        figures.append(
            Figure(
                f"audit at scale: time per record, {large:,} against {small:,}",
                large,
                per_record[large] * large,
                f"{small:,} records' time per record, times {large // small}",
                per_record[small] * large,
                {"target": "within 1.1x"},
            )
        )
    return figures


_AUDIT_STAGES = """
import json, sys, time
started = time.perf_counter()
marks = []
from pyspark.sql import functions as F
from statechan.audit import CHANNEL_COLUMNS, ROW_SPAN, _spark_frame, audit, default_partitions, spark_session
spark = spark_session(sys.argv[2])
marks.append(("session start", time.perf_counter()))
def note(text):
    if text.startswith(("reading", "replaying")):
        marks.append((text.split(":")[0].split(" ")[0], time.perf_counter()))
audit([sys.argv[1]], spark=spark, progress=note)
marks.append(("report", time.perf_counter()))
frame = _spark_frame(spark, [sys.argv[1]]).where(F.col("kind") == "channel")
n = frame.count()
handed = (frame.select(*CHANNEL_COLUMNS[:-1], (F.col("source") * ROW_SPAN + F.col("line")).alias("row"))
    .repartition(default_partitions(spark, n), F.substring_index("key", "/", 2)).sortWithinPartitions("offset"))
def count(batches):
    import pyarrow as pa
    yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})
before = time.perf_counter()
handed.mapInArrow(count, "n long").collect()
marks.append(("hand-over only", time.perf_counter()))
print(json.dumps({"started": started, "marks": marks, "handover_from": before}))
"""
"""One in-process classic audit timed by stage (session start; the pass for the registry and the
span; the replay job: shuffle, sort, hand-over and fold; the report), then the replay job's
pipeline again into a ``mapInArrow`` that only counts its rows (the hand-over without the fold)."""


def bench_audit_stages(records: int) -> list[Figure]:
    """Where the classic audit's time goes, by stage (``_AUDIT_STAGES``), and the CPU seconds of
    its process tree."""
    path, _ = _bench_trace(records)
    master = os.environ.get("STATECHAN_BENCH_MASTER", "local[2]")
    run = _measure([sys.executable, "-c", _AUDIT_STAGES, path, master])
    found = json.loads(run.output.strip().splitlines()[-1])
    previous, stages = found["started"], {}
    for name, at in found["marks"]:
        if name == "hand-over only":
            stages[name] = at - found["handover_from"]
            continue
        stages[name] = at - previous
        previous = at
    names = {  # each stage by the mark that ends it
        "reading": "set-up",
        "replaying": "pass for registry and span",
        "report": "replay job (shuffle, sort, hand-over, fold) and report",
    }
    notes: dict[str, object] = {names.get(k, k): f"{v:.1f} s" for k, v in stages.items()}
    notes["CPU seconds of the process tree"] = f"{run.tree_cpu_seconds:.0f}"
    notes["peak memory"] = _memory(run)
    return [Figure("audit stages: classic spark, in one process", records, run.seconds, "", 0.0, notes)]


CHECK_REPEATS = 5
"""How many times the model checker's small searches (and their floor) run; the fastest counts."""


_KERNEL_LINE = """
try:
    from statechan.kernel import active
except ImportError:  # a commit from before the compiled kernel
    active = lambda: "pure"
print(active())
"""
"""Printed by each script of :func:`against_baseline` before its figures: the kernel that ran."""

_CHECK_DEFAULT_BOUND = """
import json, sys, time
from statechan.checker import Bounds, check
from statechan.cluster.config import StoreKind
found = {}
for store in ("system-topic", "metadata-store"):
    best = None
    for _ in range(int(sys.argv[1])):
        started = time.process_time()
        result = check(Bounds(), StoreKind(store))
        spent = time.process_time() - started
        best = spent if best is None else min(best, spent)
    found[f"check: {store}, default bound"] = [result.states, best]
print(json.dumps(found))
"""
"""The checker at the default bound on both stores, fastest of N in process time: the same script
for this tree (each kernel) and for a baseline commit, each in its own interpreter (``--baseline``)."""

_SIMULATED_DAY = """
import json, sys, time
from statechan.cluster import SimConfig
from statechan.cluster.runner import Simulation, Workload
config = SimConfig(brokers=5, namespaces=10, bundles_per_namespace=100, seed=1, trace_views=False)
workload = Workload(crashes_per_hour=0.25, session_losses_per_hour=0.25, shutdowns_per_hour=0.1,
                    leader_changes_per_hour=0.1, transfers_per_hour=120, lookups_per_hour=3600)
best = None
for _ in range(int(sys.argv[1])):
    simulation = Simulation(config, workload)
    started = time.process_time()
    simulation.run(24 * 3_600_000)
    spent = time.process_time() - started
    best = spent if best is None else min(best, spent)
print(json.dumps({"simulated day": [len(simulation.cluster.history), best]}))
"""
"""The simulator's day of :func:`bench_simulate`, fastest of N in process time, for ``--baseline``."""

_HYPOTHESIS_BENCH = """
import json, sys, time
from hypothesis.stateful import run_state_machine_as_test
from properties.bench import SystemTopicBench
from properties.profiles import fixed
best, steps = None, [0]
class Counted(SystemTopicBench):
    def teardown(self):
        try:
            super().teardown()
        finally:
            steps[0] += len(self.cluster.history)
for _ in range(int(sys.argv[1])):
    steps[0] = 0
    started = time.process_time()
    run_state_machine_as_test(Counted, settings=fixed(max_examples=500, stateful_step_count=30))
    spent = time.process_time() - started
    best = spent if best is None else min(best, spent)
print(json.dumps({"hypothesis bench": [steps[0], best]}))
"""
"""The Hypothesis bench of :func:`bench_hypothesis` (500 derandomized examples of the system-topic
machine), fastest of N in process time, for ``--baseline``; it runs from the checkout, as the
bench's machines are on the test side."""


@contextlib.contextmanager
def baseline_tree(baseline: str) -> Iterator[tuple[Path, str]]:
    """The code at ``baseline`` (a git revision) checked out in a temporary worktree of this
    checkout, with its short commit; removed on leaving."""
    import shutil
    import tempfile

    root = Path(__file__).resolve().parent.parent
    folder = Path(tempfile.mkdtemp(prefix="statechan-baseline-"))
    tree = folder / "tree"
    added = subprocess.run(
        ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), baseline],
        capture_output=True,
        text=True,
        check=False,
    )
    if added.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise SystemExit(f"--baseline {baseline}: git could not check it out: {added.stderr.strip()}")
    try:
        yield tree, commit(tree)
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(folder, ignore_errors=True)


_KERNEL_NAMES = {"pure": "pure Python", "compiled": "compiled kernel (make compiled)"}


def against_baseline(baseline: str, script: str, what: str, rounds: int = 3, repeats: int = 3) -> list[Figure]:
    """``script`` (Python that prints ``{name: [items, seconds]}``, the fastest of ``argv[1]``
    repeats in process time) run at ``baseline``, in this checkout on the pure-Python kernel and,
    when ``make compiled`` built it, on the compiled kernel, in turn, ``rounds`` times; each side's
    best per name is kept, and each name on each kernel of this checkout becomes a figure."""
    from statechan.kernel import unusable

    root = Path(__file__).resolve().parent.parent
    sides: list[tuple[str, Path | None, str]] = [("baseline", None, "pure"), ("pure", root, "pure")]
    why_not = unusable()
    if why_not is None:
        sides.append(("compiled", root, "compiled"))
    else:
        print(f"--baseline: the compiled kernel is not measured: {why_not}", file=sys.stderr)
    best: dict[str, dict[str, list[float]]] = {side: {} for side, _, _ in sides}
    with baseline_tree(baseline) as (tree, sha):
        for _ in range(rounds):
            for side, path, kernel in sides:
                where = path or tree
                done = subprocess.run(
                    [sys.executable, "-c", _KERNEL_LINE + script, str(repeats)],
                    cwd=where,
                    env={**os.environ, "PYTHONPATH": str(where), "STATECHAN_KERNEL": kernel},
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    raise SystemExit(f"{what} at {side} ({where}) failed: {done.stderr.strip()[-2000:]}")
                ran, measured = done.stdout.strip().splitlines()[-2:]
                if ran != kernel:
                    raise SystemExit(f"{what} at {side} ran the {ran} kernel, not the {kernel} one")
                for name, (items, seconds) in json.loads(measured).items():
                    known = best[side].get(name)
                    if known is None or seconds < known[1]:
                        best[side][name] = [items, seconds]
    figures = []
    for side, _, _ in sides[1:]:
        for name, (items, seconds) in best[side].items():
            old_items, old_seconds = best["baseline"][name]
            figures.append(
                Figure(
                    f"{name}, {_KERNEL_NAMES[side]}, against commit {sha}",
                    int(items),
                    seconds,
                    f"{what} at {sha}, same work, same run",
                    old_seconds,
                    {
                        "items at the baseline": int(old_items),
                        "speed-up": f"{old_seconds / seconds:.2f}x",
                        "timed": f"process time, fastest of {repeats} in each of {rounds} rounds "
                        f"({', '.join(side for side, _, _ in sides)} in turn)",
                    },
                )
            )
    return figures


def bench_check_against(baseline: str, rounds: int = 3, repeats: int = 3) -> list[Figure]:
    """The checker at the default bound on both stores against the code at ``baseline``."""
    return against_baseline(baseline, _CHECK_DEFAULT_BOUND, "the checker", rounds, repeats)


def bench_check(baseline: str | None) -> list[Figure]:
    """The model checker at its documented small bounds: distinct states per second, and the
    broker-symmetry and partial-order reduction factors (each measured here, beside the search
    without it); with a ``baseline`` revision, the default bound on both stores against it too."""
    from statechan import kernel
    from statechan.checker import Bounds, check
    from statechan.cluster import Cluster, StoreKind

    small = Bounds()
    # a search of this bound takes about 0.15 s: each figure is the fastest of five (the same
    # states every time), so one scheduler hiccup does not decide it
    topic = min((check(small, por=True) for _ in range(CHECK_REPEATS)), key=lambda r: r.seconds)
    # the floor: as many plain simulator steps (random walks from a fresh cluster), no copies, no fingerprints
    config = topic.config()

    def step_floor() -> None:
        steps = 0
        while steps < topic.transitions:
            cluster = Cluster(config, picks=[])
            for depth in range(topic.depth):
                actions = cluster.enabled_actions()
                if not actions:
                    break
                with contextlib.suppress(ValueError):
                    cluster.step(actions[(steps + depth) % len(actions)])
                steps += 1

    floor = min(_timed(step_floor) for _ in range(CHECK_REPEATS))
    full = min((check(small, por=False) for _ in range(CHECK_REPEATS)), key=lambda r: r.seconds)
    three = Bounds(brokers=3, admin=0)
    # symmetry's factor without the partial-order reduction, as it has always been measured
    reduced = check(three, por=False)
    plain = check(three, symmetry=False, por=False)
    ample = check(three, por=True)
    store = check(small, StoreKind.metadata_store)
    return [
        Figure(
            "check: system topic, " + small.describe(),
            topic.states,
            topic.seconds,
            "as many simulator steps, uncopied",
            floor,
            {
                "transitions": topic.transitions,
                "depth": topic.depth,
                "complete": topic.complete,
                "timed": f"fastest of {CHECK_REPEATS} searches (and of {CHECK_REPEATS} floors)",
                "kernel": kernel.active(),
            },
        ),
        Figure(
            "check: system topic, same bound, partial-order reduction (the default) against none",
            topic.states,
            topic.seconds,
            "the same search without partial-order reduction",
            full.seconds,
            {
                "states without partial-order reduction": full.states,
                "reduction": f"{full.states / topic.states:.2f}x",
                "expanded through one delivery": topic.reduced,
                "same verdict": topic.ok == full.ok and topic.complete == full.complete,
            },
        ),
        Figure(
            "check: metadata store, same bound",
            store.states,
            store.seconds,
            notes={"transitions": store.transitions, "complete": store.complete},
        ),
        Figure(
            "check: system topic, " + three.describe(),
            reduced.states,
            reduced.seconds,
            "the same search without symmetry",
            plain.seconds,
            {
                "states without symmetry": plain.states,
                "symmetry reduction": f"{plain.states / reduced.states:.2f}x",
                "complete": reduced.complete and plain.complete,
            },
        ),
        Figure(
            "check: system topic, same 3-broker bound, partial-order reduction against none",
            ample.states,
            ample.seconds,
            "the same search without partial-order reduction",
            reduced.seconds,
            {
                "states without partial-order reduction": reduced.states,
                "reduction": f"{reduced.states / ample.states:.2f}x",
                "beside symmetry's": f"{plain.states / reduced.states:.2f}x",
                "same verdict": ample.ok == reduced.ok and ample.complete == reduced.complete,
            },
        ),
        *(bench_check_against(baseline) if baseline else []),
    ]


_CHECK_ONE = """
import json, sys, time
from statechan.checker import Bounds, check
bounds = Bounds.model_validate_json(sys.argv[1])
if sys.argv[2] == "compact":
    result = check(bounds)
    started = 0.0
else:
    from statechan.checker.sparksearch import check_on_spark, start_spark
    clock = time.perf_counter()
    spark, _ = start_spark("local[2]")
    started = time.perf_counter() - clock
    result = check_on_spark(bounds, spark=spark, small_level=int(sys.argv[3]), partitions=4)
    spark.stop()
print(json.dumps({"states": result.states, "seconds": result.seconds, "session": started, "ok": result.ok,
                  "disk_mb": result.disk_mb, "widest": max(result.levels), "levels": len(result.levels)}))
"""
"""One search in a fresh interpreter: the compact search, or the search on Spark ``local[2]`` with
levels past the given size each a job of its own."""

SPARK_CHECK_BOUND = {"brokers": 3, "admin": 0, "ticks": 1, "crashes": 1, "restarts": 1}
"""The bound the Spark search's cost is measured on: 3 brokers, a crash and a restart (16,008
states in 23 levels, the widest 1,650)."""
SPARK_CHECK_JOBS = 400
"""Levels past this many states each a Spark job of their own (as every level of a large bound);
the bound is also searched with every level in one task (no job's fixed cost, no shuffle)."""


BIG_BOUND_STATES = (40_000_000, 250_000_000)
"""The projected size of ``--brokers 3 --bundles 2 --lookups 2 --admin 1 --crashes 1 --restarts 1``
(docs/checker.md, Larger bounds): the range a cluster is sized for."""


def _cluster_needs(cpu_per_state: float, disk_per_state: float) -> str:
    """What a cluster needs for :data:`BIG_BOUND_STATES` at the measured CPU seconds and run-folder
    bytes a state, if the work divides over the cores as it does over two (not measured past two)."""
    low, high = BIG_BOUND_STATES
    hours = [n * cpu_per_state / 3600 for n in BIG_BOUND_STATES]
    return (
        f"{hours[0]:,.0f} to {hours[1]:,.0f} core-hours: on 32 cores {hours[0] / 32:,.1f} to {hours[1] / 32:,.1f} h, "
        f"on 128 cores {hours[0] / 128:,.1f} to {hours[1] / 128:,.1f} h; in one hour {hours[0]:,.0f} to "
        f"{hours[1]:,.0f} cores; run folder about {low * disk_per_state / 2**30:,.0f} to "
        f"{high * disk_per_state / 2**30:,.0f} GiB (the edges kept for the liveness check, "
        f"{disk_per_state:,.0f} bytes a state here); the driver's liveness arrays 50 to 130 bytes a state"
    )


WORKERS_BOUNDS: tuple[tuple[str, dict[str, int], int | None], ...] = (
    ("the default bound", {}, None),
    ("3 brokers", {"brokers": 3}, None),
    ("3 brokers, a crash and a restart, the first 60,000 states", {"brokers": 3, "crashes": 1, "restarts": 1}, 60_000),
)
"""The bounds ``--workers 2`` is measured on (bounds' fields; a state bound where the search is long)."""


def bench_check_workers(rounds: int = 5) -> list[Figure]:
    """The compact search with two worker processes against the same search in one, on each of
    :data:`WORKERS_BOUNDS`, back to back in alternating rounds; the search's own wall time (workers
    started included), the fastest of ``rounds`` each. Workers only pay on as many idle cores."""
    from statechan.checker import Bounds, check

    figures: list[Figure] = []
    for label, fields, cap in WORKERS_BOUNDS:
        bounds = Bounds(**fields)
        limit = {} if cap is None else {"max_states": cap}
        one = two = float("inf")
        states = (0, 0)
        for _ in range(rounds):
            single = check(bounds, workers=1, **limit)  # type: ignore[arg-type]
            double = check(bounds, workers=2, **limit)  # type: ignore[arg-type]
            states = (single.states, double.states)
            one, two = min(one, single.seconds), min(two, double.seconds)
        # what two cores give this work at most: two independent searches at once, each in one process
        together = min(max(_searches_at_once(bounds, cap or 1_000_000, 2)) for _ in range(rounds))
        figures.append(
            Figure(
                f"check --workers 2: {label}",
                states[1],
                two,
                "the same search in one process, same run",
                one,
                {
                    "speed-up": f"{one / two:.2f}x",
                    "same states": states[0] == states[1],
                    "cores": os.cpu_count() or 1,
                    "two searches at once": f"{together:.3f} s each (at most {2 * one / together:.2f}x from two cores)",
                    "timed": f"wall time of the search, fastest of {rounds} in alternating rounds",
                },
            )
        )
    return figures


def _searches_at_once(bounds: Any, max_states: int, count: int) -> list[float]:
    """The wall times of ``count`` independent one-process searches of ``bounds`` run at the same
    time (forked processes): how much slower each runs when the cores are all busy."""
    import multiprocessing

    from statechan.checker import check

    def one(pipe: Any) -> None:
        pipe.send(check(bounds, workers=1, max_states=max_states).seconds)

    context = multiprocessing.get_context("fork")
    pipes, processes = [], []
    for _ in range(count):
        mine, theirs = context.Pipe()
        process = context.Process(target=one, args=(theirs,))
        process.start()
        pipes.append(mine)
        processes.append(process)
    seconds = [float(pipe.recv()) for pipe in pipes]
    for process in processes:
        process.join()
    return seconds


def bench_check_spark(rounds: int = 2) -> list[Figure]:
    """The search on Spark ``local[2]`` against the compact search in one process, on
    :data:`SPARK_CHECK_BOUND`, alternating ``rounds`` times; Spark's fixed cost measured on a
    bound of one level (no lookups, no admin, no ticks: 29 states) and taken off its CPU seconds."""
    from statechan.checker import Bounds

    bound = Bounds(**SPARK_CHECK_BOUND).model_dump_json()
    tiny = Bounds(admin=0, ticks=0).model_dump_json()

    def run(bounds: str, engine: str, jobs: int = SPARK_CHECK_JOBS) -> tuple[Measured, dict[str, Any]]:
        command = ["nice", "-n", "10", sys.executable, "-c", _CHECK_ONE, bounds, engine, str(jobs)]
        measured = _measure(command)
        return measured, json.loads(measured.output.strip().splitlines()[-1])

    compact: list[tuple[Measured, dict[str, Any]]] = []
    spark: list[tuple[Measured, dict[str, Any]]] = []
    tasks: list[tuple[Measured, dict[str, Any]]] = []
    fixed: list[tuple[Measured, dict[str, Any]]] = []
    loads: list[float] = []
    for _ in range(rounds):
        loads.append(os.getloadavg()[0])
        compact.append(run(bound, "compact"))
        spark.append(run(bound, "spark"))
        tasks.append(run(bound, "spark", 1_000_000))
        fixed.append(run(tiny, "spark", 0))
    states = spark[0][1]["states"]
    if any(found["states"] != states for _, found in compact + spark + tasks):
        raise RuntimeError("the Spark search and the compact search found different states")
    best_compact = min(compact, key=lambda pair: pair[0].tree_cpu_seconds)
    best_spark = min(spark, key=lambda pair: pair[0].tree_cpu_seconds)
    best_tasks = min(tasks, key=lambda pair: pair[0].tree_cpu_seconds)
    overhead = min(m.tree_cpu_seconds for m, _ in fixed)
    per_state_spark = (best_spark[0].tree_cpu_seconds - overhead) / states
    per_state_compact = best_compact[0].tree_cpu_seconds / states
    notes: dict[str, object] = {
        "bound": Bounds(**SPARK_CHECK_BOUND).describe(),
        "levels, widest": f"{best_spark[1]['levels']}, {best_spark[1]['widest']:,} states",
        "search seconds, Spark / compact (each round)": " ; ".join(
            f"{s[1]['seconds']:.1f} / {c[1]['seconds']:.1f}" for s, c in zip(spark, compact, strict=True)
        ),
        "tree CPU seconds, Spark / compact / Spark's fixed cost (each round)": " ; ".join(
            f"{s[0].tree_cpu_seconds:.1f} / {c[0].tree_cpu_seconds:.1f} / {f[0].tree_cpu_seconds:.1f}"
            for s, c, f in zip(spark, compact, fixed, strict=True)
        ),
        "every level in one task: search seconds / tree CPU seconds (each round)": " ; ".join(
            f"{t[1]['seconds']:.1f} / {t[0].tree_cpu_seconds:.1f}" for t in tasks
        ),
        "CPU ms a state, Spark (fixed cost off) / compact": (
            f"{per_state_spark * 1e3:.2f} / {per_state_compact * 1e3:.2f}"
        ),
        "Spark's run folder at most (MiB)": f"{best_spark[1]['disk_mb']:.1f}",
        "the 3 brokers x 2 bundles bound (40 to 250 million states), at this CPU a state": _cluster_needs(
            per_state_spark, best_spark[1]["disk_mb"] * 2**20 / states
        ),
        "load average (1 min) before each round": ", ".join(f"{x:.1f}" for x in loads),
        "peak RSS by role (MB)": _memory(best_spark[0]),
    }
    return [
        Figure(
            "check --spark local[2], CPU s of the states",
            states,
            best_spark[0].tree_cpu_seconds - overhead,
            "compact search, one process, CPU s",
            best_compact[0].tree_cpu_seconds,
            notes,
        ),
        Figure(
            "check --spark, levels in one task, CPU s",
            states,
            best_tasks[0].tree_cpu_seconds - overhead,
            "compact search, one process, CPU s",
            best_compact[0].tree_cpu_seconds,
        ),
        Figure(
            "check --spark local[2], search seconds",
            states,
            best_spark[1]["seconds"],
            "compact search, one process, search seconds",
            best_compact[1]["seconds"],
        ),
    ]


def bench_generate(records: int) -> list[Figure]:
    """The trace generator on every core against one worker, on the same Parquet trace (the file is
    the same whatever the number of workers). ``--generate-records`` sets the size (default 10M;
    issue 27 asks 100M in under 10 minutes)."""
    import tempfile

    from statechan.tracegen import timed_generation

    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(dir=os.environ.get("STATECHAN_BENCH_DIR")) as folder:
        one = timed_generation(os.path.join(folder, "one.parquet"), records, seed=1, workers=1)
        os.remove(one.path)
        every = timed_generation(os.path.join(folder, "every.parquet"), records, seed=1, workers=cores)
    return [
        Figure(
            f"generate a Parquet trace, {cores} workers",
            every.records,
            every.seconds,
            "one worker",
            one.seconds,
            {"peak RSS, writer / worker (MB)": f"{every.writer_peak_mb} / {every.worker_peak_mb}"},
        )
    ]


def bench_balance(count: int) -> list[Figure]:
    """The load-balance lab's default workload (136 brokers, 10 simulated hours): balancer-only,
    through the channel, and its Spark sweep beside a one-process loop (statechan.balance.bench)."""
    from statechan.balance.bench import bench_balance as measure

    return measure(count)


BENCHMARKS: dict[str, Callable[[Any], list[Figure]]] = {  # every key is an engine of statechan.benchharness
    "balance": bench_balance,
    "generate": bench_generate,
    "audit": bench_audit,
    "audit-scale": bench_audit_scale,
    "audit-stages": bench_audit_stages,
    "check": bench_check,
    "check-spark": bench_check_spark,
    "check-workers": bench_check_workers,
    "resolver": bench_resolver,
    "replay": bench_replay,
    "simulate": bench_simulate,
    "hypothesis": bench_hypothesis,
}


DEFAULT_RESULTS = Path("docs/benchmarks.json")
DEFAULT_PAGE = Path("docs/benchmarks.md")


def _size(name: str, args: argparse.Namespace) -> Any:
    return {
        "audit": args.audit_records[0],
        "audit-stages": args.audit_records[0],
        "audit-scale": args.audit_records,
        "generate": args.generate_records,
        "check": args.baseline,
        "check-spark": 2,
        "check-workers": 5,
        "simulate": args.baseline,
        "hypothesis": args.baseline,
    }.get(name, args.pairs)


def _size_text(name: str, size: Any) -> str:
    if isinstance(size, list):
        return ", ".join(f"{n:,}" for n in size) + " records"
    if name in ("resolver",):
        return f"{size:,} pairs"
    if name in ("replay", "audit", "audit-stages", "generate"):
        return f"{size:,} records"
    return "fixed workload"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statechan.bench", description=__doc__)
    parser.add_argument("--only", choices=sorted(BENCHMARKS), action="append", help="run only these benchmarks")
    parser.add_argument(
        "--pairs", type=int, default=1_000_000, help="resolver pairs / log records per benchmark (default 1,000,000)"
    )
    parser.add_argument(
        "--audit-records",
        type=int,
        nargs="+",
        default=[10_000_000],
        metavar="N",
        help="records in the audit benchmark's trace (default 10M); audit-scale takes several sizes "
        "(e.g. 10000000 30000000 100000000)",
    )
    parser.add_argument(
        "--generate-records", type=int, default=10_000_000, help="records the generator benchmark writes (default 10M)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--markdown",
        metavar="PAGE",
        nargs="?",
        const=str(DEFAULT_PAGE),
        help=f"store each engine's run in the results file and write the page from it (default {DEFAULT_PAGE})",
    )
    parser.add_argument(
        "--results",
        metavar="FILE",
        default=str(DEFAULT_RESULTS),
        help=f"the results file --markdown keeps (default {DEFAULT_RESULTS})",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="check, simulate, hypothesis: also measure the checker at the default bound on both stores, the "
        "simulated day and the Hypothesis bench against the code at this git revision (checked out in a "
        "temporary worktree, the two run alternately)",
    )
    parser.add_argument(
        "--render", action="store_true", help="measure nothing: write the page (--markdown) from the results file"
    )
    args = parser.parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # each figure as it comes, also into a log file
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if args.render and not args.markdown:
        parser.error("--render writes the page: give --markdown too")
    results_path, page = Path(args.results), Path(args.markdown) if args.markdown else None
    stored = load_results(results_path) if page is not None else {"engines": {}}
    info = machine()
    words = argv if argv is not None else sys.argv[1:]
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['implementation']} {info['python']}")
    print(f"command: python -m statechan.bench {' '.join(words)}".rstrip())
    results: dict[str, list[dict[str, object]]] = {}
    for name in (
        [] if args.render else args.only or sorted(set(BENCHMARKS) - {"audit-scale", "audit-stages", "check-spark"})
    ):
        print(f"\n[{name}]")
        size = _size(name, args)
        run = run_info(_engine_command(name, args), _size_text(name, size))
        figures = BENCHMARKS[name](size)
        for figure in figures:
            print(figure.line())
            for key, value in figure.notes.items():
                print(f"    {key}: {value}")
        results[name] = [asdict(f) | {"rate": f.rate, "ratio": f.ratio} for f in figures]
        if page is not None:  # each engine as it finishes: a long run interrupted keeps the rest
            record(stored, name, run, figures)
            save_results(results_path, stored)
            page.write_text(render(stored), encoding="utf-8")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"machine": info, "results": results}, out, indent=2)
    if page is not None:
        page.write_text(render(stored), encoding="utf-8")
        print(f"\nwritten to {page} (from {results_path})")
    return 0


def _engine_command(name: str, args: argparse.Namespace) -> str:
    """The command that measures ``name`` alone with this run's sizes."""
    words = ["python -m statechan.bench --only", name]
    if name in ("resolver", "replay") and args.pairs != 1_000_000:
        words.append(f"--pairs {args.pairs}")
    if name in ("audit", "audit-stages", "audit-scale") and args.audit_records != [10_000_000]:
        words.append("--audit-records " + " ".join(str(n) for n in args.audit_records))
    if name in ("check", "simulate", "hypothesis") and args.baseline:
        words.append(f"--baseline {args.baseline}")
    if name == "generate" and args.generate_records != 10_000_000:
        words.append(f"--generate-records {args.generate_records}")
    return " ".join(words)


if __name__ == "__main__":
    raise SystemExit(main())
