"""A real ZooKeeper server for tests: Debian's package (``make test`` installs it), standalone,
listening on loopback only on a free port, its data in a temporary folder, stopped afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ZK_SERVER = Path("/usr/share/zookeeper/bin/zkServer.sh")
START_TIMEOUT_S = 60.0


class ZooKeeperUnavailable(RuntimeError):
    """Why the tests that need a real ZooKeeper are skipped."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    """ZooKeeper's ``ruok`` four-letter word is off by default; a session handshake is the test."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=2.0)
    try:
        client.start(timeout=2.0)
    except KazooTimeoutError:
        return False
    finally:
        client.stop()
        client.close()
    return True


@contextmanager
def zookeeper_server() -> Iterator[str]:
    """Start a server; yields its connect string; stops it and removes its data afterwards."""
    if not ZK_SERVER.exists():
        raise ZooKeeperUnavailable(f"{ZK_SERVER} is missing (make test installs Debian's zookeeper package)")
    if shutil.which("java") is None:
        raise ZooKeeperUnavailable("no java on PATH")
    folder = Path(tempfile.mkdtemp(prefix="statechan-zk-"))
    port = _free_port()
    (folder / "data").mkdir()
    (folder / "zoo.cfg").write_text(
        "\n".join(
            [
                "tickTime=500",
                f"dataDir={folder / 'data'}",
                f"clientPort={port}",
                "clientPortAddress=127.0.0.1",
                "admin.enableServer=false",
                "maxSessionTimeout=60000",
                "4lw.commands.whitelist=",
                "",
            ]
        )
    )
    (folder / "log4j.properties").write_text("log4j.rootLogger=WARN, CONSOLE\n")
    env = dict(os.environ, ZOOCFGDIR=str(folder), ZOO_LOG_DIR=str(folder), ZOO_LOG4J_PROP="WARN,CONSOLE")
    log = open(folder / "server.log", "wb")  # noqa: SIM115 - open for the server's whole life, closed below
    process = subprocess.Popen(
        [str(ZK_SERVER), "start-foreground", str(folder / "zoo.cfg")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "server.log").read_text(errors="replace")[-400:]
                raise ZooKeeperUnavailable(f"the server did not start on 127.0.0.1:{port}: {tail.strip()}")
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
