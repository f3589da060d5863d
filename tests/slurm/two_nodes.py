"""A real two-node Slurm on one machine: slurmctld on the host, two slurmd, each in its own Linux
network namespace with its own address on a bridge, its own host name (a UTS namespace) and its own
view of /etc/hosts (a mount namespace with the test's file bound over it), so the nodes reach each
other and the controller by name and address, as a cluster's nodes do. Nothing under /etc is
written: the host's /etc/hosts is covered only inside the nodes' mount namespaces.

Everything the cluster makes (namespaces, bridge, veth pairs, daemons) is removed by ``stop``, by
name and by PID. ``LocalSlurm`` (test_slurm_smoke) brings MUNGE, the shims and the waits.
"""
from __future__ import annotations

import secrets
import shlex
import subprocess
import time
from pathlib import Path

from .test_slurm_smoke import DAEMON_CONF, PATH, ROOT_MUNGE_CONF, UP_LIMIT_S, LocalSlurm, _free_port, _tool

# Each node declares this much (SlurmdParameters=config_overrides: the machine may be smaller):
# two of the profile's tasks of cpus_per_task 4 and its mem_mb a job.
NODE_CPUS, NODE_MEM_MB = 8, 65536
NETNS_TOOLS = ["ip", "nsenter", "unshare", "mount", "hostname"]


def _ip(*argv: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    prefix = [_tool("ip"), "netns", "exec", ns] if ns else []
    return subprocess.run([*prefix, _tool("ip"), *argv], capture_output=True, text=True, check=check,
                          env={"PATH": PATH})


def netns_unmet() -> list[str]:
    """What keeps this machine from making the two nodes' namespaces, in words (empty: nothing)."""
    unmet = [f"`{tool}` not found" for tool in NETNS_TOOLS if _tool(tool) is None]
    if unmet:
        return unmet
    probe = f"cs336probe{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return [f"`ip netns add` fails: {made.stderr.strip()}"]
    try:
        bridge = _ip("link", "add", f"{probe[:10]}b", "type", "bridge", check=False)
        if bridge.returncode != 0:
            return [f"no bridge can be made: {bridge.stderr.strip()}"]
        _ip("link", "del", f"{probe[:10]}b", check=False)
    finally:
        _ip("netns", "del", probe, check=False)
    return []


class TwoNodeSlurm(LocalSlurm):
    """slurmctld on the host at the bridge's address; slurmd ``<prefix>1`` and ``<prefix>2`` in
    namespaces at .1 and .2 of a /24 of 10.0.0.0/8 that no interface here uses."""

    def __init__(self, conf_dir: Path, munge_dir: Path):
        super().__init__(conf_dir, munge_dir)
        tag = secrets.token_hex(2)
        self.nodes = [f"cs336n{tag}{i}" for i in (1, 2)]
        self.bridge = f"cs336b{tag}"
        self.netns = [f"cs336ns{tag}{i}" for i in (1, 2)]
        self.subnet = self._free_subnet()
        self.addresses = [f"{self.subnet}.{i}" for i in (1, 2)]
        self.controller_address = f"{self.subnet}.254"
        self.hosts = conf_dir / "hosts"
        self.made: list[tuple[str, ...]] = []       # what `stop` removes, in reverse

    @staticmethod
    def _free_subnet() -> str:
        used = _ip("-4", "-o", "addr").stdout
        for _ in range(50):
            subnet = f"10.{secrets.randbelow(200) + 40}.{secrets.randbelow(250) + 1}"
            if f" {subnet}." not in used:
                return subnet
        raise RuntimeError("no free 10.x.y.0/24 for the test's bridge")

    # ---- the network ------------------------------------------------------------------------
    def make_network(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", "del", self.bridge))
        _ip("addr", "add", f"{self.controller_address}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (ns, address) in enumerate(zip(self.netns, self.addresses), start=1):
            _ip("netns", "add", ns)
            self.made.append(("netns", "del", ns))
            outside, inside = f"{self.bridge}v{i}", f"{self.bridge}p{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            self.made.append(("link", "del", outside))       # its peer goes with it
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", outside, "master", self.bridge)
            _ip("link", "set", outside, "up")
            _ip("addr", "add", f"{address}/24", "dev", inside, ns=ns)
            _ip("link", "set", inside, "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
        # Inside the nodes every name resolves to its address: the nodes' own (Gloo binds to the
        # address its host name resolves to) and the controller's.
        lines = [f"{address} {node}" for address, node in zip(self.addresses, self.nodes)]
        self.hosts.write_text("\n".join([*lines, f"{self.controller_address} {self.node}", "127.0.0.1 localhost", ""]))

    def remove_network(self) -> None:
        for argv in reversed(self.made):
            _ip(*argv, check=False)
        self.made.clear()

    # ---- configuration ----------------------------------------------------------------------
    def write_config(self) -> None:
        for sub in ("state", "spool"):
            (self.conf_dir / sub).mkdir(parents=True, exist_ok=True)
        d = self.conf_dir
        nodes = "\n".join(f"NodeName={node} NodeAddr={address} CPUs={NODE_CPUS} RealMemory={NODE_MEM_MB} State=UNKNOWN"
                          for node, address in zip(self.nodes, self.addresses))
        self.conf.write_text("\n".join([
            "ClusterName=cs336two",
            f"SlurmctldHost={self.node}({self.controller_address})",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",          # each slurmd binds it in its own namespace
            *ROOT_MUNGE_CONF,
            f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd'}-%n.pid",
            f"SlurmctldLogFile={d / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'slurmd'}-%n.log",
            *DAEMON_CONF,
            "MinJobAge=3600",              # finished jobs stay in squeue, the profile's status command
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            nodes,
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        for node in self.nodes:
            (d / "spool" / node).mkdir(parents=True, exist_ok=True)
        self.shims.mkdir(exist_ok=True)
        shim = self.shims / "srun"      # why: LocalSlurm.write_config
        shim.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {_tool("srun")} "$@"\n')
        shim.chmod(0o755)

    # ---- daemons ----------------------------------------------------------------------------
    def start(self) -> None:
        self.make_network()
        self.start_controller()
        for node, ns in zip(self.nodes, self.netns):
            inner = (f"mount --bind {shlex.quote(str(self.hosts))} /etc/hosts && hostname {node} && "
                     f"exec {shlex.quote(_tool('slurmd'))} -D -f {shlex.quote(str(self.conf))} -N {node}")
            # nsenter, not `ip netns exec`: that mounts a fresh /sys, without the cgroup file system slurmd needs
            self._spawn(f"slurmd-{node}", [_tool("nsenter"), f"--net=/run/netns/{ns}", _tool("unshare"), "--uts",
                                            "--mount", "--propagation", "private", "sh", "-c", inner], cwd=self.conf_dir)
        self._wait(lambda: self.states() == {node: "idle" for node in self.nodes}, UP_LIMIT_S,
                   "the two nodes did not become idle")

    def states(self) -> dict[str, str]:
        lines = self._run("sinfo", "-h", "-N", "-o", "%N %T").stdout.splitlines()
        return dict(line.split() for line in lines if len(line.split()) == 2)

    def stop(self) -> None:
        """Our jobs cancelled, the nodes' job steps ended, then the slurmds, slurmctld and munged (by
        PID), then the namespaces, veth pairs and bridge (by name)."""
        try:
            if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
                live = self._run("squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "-o", "%i")
                if live.stdout.split():
                    self._run("scancel", *live.stdout.split())
            # each running slurmstepd (one a job step) has a socket in its node's spool folder
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                    any((self.conf_dir / "spool" / node).glob(f"{node}_*")) for node in self.nodes):
                time.sleep(0.5)
            for name in [n for n in self.procs if n.startswith("slurmd-")]:
                proc = self.procs.pop(name)
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout=10)
            super().stop()
        finally:
            self.remove_network()

