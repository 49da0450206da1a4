"""Check stratctl's rendezvous contract with a real TCP rendezvous (standard library only).

Run as the command of every task of a trial (`examples/rendezvous/slurm.yaml`). Each
process reads the contract stratctl gives it (STRATCTL_NUM_NODES, STRATCTL_NODE_RANK,
STRATCTL_NODE_ADDRS, MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, STRATCTL_TASK,
STRATCTL_TASK_INDEX, STRATCTL_TASKS, STRATCTL_<ROLE>_HOSTS/_NUM) and checks it is
consistent. Rank 0 listens on MASTER_PORT (every interface); every other rank connects to
MASTER_ADDR:MASTER_PORT, retrying until the name resolves and rank 0 listens, and
sends its rank and its view of the contract; rank 0 checks that it heard every other rank
exactly once, all of this trial and all seeing the same contract, answers each, and
writes the outcome as the trial's result: `$STRATCTL_OUTPUT_DIR/result.json` where the
backend reads results from files (Slurm, YARN), the termination log on Kubernetes, and
stdout always. Every process exits 0 only if the rendezvous completed, so the trial
succeeds only then.

    python3 rendezvous_check.py [--timeout 120] [--hold 0] [--history FILE]

`--hold S` keeps every process (and rank 0's listening socket) S seconds after the
rendezvous, as a training run would hold its port (the result is written before);
`--history FILE` appends the whole record of each completed rendezvous (ranks heard, each
rank's node, the addresses, when rank 0 listened) to FILE as a JSON line: a requeued
job's runs each leave one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time


class Broken(Exception):
    """The contract is inconsistent, or the rendezvous did not complete."""


def contract(env: dict[str, str]) -> dict:
    """This process's contract, checked for consistency: its rank, the addresses, the
    master, its role and the roles' hosts."""
    try:
        view = {
            "num_nodes": int(env["STRATCTL_NUM_NODES"]),
            "rank": int(env["STRATCTL_NODE_RANK"]),
            "addrs": env["STRATCTL_NODE_ADDRS"].split(","),
            "master_addr": env["MASTER_ADDR"],
            "master_port": int(env["MASTER_PORT"]),
            "world_size": int(env["WORLD_SIZE"]),
            "torch_rank": int(env["RANK"]),
            "task": env["STRATCTL_TASK"],
            "task_index": int(env["STRATCTL_TASK_INDEX"]),
            "tasks": env["STRATCTL_TASKS"].split(","),
        }
        roles = {}
        for role in view["tasks"]:
            key = re.sub(r"[^A-Z0-9]", "_", role.upper())
            roles[role] = {"hosts": env[f"STRATCTL_{key}_HOSTS"].split(","), "num": int(env[f"STRATCTL_{key}_NUM"])}
    except KeyError as missing:
        raise Broken(f"{missing.args[0]} is not set: not started with stratctl's rendezvous contract") from None
    except ValueError as bad:
        raise Broken(f"a contract variable is not a number: {bad}") from None
    view["roles"] = roles
    n, rank = view["num_nodes"], view["rank"]
    in_order = [host for role in view["tasks"] for host in roles[role]["hosts"]]
    problems = [
        what
        for what, ok in [
            (f"WORLD_SIZE {view['world_size']} != STRATCTL_NUM_NODES {n}", view["world_size"] == n),
            (f"RANK {view['torch_rank']} != STRATCTL_NODE_RANK {rank}", view["torch_rank"] == rank),
            (f"{len(view['addrs'])} addresses for {n} nodes", len(view["addrs"]) == n),
            (f"rank {rank} outside 0..{n - 1}", 0 <= rank < n),
            (f"MASTER_ADDR {view['master_addr']} is not rank 0's address", view["addrs"][:1] == [view["master_addr"]]),
            (f"MASTER_PORT {view['master_port']} is no port", 0 < view["master_port"] < 65536),
            (f"STRATCTL_TASK {view['task']} is not one of STRATCTL_TASKS", view["task"] in roles),
            ("the roles' hosts in task order are not STRATCTL_NODE_ADDRS", in_order == view["addrs"]),
            ("a role's _NUM is not the count of its _HOSTS", all(r["num"] == len(r["hosts"]) for r in roles.values())),
        ]
        if not ok
    ]
    if not problems:  # this rank is its role's task_index-th host
        first = sum(roles[r]["num"] for r in view["tasks"][: view["tasks"].index(view["task"])])
        if first + view["task_index"] != rank:
            problems.append(f"rank {rank} is not index {view['task_index']} of role {view['task']}")
    if problems:
        raise Broken("inconsistent contract: " + "; ".join(problems))
    return view


def shared(view: dict) -> dict:
    """What every rank of one trial must see alike."""
    return {k: view[k] for k in ("num_nodes", "addrs", "master_addr", "master_port", "tasks", "roles")}


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or os.environ.get("NM_HOST") or socket.gethostname()


def send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def receive(conn: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise Broken(f"connection closed after {len(data)} bytes, before a whole message")
        data += chunk
    return json.loads(data)


def lead(view: dict, trial: str, deadline: float, hold: float, history: str | None) -> None:
    """Rank 0: listen, hear every other rank once, answer them all, report, then hold (its
    port still bound, as a training run's would be)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # a requeued job gets the same port again: its last run's connections may be in TIME_WAIT
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        # every interface, as a framework's coordinator binds: on Kubernetes rank 0's own DNS
        # name resolves only once its pod is in the trial's Service, seconds after it starts
        listener.bind(("", view["master_port"]))
    except OSError as exc:
        raise Broken(f"rank 0 cannot listen on port {view['master_port']}: {exc}") from None
    listener.listen(view["num_nodes"])
    since = time.time()
    heard: list[int] = []
    nodes = {0: node_name()}
    problems: list[str] = []
    peers: list[socket.socket] = []
    try:
        while len(peers) < view["num_nodes"] - 1:
            listener.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                break
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            peers.append(conn)
            hello = receive(conn)
            if hello.get("trial") != trial:
                problems.append(f"a process of another trial ({hello.get('trial')}) connected")
            elif hello.get("shared") != shared(view):
                problems.append(f"rank {hello.get('rank')} sees another contract: {hello.get('shared')}")
            heard.append(hello.get("rank"))
            nodes[hello.get("rank")] = hello.get("node")
        want = list(range(1, view["num_nodes"]))
        missing = sorted(set(want) - set(heard))
        twice = sorted({r for r in heard if heard.count(r) > 1})
        if missing:
            problems.append(f"never heard rank(s) {missing} before the timeout")
        if twice:
            problems.append(f"heard rank(s) {twice} more than once")
        if set(heard) - set(want):
            problems.append(f"heard unknown rank(s) {sorted(set(heard) - set(want))}")
        for conn in peers:
            send(conn, {"ok": not problems, "problems": problems})
        if problems:
            raise Broken("; ".join(problems))
        met = time.time()
        publish(record(view, heard, nodes, since, met, hold), history)
        time.sleep(hold)
    finally:
        for conn in peers:
            conn.close()
        listener.close()


def record(view: dict, heard: list[int], nodes: dict, since: float, met: float, hold: float) -> dict:
    """What rank 0 saw: the outcome, who it heard from which node, and when it listened
    (from `since`; it met every rank at `met` and kept listening `hold` seconds more)."""
    return {
        "rendezvous": "ok",
        "world_size": view["num_nodes"],
        "peers_heard": len(heard),
        "heard": sorted(heard),
        "master": f"{view['master_addr']}:{view['master_port']}",
        "addrs": view["addrs"],
        "nodes": [nodes.get(r) for r in range(view["num_nodes"])],
        "roles": {role: r["num"] for role, r in view["roles"].items()},
        "listening": [since, met],
        "hold": hold,
        "resumed": os.environ.get("STRATCTL_RESUME") == "1",
        "attempt": os.environ.get("STRATCTL_ATTEMPT"),
    }


def follow(view: dict, trial: str, deadline: float, hold: float) -> None:
    """Any other rank: connect to the master (it may not listen yet), say who it is, and
    wait for the verdict."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            conn = socket.create_connection(
                (view["master_addr"], view["master_port"]), timeout=max(0.01, deadline - time.monotonic())
            )
            break
        except OSError as exc:
            last = exc
            time.sleep(0.2)
    else:
        raise Broken(f"rank {view['rank']} could not reach {view['master_addr']}:{view['master_port']}: {last}")
    with conn:
        # rank 0 answers by its own deadline at the latest (about ours): a margin past it
        conn.settimeout(max(0.01, deadline - time.monotonic()) + 10)
        send(conn, {"trial": trial, "rank": view["rank"], "node": node_name(), "shared": shared(view)})
        verdict = receive(conn)
    if not verdict.get("ok"):
        raise Broken(f"rank 0 says the rendezvous failed: {'; '.join(verdict.get('problems') or [])}")
    time.sleep(hold)


SUMMARY = ("rendezvous", "world_size", "peers_heard", "master", "resumed")  # the result: what `status` shows


def publish(record: dict, history: str | None) -> None:
    """The outcome as the trial's result where the backend reads it, and on stdout; the
    whole record (who was heard, from which node, when rank 0 listened) in `history`."""
    text = json.dumps({key: record[key] for key in SUMMARY})
    print(text, flush=True)
    out = os.environ.get("STRATCTL_OUTPUT_DIR")
    if out:
        tmp = os.path.join(out, f".result.json.{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, os.path.join(out, "result.json"))  # never a torn result
    elif os.access("/dev/termination-log", os.W_OK):
        with open("/dev/termination-log", "w") as f:
            f.write(text)
    if history:
        with open(history, "a") as f:
            f.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole rendezvous")
    parser.add_argument("--hold", type=float, default=0.0, help="seconds every process stays after it")
    parser.add_argument("--history", help="a file rank 0 appends each completed rendezvous to")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    trial = os.environ.get("STRATCTL_TRIAL", "")
    try:
        view = contract(dict(os.environ))
        if view["rank"] == 0:
            lead(view, trial, deadline, args.hold, args.history)
        else:
            follow(view, trial, deadline, args.hold)
    except (Broken, OSError, ValueError) as exc:
        print(f"rendezvous_check (rank {os.environ.get('STRATCTL_NODE_RANK', '?')}): {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
