"""Local Spark servers started from the installed PySpark's own scripts: a standalone cluster (a
master and two workers as separate JVMs, for the tests that need a real cluster) and a Spark
Connect server (for the benchmark of ``statechan audit --remote``). Each listens on loopback and a
free port, keeps its work and logs in a temporary folder, and is stopped afterwards whatever happens."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path


def _free_port() -> int:
    """A port nobody listens on now (the kernel picks it), for a server this module starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


START_TIMEOUT_S = 90.0
WORKER_MEMORY = "1g"
"""Each worker's memory for executors: one executor of :data:`EXECUTOR_MEMORY` fits."""
EXECUTOR_MEMORY = "768m"


class SparkClusterUnavailable(RuntimeError):
    """Why the tests that need a real Spark cluster are skipped."""


@dataclass(frozen=True)
class SparkCluster:
    master: str
    """``spark://127.0.0.1:PORT``."""
    ui: str
    """The master's web UI, whose ``/json/`` lists the workers."""
    folder: Path

    def session_conf(self) -> dict[str, str]:
        """What a driver needs to run on this cluster: loopback, one core per executor, memory
        that fits a worker."""
        return {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            "spark.local.dir": str(self.folder / "driver-local"),
        }


def spark_home() -> Path:
    """The pip-installed PySpark is a Spark distribution: its package folder has bin/ and jars/."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def alive_workers(ui: str) -> int:
    """How many workers the master lists as ALIVE (0 while its UI does not answer yet)."""
    try:
        with urllib.request.urlopen(f"{ui}/json/", timeout=2.0) as answer:
            state = json.load(answer)
    except (urllib.error.URLError, OSError, ValueError):
        return 0
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


def python_without_statechan(folder: Path) -> Path:
    """An interpreter for the executors that sees the dependencies but not this checkout (``-S``:
    no .pth file puts it on the path; run from an empty folder), as on a node without statechan."""
    empty = folder / "empty"
    empty.mkdir()
    script = folder / "python-without-statechan"
    site = sysconfig.get_paths()["purelib"]
    script.write_text(
        f'#!/bin/sh\ncd "{empty}"\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec "{sys.executable}" -S "$@"\n'
    )
    script.chmod(0o755)
    return script


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-600:].strip()
    except OSError:
        return "(no log)"


@contextmanager
def foreground(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """One daemon in the foreground of a process group of its own, which is ended at the end: the
    daemon and whatever it started (a worker's executors and their Python workers)."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield process
        finally:
            for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, None)):
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
                try:
                    process.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue


@contextmanager
def spark_cluster(workers: int = 2) -> Iterator[SparkCluster]:
    """Start a master and ``workers`` workers (1 core each); yield once all have registered."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkClusterUnavailable("no java on PATH and no JAVA_HOME (make java installs a JDK 17)")
    home = spark_home()
    spark_class = home / "bin" / "spark-class"
    if not spark_class.exists():
        raise SparkClusterUnavailable(f"{spark_class} is missing from the installed PySpark")
    folder = Path(tempfile.mkdtemp(prefix="statechan-spark-"))
    (folder / "driver-local").mkdir()
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(folder / "logs"),
        SPARK_PID_DIR=str(folder),
        SPARK_WORKER_DIR=str(folder / "work"),
        SPARK_LOCAL_DIRS=str(folder / "local"),
        SPARK_NO_DAEMONIZE="1",
        SPARK_DAEMON_MEMORY="256m",  # the master's and the workers' own heaps, not the executors'
    )
    port, ui_port = _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    ui = f"http://127.0.0.1:{ui_port}"
    daemon = [str(spark_class)]
    master_args = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)]

    def worker_args(n: int) -> list[str]:
        ports = ["--port", str(_free_port()), "--webui-port", str(_free_port())]
        work = ["--work-dir", str(folder / f"work-{n}")]
        return ["--host", "127.0.0.1", *ports, "--cores", "1", "--memory", WORKER_MEMORY, *work, master]

    try:
        with ExitStack() as stack:
            processes = [
                stack.enter_context(
                    foreground(
                        [*daemon, "org.apache.spark.deploy.master.Master", *master_args],
                        env,
                        folder / "master.log",
                    )
                )
            ]
            for n in range(workers):
                processes.append(
                    stack.enter_context(
                        foreground(
                            [*daemon, "org.apache.spark.deploy.worker.Worker", *worker_args(n)],
                            env,
                            folder / f"worker-{n}.log",
                        )
                    )
                )
            deadline = time.monotonic() + START_TIMEOUT_S
            while alive_workers(ui) < workers:
                stopped = [p for p in processes if p.poll() is not None]
                if stopped or time.monotonic() > deadline:
                    why = "a daemon exited" if stopped else f"not {workers} workers after {START_TIMEOUT_S:.0f} s"
                    logs = " | ".join(f"{log.name}: {_tail(log)}" for log in sorted(folder.glob("*.log")))
                    raise SparkClusterUnavailable(f"the cluster did not start at {master} ({why}): {logs}")
                time.sleep(0.5)  # between polls of the master's UI; the bound is the deadline above
            yield SparkCluster(master, ui, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _connect_answers(port: int) -> bool:
    """The server listens once its gRPC port accepts a connection."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def connect_server(master: str = "local[2]", memory: str = "2g") -> Iterator[str]:
    """A Spark Connect server started by the installed PySpark's own script
    (``sbin/start-connect-server.sh --wait``: in the foreground, so it is ended with its process
    group) on loopback and a free port, on ``master``; yields its ``sc://`` URL. Its Python workers
    run this interpreter, so they import this checkout."""
    with connect_server_process(master, memory) as (url, _):
        yield url


@contextmanager
def connect_server_process(master: str = "local[2]", memory: str = "2g") -> Iterator[tuple[str, int]]:
    """:func:`connect_server`, yielding its URL and the process id its JVM and workers run under
    (``memory``: the server's driver memory; shuffles in as many partitions as this machine's cores,
    as the auditor's own sessions)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkClusterUnavailable("no java on PATH and no JAVA_HOME (make java installs a JDK 17)")
    home = spark_home()
    script = home / "sbin" / "start-connect-server.sh"
    if not script.exists() or not any(home.glob("jars/spark-connect_*.jar")):
        raise SparkClusterUnavailable(f"the installed PySpark ships no Connect server ({script}, jars/spark-connect_*)")
    folder = Path(tempfile.mkdtemp(prefix="statechan-connect-"))
    port = _free_port()
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(folder),
        SPARK_LOG_DIR=str(folder / "logs"),
        SPARK_PID_DIR=str(folder),
        SPARK_IDENT_STRING=f"statechan-{os.getpid()}",
    )
    env.setdefault("PYSPARK_PYTHON", sys.executable)  # the server's Python workers: this interpreter's packages
    command = ["bash", str(script), "--wait", "--master", master]
    command += ["--conf", f"spark.connect.grpc.binding.port={port}"]
    command += ["--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=false"]
    command += ["--conf", f"spark.driver.memory={memory}"]
    command += ["--conf", f"spark.sql.shuffle.partitions={max(2, os.cpu_count() or 2)}"]
    command += ["--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.driver.host=127.0.0.1"]
    try:
        with foreground(command, env, folder / "connect.log") as process:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _connect_answers(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SparkClusterUnavailable(
                        f"the Connect server did not listen on 127.0.0.1:{port}: {_tail(folder / 'connect.log')}"
                    )
                time.sleep(0.5)  # between connection attempts; the bound is the deadline above
            yield f"sc://127.0.0.1:{port}", process.pid
    finally:
        shutil.rmtree(folder, ignore_errors=True)
