"""Joining or starting a Ray cluster for a study, with the checks that refuse a bad one in one
line before any work: an address nothing answers at, a cluster that wants a token this
process would not send, a local cluster that would listen beyond loopback, GPUs no node has.

`verify.study run` starts a local Ray cluster on 127.0.0.1 alone (--workers N runs at once,
default one per core; a cluster named by RAY_ADDRESS or left by `ray start` is not joined) and
submits each run (or pack, --pack N) as one Ray task; --address HOST:PORT (or ray://HOST:10001,
or auto) runs on an existing cluster, and --gpus-per-run G asks Ray for accelerators and trains
on cuda (refused in one line before any run when no node has G GPUs).

The `studies` extra asks for Ray ≥ 2.55, < 3. Token authentication arrived in 2.52, but the
floor is the lowest Ray that passes tests/test_cluster.py, installed (`pip install
'ray[client]==V'` beside the project) and run whole: 2.55.0 and 2.56.0 pass all 9; 2.53.0 and
2.54.0 fail the lost-worker test: it never saw a run begin on the worker node (it reads the
`:task_name:run_one` lines in the worker logs under that node's --temp-dir), so the study ended
before the node could be killed mid-run. The checks here read three of Ray's private modules,
tested with the version the install brings; a Ray without them is refused in one line.

Token authentication (as of Ray 2.60): a head started while a token file
exists, or with RAY_AUTH_MODE=token, wants a token from every node and driver, and a process
joining by address sends it only with RAY_AUTH_MODE=token set. Without the token, `ray start
--address` retries for 20 s ("Failed to get cluster ID from GCS server: Unauthenticated …
Authentication token is missing or incorrect", once a second), while `verify.study run
--address` asks the cluster once, first, and stops in under a second with one line and exit 2:

    verify.study: error: --address 192.0.2.2:46379: the cluster requires Ray token
    authentication: set RAY_AUTH_MODE=token and give the cluster's token (`ray get-auth-token`
    on its head prints it) in RAY_AUTH_TOKEN, or in a file named by RAY_AUTH_TOKEN_PATH, or in
    ~/.ray/auth_token (see --help)

A wrong token, a token file that RAY_AUTH_MODE is missing for, and RAY_AUTH_MODE=token with no
token each get their own line. With both variables the smoke study's 2 runs took 9.6 s on two
nodes of one machine (tests/test_cluster.py starts such a cluster, about 45 s).

On Linux, `ray start --node-ip-address 127.0.0.1` does not keep a node on loopback (Ray
substitutes the network address and listens everywhere); the local cluster and the tests use
Ray's single-machine mode, which does. When a node dies, Ray prints the raylet's last log lines
to the driver's stdout, which breaks --json there; the store is what to read.
"""

from __future__ import annotations

import contextlib
import os
import socket
import warnings
from pathlib import Path

from verify.cli import UsageError

# The lowest Ray that passes tests/test_cluster.py (the module docstring); the checks below also
# read three of Ray's private modules, tested with the version the install brings (pyproject's
# `studies` extra bounds it).
RAY_RANGE = "ray[client]>=2.55,<3"


def ray_private(module: str):
    """Import one of Ray's private modules (ray._private.services, ray_constants,
    ray.core.generated.ray_client_pb2), or refuse in one line: a Ray that moved it is not one
    this code was tested with."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        import ray

        raise UsageError(f"this Ray ({ray.__version__}) has no {module}, which verify.study reads: install "
                         f"'{RAY_RANGE}'") from None


def check_address(address: str) -> None:
    """Refuse at once an --address nothing answers at (Ray itself waits 30 s for a Ray
    Client address and retries a GCS one for minutes, logging as it goes), and one whose
    cluster wants a Ray token this process would not send, or a token other than the one it
    would send (Ray would retry for 20 s, logging a warning a second)."""
    target = _resolve_address(address)
    if target is None:  # `auto` with no cluster to find: ray.init says so itself
        return
    client, host, port = target
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as e:
        raise UsageError(f"--address {address}: nothing answers at {host}:{port} "
                         f"({e.strerror or type(e).__name__})") from None
    check_token(address, client, host, port)


def _resolve_address(address: str) -> tuple[bool, str, int] | None:
    """(a Ray Client address?, host, port) of `address`; `auto` is the cluster Ray would
    join (RAY_ADDRESS, else the last one `ray start` recorded on this machine), None when
    there is none."""
    if address == "auto":
        services = ray_private("ray._private.services")
        try:
            address = services.get_ray_address_from_environment("auto", None)
        except Exception:  # noqa: BLE001 - no cluster found: ray.init reports it in its own words
            return None
        if not address or address == "auto":
            return None
    elif "://" in address and not address.startswith("ray://"):
        raise UsageError(f"--address {address!r}: expected auto, ray://HOST:PORT or HOST:PORT")
    client = address.startswith("ray://")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit():
        raise UsageError(f"--address {address!r}: expected auto, ray://HOST:PORT or HOST:PORT")
    return client, host, int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine's loopback interface (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


# Ray's token authentication (Ray 2.60). A cluster wants a token when its head was started
# with RAY_AUTH_MODE=token, or with RAY_AUTH_MODE unset and a token file present
# (~/.ray/auth_token: `ray.init()`'s own local clusters, verify.study's included, write
# one when there is none). A process that joins it by an explicit address sends the token
# only with RAY_AUTH_MODE=token; with `auto`, also when RAY_AUTH_MODE is unset and it finds
# a token. The token is RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else
# ~/.ray/auth_token (ray_token below reads them in Ray's order).
AUTH_MODE, AUTH_TOKEN, AUTH_TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
GIVE_TOKEN = (f"the cluster's token (`ray get-auth-token` on its head prints it) in {AUTH_TOKEN}, or in a "
              f"file named by {AUTH_TOKEN_PATH}, or in ~/.ray/auth_token")
PROBE_TIMEOUT = 5.0  # seconds: one call, answered in milliseconds on a network that works


def ray_token() -> tuple[str | None, str]:
    """(the token Ray would send, or None; where it is from), in Ray 2.60's order:
    RAY_AUTH_TOKEN when set and not empty (stripped), else the file RAY_AUTH_TOKEN_PATH
    names when set and not empty, else ~/.ray/auth_token (each file's text stripped)."""
    if os.environ.get(AUTH_TOKEN):
        return os.environ[AUTH_TOKEN].strip() or None, AUTH_TOKEN
    if os.environ.get(AUTH_TOKEN_PATH):
        path = Path(os.environ[AUTH_TOKEN_PATH])
        where = f"{path} (named by {AUTH_TOKEN_PATH})"
    else:
        path = Path.home() / ".ray" / "auth_token"
        where = str(path)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    return token or None, where


def _rejected(client: bool, host: str, port: int, token: str | None) -> bool:
    """Whether the cluster at host:port (its GCS, or its Ray Client server) refuses one call
    carrying `token` (None: none) as unauthenticated. Plain gRPC, not Ray's client: one
    call, no retries, no log lines; False when it cannot tell (Ray's own connection then
    reports whatever else is wrong)."""
    import grpc

    if client:
        ray_client_pb2 = ray_private("ray.core.generated.ray_client_pb2")
        method = "/ray.rpc.RayletDriver/ClusterInfo"
        ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
        request = ping.SerializeToString()
    else:
        method, request = "/ray.rpc.NodeInfoGcsService/GetClusterId", b""  # an empty GetClusterIdRequest
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    metadata = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(target) as channel:
        try:
            channel.unary_unary(method)(request, timeout=PROBE_TIMEOUT, metadata=metadata)
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.UNAUTHENTICATED
    return False


def check_token(address: str, client: bool, host: str, port: int) -> None:
    """Refuse, in one line that says what to set, a cluster that wants a Ray token this
    process would not send, or that rejects the one it would send."""
    mode = os.environ.get(AUTH_MODE)
    token, where = ray_token()
    if mode is not None and mode.lower() == "token" and token is None:
        raise UsageError(f"--address {address}: {AUTH_MODE}=token but there is no Ray token in {where}: "
                         f"give {GIVE_TOKEN}")
    # `auto` sends a token it finds unless RAY_AUTH_MODE is set, or RAY_ADDRESS names the cluster.
    sends = (mode is not None and mode.lower() == "token") or (
        address == "auto" and mode is None and not os.environ.get("RAY_ADDRESS"))
    sent = token if sends else None
    if not _rejected(client, host, port, sent):
        return
    if sent:
        raise UsageError(f"--address {address}: the cluster rejects the Ray token in {where}: "
                         f"give {GIVE_TOKEN}")
    raise UsageError(f"--address {address}: the cluster requires Ray token authentication: "
                     f"set {AUTH_MODE}=token"
                     + (f" (Ray then sends the token in {where}; the cluster's own is what "
                        "`ray get-auth-token` prints on its head)" if token else f" and give {GIVE_TOKEN}"))


@contextlib.contextmanager
def _loopback_only():
    """Ray on this machine's loopback interface alone, for what starts or joins Ray inside:
    its node address is 127.0.0.1 and every process it starts listens there. On Linux Ray
    otherwise replaces 127.0.0.1 (in --node-ip-address, _node_ip_address and a cluster's
    address alike) by the machine's network address and listens on every interface; its
    single-machine mode (the default on macOS and Windows) is the one switch that keeps it
    on 127.0.0.1, read from the environment by the processes it starts and from
    ray_constants in this one."""
    ray_constants = ray_private("ray._private.ray_constants")
    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    saved = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved[0]
        ray_constants.ENABLE_RAY_CLUSTER = saved[1]


def connect_ray(address: str | None, workers: int | None) -> bool:
    """Join the cluster at `address`, or start a local one (one run per core, or
    `workers`) on 127.0.0.1 alone; True when this call started Ray (and so must shut it
    down). A cluster on this machine's loopback address is joined over loopback."""
    import logging

    import ray

    if ray.is_initialized():
        return False
    target = _resolve_address(address) if address else None
    local = address is None or (target is not None and not target[0] and is_loopback(target[1]))
    where = f"--address {address}" if address else "a local Ray cluster"
    try:
        with warnings.catch_warnings(), _loopback_only() if local else contextlib.nullcontext():
            warnings.simplefilter("ignore")  # Ray warns before it raises; the error says it in one line
            # "local": start a cluster even when RAY_ADDRESS names one, or `ray start` ran here.
            ray.init(address=address or "local", num_cpus=None if address else workers,
                     include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    except ray.exceptions.AuthenticationError as e:  # what check_token could not foresee
        raise UsageError(f"{where}: Ray token authentication failed ({e.message}); give {GIVE_TOKEN}, "
                         f"with {AUTH_MODE}=token") from None
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UsageError(f"{where}: cannot start or reach Ray ({str(e).splitlines()[0]})") from None
    return True


def check_gpus(gpus_per_run: float, address: str | None) -> None:
    """Refuse, before any run is submitted, --gpus-per-run G on a cluster none of whose
    nodes has G GPUs (Ray would hold every run pending for ever: a run's GPUs are on one node)."""
    import ray

    gpus = [node["Resources"].get("GPU", 0.0) for node in ray.nodes() if node["Alive"]]
    if max(gpus, default=0.0) >= gpus_per_run:
        return
    where = f"the cluster at {address}" if address else "the local Ray cluster"
    most = f" (at most {max(gpus):g} on one node)" if len(gpus) > 1 and sum(gpus) else ""
    raise UsageError(f"--gpus-per-run {gpus_per_run:g}: {where} has {sum(gpus):g} GPUs{most}; "
                     f"a run needs {gpus_per_run:g} on one node")
