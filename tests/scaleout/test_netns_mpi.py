"""Scale-out across "nodes" on one machine (issue #33 §4): ``mpirun -np N`` with every rank in its own network
namespace, joined to a bridge by a veth pair; its own file tier, and a shared Redis tier bound to the bridge's
address, reached only over the rank's veth link.  MPI's own traffic goes over the same links (TCP BTL, no
shared memory).  Needs root and ``ip netns`` (CI runs as root); skips, with the reason, where they are not allowed.
Everything the test creates (namespaces, veth pairs, the bridge) is removed in ``finally``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis_servers import require_redis, start_redis
from test_mpi import MPIRUN, needs_mpi
from tiny_spec import assert_valid_result, tiny_spec

IP = shutil.which("ip")


def _ip(*args: str) -> None:
    subprocess.run([IP or "ip", *args], check=True, capture_output=True, text=True, timeout=30)


@dataclass
class Nodes:
    """N network namespaces on one bridge: ``<prefix>.1`` is the bridge (the Redis server's address), rank r
    is ``<prefix>.<10 + r>`` behind the veth whose host end is ``host_ends[r]``."""

    prefix: str
    namespaces: list[str]
    host_ends: list[str]

    @property
    def bridge_address(self) -> str:
        return f"{self.prefix}.1"

    def counters(self, rank: int) -> tuple[int, int]:
        """Bytes the rank's link carried (received from the namespace, sent into it) at the host end."""
        stats = Path("/sys/class/net") / self.host_ends[rank] / "statistics"
        return int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text())


def _netns_refused() -> str | None:
    """Why this machine will not let the test make network namespaces, or None."""
    if IP is None:
        return "needs the ip command (iproute2)"
    if os.geteuid() != 0:
        return "needs root for ip netns and veth links (CI runs as root)"
    probe = f"kvbprobe{os.getpid()}"
    done = subprocess.run([IP, "netns", "add", probe], capture_output=True, text=True)
    if done.returncode:
        return f"ip netns is not allowed here: {done.stderr.strip()}"
    subprocess.run([IP, "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture
def nodes(request: pytest.FixtureRequest) -> Iterator[Nodes]:
    refused = _netns_refused()
    if refused:
        pytest.skip(refused)
    count, tag = request.param, os.getpid() % 10000
    made = Nodes(prefix=f"10.231.{tag % 250 + 1}", namespaces=[f"kvb{tag}r{r}" for r in range(count)],
                 host_ends=[f"kvb{tag}h{r}" for r in range(count)])
    bridge = f"kvb{tag}br"
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{made.bridge_address}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for rank, (namespace, host_end) in enumerate(zip(made.namespaces, made.host_ends, strict=True)):
            inside = f"kvb{tag}n{rank}"
            _ip("netns", "add", namespace)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", namespace)
            _ip("link", "set", host_end, "master", bridge)
            _ip("link", "set", host_end, "up")
            _ip("-n", namespace, "addr", "add", f"{made.prefix}.{10 + rank}/24", "dev", inside)
            _ip("-n", namespace, "link", "set", inside, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
        yield made
    finally:  # a namespace's deletion takes its veth pair with it; then the bridge
        for namespace in made.namespaces:
            subprocess.run([IP or "ip", "netns", "del", namespace], capture_output=True)
        for host_end in made.host_ends:
            subprocess.run([IP or "ip", "link", "del", host_end], capture_output=True)
        subprocess.run([IP or "ip", "link", "del", bridge], capture_output=True)


@pytest.mark.mpi
@pytest.mark.slow
@needs_mpi
@pytest.mark.parametrize("nodes", [2, 4], indirect=True, ids=["2-ranks", "4-ranks"])
def test_ranks_in_their_own_namespaces_share_a_redis_tier_over_veth(nodes: Nodes, tmp_path: Path) -> None:
    require_redis()
    server = start_redis(tmp_path / "redis", "--bind", nodes.bridge_address, "--protected-mode", "no")
    try:
        spec = tiny_spec(tmp_path, duration="8s", workload={"users": 3, "max_inflight": 2}, cache={"tiers": [
            {"name": "redis", "backend": "redis", "capacity": "16MiB",
             "options": {"host": nodes.bridge_address, "port": server.port}},
            {"name": "nvme", "backend": "nvme", "capacity": "64MiB",
             "options": {"path": str(tmp_path / "cache"), "fsync": False, "drop_cache": False}}]})
        before = [nodes.counters(r) for r in range(len(nodes.namespaces))]
        subnet = f"{nodes.prefix}.0/24"
        # PMIx's server (in mpirun) listens on loopback by default, which a namespace cannot reach: it
        # listens on the bridge instead, and so do Open MPI's out-of-band and TCP byte transfer layers.
        env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
               "PMIX_MCA_ptl_tcp_remote_connections": "1", "PMIX_MCA_ptl_tcp_if_include": subnet}
        command = [MPIRUN, "--oversubscribe", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", subnet,
                   "--mca", "oob_tcp_if_include", subnet]
        for rank, namespace in enumerate(nodes.namespaces):  # MPMD: one rank per namespace
            command += [*([":"] if rank else []), "-np", "1", IP or "ip", "netns", "exec", namespace,
                        sys.executable, "-m", "kvbench_core.cli", "run", str(spec)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
        after = [nodes.counters(r) for r in range(len(nodes.namespaces))]
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    files = list((tmp_path / "out").glob("*.json"))
    assert len(files) == 1, files
    result = json.loads(files[0].read_text())
    assert_valid_result(result)
    assert (result["scale_out"]["mode"], result["scale_out"]["clients"]) == ("mpi", len(nodes.namespaces))
    for rank, client in enumerate(result["clients"]):
        # A rank's own p95 may lack samples when 4 ranks share 2 loaded cores (inconclusive); it ran to its end.
        assert client["status"] in ("completed", "inconclusive"), client["stop_reason"]
        assert client["directories"] == [str(tmp_path / "cache" / f"rank{rank}")]  # its own file tier
        redis = client["metrics"]["tiers"]["redis"]
        assert redis["write"]["bytes"] > 0, rank  # every rank used the shared tier
        received, sent = (a - b for a, b in zip(after[rank], before[rank], strict=True))
        # The only way from the rank's namespace to the Redis server is its veth link: what the rank wrote
        # to Redis crossed it from the namespace, what it read came back into it.
        assert received >= redis["write"]["bytes"] and sent >= redis["read"]["bytes"], (rank, received, sent)


def test_where_network_namespaces_are_not_allowed_the_reason_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    import test_netns_mpi as here

    monkeypatch.setattr(here.os, "geteuid", lambda: 1000)
    assert _netns_refused() == "needs root for ip netns and veth links (CI runs as root)"
    monkeypatch.setattr(here, "IP", None)
    assert _netns_refused() == "needs the ip command (iproute2)"
