"""down.sh gives the host back as the real node found it: testbed/host.sh records the host
at up (host_record) and undoes each change at down (host_undo). Here the undo runs
against a fake root (STRATCTL_TESTBED_HOST_ROOT) after the changes a kubelet, containerd
and the CNI plugins make, with fake iptables, ip, umount and rmdir (cgroupfs removes a
directory that still lists files) that write down what they were asked; one test per
kind of change, so that dropping one undo fails its test.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TESTBED = REPO / "testbed"

FAKES = {
    # iptables-save prints $FAKE/ipt/<family>.<table>; iptables writes down its arguments.
    "iptables-save": 'cat "$FAKE/ipt/iptables.$2" 2>/dev/null',
    "ip6tables-save": 'cat "$FAKE/ipt/ip6tables.$2" 2>/dev/null',
    "iptables": 'echo "iptables $*" >> "$FAKE/calls"',
    "ip6tables": 'echo "ip6tables $*" >> "$FAKE/calls"',
    # ip link show|add|del dev NAME: a link is a file in $FAKE/links
    "ip": textwrap.dedent(
        """\
        echo "ip $*" >> "$FAKE/calls"
        name=${@: -1}
        case "$2" in
          show) [[ -e $FAKE/links/$name ]] ;;
          del) rm -f "$FAKE/links/$name" ;;
        esac"""
    ),
    "umount": 'echo "umount $*" >> "$FAKE/calls"',
    "rmdir": 'echo "rmdir $*" >> "$FAKE/calls"; rm -rf "$1"',
}

# Values the kubelet (kernel tunables), kube-proxy and the bridge plugin write.
SYSCTLS_BEFORE = {
    "kernel/panic": "1",
    "kernel/panic_on_oops": "0",
    "vm/overcommit_memory": "0",
    "kernel/keys/root_maxkeys": "1000000",
    "net/ipv4/ip_forward": "0",
    "net/ipv4/conf/all/route_localnet": "0",
    "net/netfilter/nf_conntrack_max": "262144",
}
SYSCTLS_BY_KUBELET = {
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "vm/overcommit_memory": "1",
    "kernel/keys/root_maxkeys": "1000001",
    "net/ipv4/ip_forward": "1",
    "net/ipv4/conf/all/route_localnet": "1",
    "net/netfilter/nf_conntrack_max": "131072",
}

IPTABLES_BEFORE = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-THEIRS - [0:0]
-A INPUT -j KUBE-THEIRS
COMMIT
"""
IPTABLES_AFTER = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-THEIRS - [0:0]
-A INPUT -j KUBE-THEIRS
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" \
-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
COMMIT
"""
NAT_AFTER = """\
*nat
:PREROUTING ACCEPT [0:0]
:STRATCTL-API - [0:0]
-A PREROUTING -i stratctl0 -j STRATCTL-API
-A STRATCTL-API -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 127.0.0.1:26443
COMMIT
"""
MANGLE_AFTER = """\
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
COMMIT
"""


@dataclass
class Host:
    root: Path
    run_dir: Path
    fake: Path
    sleeper: subprocess.Popen
    undo: subprocess.CompletedProcess

    @property
    def calls(self) -> list[str]:
        path = self.fake / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def sysctl(self, key: str) -> str:
        return (self.root / "proc/sys" / key).read_text().strip()


def bash(script: str, env: dict) -> subprocess.CompletedProcess:
    prelude = f"source {TESTBED / 'lib.sh'}; source {TESTBED / 'host.sh'}; "
    return subprocess.run(["bash", "-c", prelude + script], env=env, capture_output=True, text=True, timeout=60)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A fake host with the real node up (recorded, then changed as a kubelet changes it),
    then down.sh's undo run on it (once: the tests only look)."""
    tmp_path = tmp_path_factory.mktemp("host")
    root, run_dir, fake = tmp_path / "root", tmp_path / "run", tmp_path / "fake"
    (fake / "bin").mkdir(parents=True)
    (fake / "links").mkdir()
    for name, body in FAKES.items():
        exe = fake / "bin" / name
        exe.write_text("#!/usr/bin/env bash\n" + body + "\n")
        exe.chmod(0o755)
    env = {
        "PATH": f"{fake / 'bin'}:{os.environ['PATH']}",
        "FAKE": str(fake),
        "STRATCTL_TESTBED_DIR": str(run_dir),
        "STRATCTL_TESTBED_HOST_ROOT": str(root),
    }
    # The host before up: its sysctls, /var/log and /run, a network namespace of someone
    # else's (mounted), a chain of theirs.
    for key, value in SYSCTLS_BEFORE.items():
        write(root / "proc/sys" / key, value + "\n")
    (root / "var/log").mkdir(parents=True)
    write(root / "run/netns/theirs", "")
    write(fake / "ipt/iptables.filter", IPTABLES_BEFORE)
    (run_dir / "pids").mkdir(parents=True)

    recorded = bash("host_record && host_claim", env)
    assert recorded.returncode == 0, recorded.stderr

    # What the node does while it runs.
    for key, value in SYSCTLS_BY_KUBELET.items():
        write(root / "proc/sys" / key, value + "\n")
    write(fake / "ipt/iptables.filter", IPTABLES_AFTER)
    write(fake / "ipt/iptables.mangle", MANGLE_AFTER)
    write(fake / "ipt/iptables.nat", NAT_AFTER)
    write(fake / "ipt/ip6tables.mangle", MANGLE_AFTER)
    write(fake / "links/stratctl0", "")
    write(root / "var/lib/kubelet/device-plugins/kubelet.sock", "")
    write(root / "var/log/containers/trial_stratctl-e2e_main-1.log", "")
    write(root / "var/lib/cni/results/stratctl-testbed-1-eth0", "{}")
    write(root / "run/containerd/s/0123", "")
    write(root / "run/netns/cni-1234", "")
    sleeper = subprocess.Popen(["sleep", "60"])
    for hierarchy in ("cpu", "memory"):
        pod = root / "sys/fs/cgroup" / hierarchy / "stratctl-testbed/kubepods/besteffort/pod1"
        write(pod / "cgroup.procs", f"{sleeper.pid}\n")
        write(pod.parent / "cgroup.procs", "")
    write(root / "sys/fs/cgroup/cpu/other/cgroup.procs", "")
    mounts = [
        "/",
        f"{root}/run/netns/theirs",
        f"{root}/run/netns/cni-1234",
        f"{run_dir}/kubelet/pods/uid 1/volumes/kubernetes.io~projected/token",
        f"{run_dir}/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
        "/home",
    ]
    write(
        root / "proc/self/mountinfo",
        "".join(
            f"{20 + i} 1 0:{i} / {m.replace(' ', chr(92) + '040')} rw - tmpfs tmpfs rw\n" for i, m in enumerate(mounts)
        ),
    )

    undo = bash("host_undo", env)
    try:
        yield Host(root, run_dir, fake, sleeper, undo)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_undo_succeeds_and_forgets_its_journal(host):
    assert host.undo.returncode == 0, host.undo.stderr
    assert not (host.run_dir / "host").exists()


def test_sysctls_get_their_values_from_before_up(host):
    for key, value in SYSCTLS_BEFORE.items():
        assert host.sysctl(key) == value, key


def test_iptables_chains_made_since_up_go_with_the_rules_that_jump_to_them(host):
    calls = host.calls
    assert "iptables -w -t filter -D INPUT -j KUBE-FIREWALL" in calls
    assert "iptables -w -t filter -D OUTPUT -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j KUBE-FIREWALL" in calls
    for family in ("iptables", "ip6tables"):
        assert f"{family} -w -t mangle -X KUBE-IPTABLES-HINT" in calls
        assert f"{family} -w -t mangle -X KUBE-KUBELET-CANARY" in calls
    assert "iptables -w -t filter -F KUBE-FIREWALL" in calls
    assert "iptables -w -t filter -X KUBE-FIREWALL" in calls
    assert "iptables -w -t filter -X KUBE-KUBELET-CANARY" in calls
    # the pods' way to the API server (realnode.sh), its jump first
    assert "iptables -w -t nat -D PREROUTING -i stratctl0 -j STRATCTL-API" in calls
    assert calls.index("iptables -w -t nat -D PREROUTING -i stratctl0 -j STRATCTL-API") < calls.index(
        "iptables -w -t nat -X STRATCTL-API"
    )
    # a chain that was there before up stays, and so does its rule
    assert not [c for c in calls if "KUBE-THEIRS" in c]


def test_mounts_of_the_node_are_unmounted_deepest_first_and_no_other(host):
    umounts = [c.removeprefix("umount ") for c in host.calls if c.startswith("umount ")]
    assert sorted(umounts) == sorted(
        [
            f"{host.root}/run/netns/cni-1234",
            f"{host.run_dir}/kubelet/pods/uid 1/volumes/kubernetes.io~projected/token",
            f"{host.run_dir}/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
        ]
    )


def test_processes_in_the_node_cgroups_are_killed_and_the_cgroups_removed(host):
    assert host.sleeper.wait(timeout=5) == -9
    for hierarchy in ("cpu", "memory"):
        assert not (host.root / "sys/fs/cgroup" / hierarchy / "stratctl-testbed").exists(), hierarchy
    assert (host.root / "sys/fs/cgroup/cpu/other").exists()


def test_the_bridge_up_created_is_deleted(host):
    assert "ip link del dev stratctl0" in host.calls
    assert not (host.fake / "links/stratctl0").exists()


def test_fixed_paths_go_when_up_made_them_else_only_their_new_entries(host):
    root = host.root
    assert not (root / "var/lib/kubelet").exists()  # its topmost missing parent
    assert not (root / "var/log/containers").exists()
    assert (root / "var/log").is_dir()
    assert not (root / "var/lib/cni").exists()
    assert not (root / "run/containerd").exists()
    assert sorted(p.name for p in (root / "run/netns").iterdir()) == ["theirs"]


def test_the_machine_real_node_claim_is_released(host):
    assert not (host.root / "run/stratctl-testbed-real-node").exists()


def test_a_second_undo_does_nothing(host):
    env = {
        "PATH": os.environ["PATH"],
        "STRATCTL_TESTBED_DIR": str(host.run_dir),
        "STRATCTL_TESTBED_HOST_ROOT": "/nonexistent",
    }
    again = bash("host_undo", env)
    assert again.returncode == 0 and not again.stderr


def test_the_undo_lists_cover_what_the_design_notes_name():
    """The sysctls, chains and fixed paths the kubelet, kube-proxy and the CNI plugins were
    seen to change (../shared/design.md, "Host changes to undo on teardown")."""
    out = bash("declare -p HOST_SYSCTLS HOST_PATHS HOST_CHAIN_PATTERN HOST_IPTABLES HOST_TABLES", dict(os.environ))
    assert out.returncode == 0, out.stderr
    for key in (
        "kernel/panic",
        "kernel/panic_on_oops",
        "vm/overcommit_memory",
        "net/ipv4/conf/all/route_localnet",
        "net/netfilter/nf_conntrack_max",
        "net/ipv4/ip_forward",
    ):
        assert f'"{key}"' in out.stdout, key
    for path in (
        "/var/lib/kubelet/device-plugins",
        "/var/log/containers",
        "/var/lib/cni",
        "/run/containerd",
        "/run/netns",
    ):
        assert f'"{path}"' in out.stdout, path
    assert "KUBE-|CNI-|STRATCTL-" in out.stdout
    assert '"ip6tables"' in out.stdout and '"mangle"' in out.stdout and '"nat"' in out.stdout
