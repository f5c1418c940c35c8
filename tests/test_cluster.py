"""python -m verify.study on a Ray cluster a user joins (issue 21): a head and a worker node
started with `ray start` on this machine, on 127.0.0.1 alone, with Ray's token
authentication; a driver without the token refused in one line; --gpus-per-run beyond the
cluster refused; a worker node lost mid-study (its runs stored as failed, the others done,
--retry-failed completing them on the head); and the local cluster `run` starts on 127.0.0.1.

The tests stop only the processes they started: each `ray start --block` runs in its own
session, and teardown signals that session's processes (never `ray stop`, which stops every
Ray process on the machine)."""

import ipaddress
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.test_study import tiny_study
from verify.studies import commands as study
from verify.studies.store import RunStore, StoreError

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
# What a process inherits from the test run that would change how Ray starts or joins.
RAY_SETTINGS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_START_HOOK", "RAY_TMPDIR")
# A `ray start` hook (RAY_START_HOOK) for the worker node. On Linux Ray replaces 127.0.0.1 in
# --node-ip-address and in --address by the machine's network address, and its one switch to
# keep a node on 127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which the head uses) makes
# `ray start --address` refuse to join. The hook keeps both as given.
HOOK = '''
def loopback(ray_params, head):
    from ray._private import services

    services.resolve_ip_for_localhost = lambda host: host
    ray_params.node_ip_address = "127.0.0.1"
'''
# The GCS declares a node dead after this many failed health checks a second apart (Ray's
# defaults take about 15 s): set on the head, for the test of a node lost mid-study.
HEALTH_CHECKS = dict(RAY_health_check_period_ms="1000", RAY_health_check_timeout_ms="2000",
                     RAY_health_check_failure_threshold="5")
# Six runs of a few seconds each: with one CPU on each node, some are in flight on the worker.
SLOW_RUNS = 6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in RAY_SETTINGS}
    return env | {"RAY_USAGE_STATS_ENABLED": "0"} | extra


def processes() -> dict[int, tuple[int, int, str]]:
    """Every process: pid → (parent pid, session id, first word of its command line)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(name)] = (int(fields[1]), int(fields[3]), cmd)
    return out


def session(leader: int) -> list[int]:
    """The processes of the session `leader` started (Ray's workers have their own process
    group, but keep the session)."""
    return [pid for pid, (_, sid, _) in processes().items() if sid == leader]


def descendants(root: int) -> dict[int, str]:
    procs = processes()
    out, todo = {}, [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _, cmd) in procs.items():
            if ppid == parent and pid not in out:
                out[pid] = cmd
                todo.append(pid)
    return out


def listening(pids) -> set[tuple[str, int]]:
    """The TCP addresses (address, port) the processes `pids` listen on, from /proc."""
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        inodes |= {int(link[8:-1]) for link in links if link.startswith("socket:[")}
    out = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or int(fields[9]) not in inodes:  # 0A: LISTEN
                continue
            host, port = fields[1].split(":")
            raw = b"".join(bytes.fromhex(host[i:i + 8])[::-1] for i in range(0, len(host), 8))
            address = ipaddress.ip_address(raw)
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            out.add((str(address), int(port, 16)))
    return out


def gcs_nodes(port: int, token: str) -> list[tuple[str, str]]:
    """(address, state) of every node the cluster's GCS knows."""
    import grpc
    from ray.core.generated import gcs_pb2, gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
            gcs_service_pb2.GetAllNodeInfoRequest(), timeout=5,
            metadata=[("authorization", f"Bearer {token}")])
    return [(n.node_manager_address, gcs_pb2.GcsNodeInfo.GcsNodeState.Name(n.state))
            for n in reply.node_info_list]


def wait_for(what: str, check, timeout: float, every: float = 0.2):
    """Poll `check` until it is truthy. A GCS that refuses a connection counts as "not yet"
    (seen once in CI: the head had printed "Ray runtime started" and its GCS port refused the
    first call); one that never answers still fails, at the deadline, naming the last error."""
    import grpc

    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            found = check()
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            found, last = None, e.details()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                         + (f" (last: {last})" if last else ""))


def stop(proc: subprocess.Popen) -> None:
    """End the session `proc` leads: SIGTERM to `ray start --block` (which stops its node),
    then SIGKILL to whatever of the session is left."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + 10
    while session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    kill_session(proc.pid)
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def kill_session(leader: int) -> None:
    for pid in session(leader):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class Cluster:
    port: int
    token: str
    folder: Path
    head: subprocess.Popen | None = None
    worker: subprocess.Popen | None = None
    logs: list = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self, **extra) -> dict:
        """A driver's environment that has the cluster's token."""
        return clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, **extra)

    def start(self, name: str, argv: list[str], env: dict) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "w")  # noqa: SIM115 - closed in teardown
        self.logs.append(log)
        return subprocess.Popen([str(RAY), "start", *argv, "--num-cpus", "1", "--num-gpus", "0",
                                 "--disable-usage-stats", "--temp-dir", str(self.folder / name), "--block"],
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
                                start_new_session=True)

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def cluster():
    """A head and a worker node on 127.0.0.1, one CPU each, with token authentication."""
    if not RAY.is_file():
        pytest.skip(f"no `ray` command beside {sys.executable}")
    folder = Path(tempfile.mkdtemp(prefix="rayc"))  # short: Ray's socket paths must fit in 107 characters
    (folder / "hook").mkdir()
    (folder / "hook" / "loopback_hook.py").write_text(HOOK)
    c = Cluster(free_port(), secrets.token_hex(32), folder)
    try:
        token = dict(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=c.token)
        c.head = c.start("head", ["--head", "--node-ip-address", "127.0.0.1", "--port", str(c.port),
                                  "--ray-client-server-port", str(free_port()),
                                  "--include-dashboard", "false"],
                         clean_env(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", **token, **HEALTH_CHECKS))
        wait_for("the head", lambda: c.head.poll() is not None or "Ray runtime started" in c.log("head"), 60)
        assert c.head.poll() is None, c.log("head")
        c.worker = c.start("worker", ["--address", c.address],
                           clean_env(RAY_START_HOOK="loopback_hook.loopback", PYTHONPATH=str(folder / "hook"),
                                     **token))
        wait_for("two nodes", lambda: c.worker.poll() is not None
                 or [s for _, s in gcs_nodes(c.port, c.token)].count("ALIVE") == 2, 60)
        assert c.worker.poll() is None, c.log("worker")
        yield c
    finally:
        for proc in (c.worker, c.head):
            if proc is not None:
                stop(proc)
        for log in c.logs:
            log.close()
        shutil.rmtree(folder, ignore_errors=True)


def verify_study(*argv, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verify.study", "run", *map(str, argv), "--no-progress"],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "gcs_client" not in proc.stderr and not proc.stdout, proc.stderr
    return proc.stderr


# ----------------------------------------------------------------------------- the cluster

def test_both_nodes_are_on_127_0_0_1_and_listen_there_alone(cluster):
    assert sorted(gcs_nodes(cluster.port, cluster.token)) == [("127.0.0.1", "ALIVE")] * 2
    for node in (cluster.head, cluster.worker):
        bound = listening(session(node.pid))
        assert bound and {host for host, _ in bound} == {"127.0.0.1"}, bound
    assert ("127.0.0.1", cluster.port) in listening(session(cluster.head.pid))


def test_a_driver_without_the_token_is_refused_at_once_in_one_line(cluster, tmp_path):
    """No RAY_AUTH_MODE, no token anywhere (an empty home): exit 2 before any work, one line
    that says what to set, instead of 20 s of gcs_client warnings."""
    (tmp_path / "home").mkdir()
    start = time.monotonic()
    proc = verify_study(tiny_study(tmp_path), "--scale", "paper", "--address", cluster.address,
                        "--out", tmp_path / "out", env=clean_env(HOME=str(tmp_path / "home")))
    err = one_line(proc)
    assert time.monotonic() - start < 15
    assert (f"--address {cluster.address}: the cluster requires Ray token authentication: set "
            "RAY_AUTH_MODE=token and give the cluster's token") in err and "RAY_AUTH_TOKEN" in err, err
    assert not (tmp_path / "out" / "study.sqlite").exists()


@pytest.mark.parametrize("setting,message", [
    ("file", "the cluster requires Ray token authentication: set RAY_AUTH_MODE=token (Ray then sends the "
             "token in HOME/.ray/auth_token;"),
    ("wrong", "the cluster rejects the Ray token in RAY_AUTH_TOKEN: give the cluster's token"),
    ("mode", "RAY_AUTH_MODE=token but there is no Ray token in HOME/.ray/auth_token: give"),
    ("path", "RAY_AUTH_MODE=token but there is no Ray token in HOME/missing (named by RAY_AUTH_TOKEN_PATH)"),
])
def test_each_token_mistake_is_named(cluster, tmp_path, monkeypatch, capsys, setting, message):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    for name in RAY_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    if setting == "file":  # the right token in the file, but RAY_AUTH_MODE unset: Ray would not send it
        (home / ".ray" / "auth_token").write_text(cluster.token + "\n")
    elif setting == "wrong":
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        monkeypatch.setenv("RAY_AUTH_TOKEN", "0" * 64)
    elif setting == "mode":
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(home / "missing"))
    out = tmp_path / "out"
    argv = ["run", tiny_study(tmp_path), "--scale", "paper", "--address", cluster.address, "--out", str(out)]
    assert study.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.replace("HOME", str(home)) in err, err
    assert not (out / "study.sqlite").exists()


def test_the_token_in_the_environment_just_works_and_gpus_beyond_the_cluster_are_refused(cluster, tmp_path):
    proc = verify_study(tiny_study(tmp_path, seeds="[1]"), "--scale", "paper", "--address", cluster.address,
                        "--out", tmp_path / "out", "--json", env=cluster.env())
    assert proc.returncode == 0, proc.stderr
    with RunStore(tmp_path / "out" / "study.sqlite", readonly=True) as store:
        assert [r["status"] for r in store.rows()] == ["done"]
    proc = verify_study(tiny_study(tmp_path, seeds="[2]"), "--scale", "paper", "--address", cluster.address,
                        "--out", tmp_path / "gpu", "--gpus-per-run", "0.5", env=cluster.env())
    err = one_line(proc)
    assert (f"--gpus-per-run 0.5: the cluster at {cluster.address} has 0 GPUs; a run needs 0.5 on one node"
            in err), err
    assert not (tmp_path / "gpu" / "study.sqlite").exists()


# ----------------------------------------------------------------------------- a node lost mid-study

def slow_study(tmp_path: Path) -> str:
    return tiny_study(tmp_path, seeds=str(list(range(1, SLOW_RUNS + 1))), steps=3000, name="slow.yaml")


def tasks_started(folder: Path) -> int:
    """Tasks the node whose Ray folder is `folder` has started: Ray writes a line
    `:task_name:run_one` to the worker's log as each task begins."""
    return sum(path.read_text(errors="replace").count(":task_name:run_one")
               for path in folder.glob("session_latest/logs/worker-*.err"))


def store_rows(db: Path) -> dict[str, dict]:
    if not db.is_file():
        return {}
    try:
        with RunStore(db, readonly=True) as store:
            return {r["key"]: r for r in store.rows()}
    except (sqlite3.OperationalError, StoreError):  # created (0 bytes) but not yet its table
        return {}


def test_a_worker_node_lost_mid_study_fails_its_runs_alone_and_retry_failed_completes_them(cluster, tmp_path):
    """SIGKILL to the worker node's raylet as a run begins there, after another is done: the
    study ends (exit 0: a failed run is stored, not fatal), every run is done with its report
    or failed with its error, the runs done before the loss keep their results, and
    --retry-failed runs the lost ones on the head."""
    path, out = slow_study(tmp_path), tmp_path / "out"
    db = out / "study.sqlite"
    log = open(tmp_path / "driver.log", "w")  # noqa: SIM115
    driver = subprocess.Popen([sys.executable, "-m", "verify.study", "run", path, "--scale", "paper",
                               "--address", cluster.address, "--out", str(out), "--no-progress"],
                              env=cluster.env(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        worker_folder = cluster.folder / "worker"
        seen, done_before = tasks_started(worker_folder), None

        def a_run_begins_on_the_worker_after_one_is_done():
            nonlocal seen
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            now = tasks_started(worker_folder)
            begun, seen = now > seen, now
            done = {k: r for k, r in store_rows(db).items() if r["status"] == "done"}
            return done if begun and done else None

        done_before = wait_for("a run to begin on the worker node after one is done",
                               a_run_begins_on_the_worker_after_one_is_done, 90, every=0.05)
        raylet = [pid for pid, cmd in descendants(cluster.worker.pid).items() if cmd.endswith("/raylet")]
        assert len(raylet) == 1, descendants(cluster.worker.pid)
        os.kill(raylet[0], signal.SIGKILL)
        assert driver.wait(timeout=90) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=10)
        kill_session(driver.pid)
        log.close()
    assert cluster.worker.wait(timeout=30) is not None  # its `ray start` ended with its raylet

    rows = store_rows(db)
    assert len(rows) == SLOW_RUNS
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    failed = [r for r in rows.values() if r["status"] == "failed"]
    assert failed and all(r["status"] in ("done", "failed") for r in rows.values())
    for r in rows.values():
        if r["status"] == "done":
            assert r["report"]["rows"] and r["error"] is None and r["code_fingerprint"]
        else:
            assert r["report"] is None and "NodeDiedError" in r["error"], r["error"]
    for key, before in done_before.items():
        assert rows[key]["status"] == "done" and rows[key]["report"] == before["report"]

    # The driver knows at once; the GCS once the node's health checks fail (HEALTH_CHECKS). Then
    # the head is the cluster's one node, and --retry-failed runs the lost runs there.
    wait_for("the GCS to mark the worker node dead",
             lambda: sorted(s for _, s in gcs_nodes(cluster.port, cluster.token)) == ["ALIVE", "DEAD"], 60)
    retried = verify_study(path, "--scale", "paper", "--address", cluster.address, "--out", out,
                           "--retry-failed", env=cluster.env(), timeout=90)
    assert retried.returncode == 0, retried.stderr
    assert f"{len(failed)} done now, {SLOW_RUNS - len(failed)} already done, 0 failed" in retried.stdout
    after = store_rows(db)
    assert all(r["status"] == "done" and r["report"]["rows"] for r in after.values())
    assert {k for k, r in after.items() if r["attempts"] == 2} == {r["key"] for r in failed}


# ----------------------------------------------------------------------------- the local cluster

def test_the_local_cluster_is_on_127_0_0_1_alone_and_refuses_gpus_it_lacks(tmp_path, monkeypatch, capfd):
    """`run` without --address starts a cluster on 127.0.0.1 (even with RAY_ADDRESS set: it
    starts its own), and refuses --gpus-per-run beyond it before any run."""
    assert not ray.is_initialized()
    folder = tempfile.mkdtemp(prefix="rayl")
    monkeypatch.setenv("RAY_TMPDIR", folder)
    # ray.init sets RAY_AUTH_MODE=token for the local cluster it starts (and so must, itself: Ray's
    # configuration in this process reads it only then); it is put back as it was after.
    mode = os.environ.get("RAY_AUTH_MODE")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # not joined: `run` starts its own
    seen, connect = [], study.connect_ray

    def inspecting(address, workers):
        started = connect(address, workers)
        ours = set(descendants(os.getpid())) | {os.getpid()}
        seen.append((started, ray.util.get_node_ip_address(), listening(ours)))
        return started

    monkeypatch.setattr(study, "connect_ray", inspecting)
    try:
        out = tmp_path / "out"
        argv = ["run", tiny_study(tmp_path), "--scale", "paper", "--workers", "1", "--gpus-per-run", "1",
                "--out", str(out)]
        assert study.main(argv) == 2
        err = capfd.readouterr().err
        assert err.count("\n") == 1 and ("--gpus-per-run 1: the local Ray cluster has 0 GPUs; a run needs 1 "
                                         "on one node") in err, err
        assert not (out / "study.sqlite").exists()
        assert not ray.is_initialized()  # shut down
        [(started, node, bound)] = seen
        assert started and node == "127.0.0.1"
        assert bound and {host for host, _ in bound} == {"127.0.0.1"}, bound
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = mode
        shutil.rmtree(folder, ignore_errors=True)
