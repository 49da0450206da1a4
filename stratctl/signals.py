"""Pressure signals: what the cluster can absorb right now, kept current by watches.

Nodes and pods are mirrored with one list and then a watch each (not a full list every
cycle), so observing a 1,000-node cluster costs the API server almost nothing. From the
mirrors come free GPUs per node (allocatable `nvidia.com/gpu` minus the requests of the
node's non-terminated pods, as `kubectl describe node` sums them) and how many more gangs
of the study's shape those free GPUs could hold once the pods already waiting for a node
are placed: fragmentation-aware, so 8 free GPUs spread one per node hold no gang of two
4-GPU pods, and demand-aware, so launchers sharing a cluster do not all count the same
free GPUs.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from stratctl import labels
from stratctl.cluster import NODE, POD, PODGROUP, PRIORITY_CLASS, Cluster
from stratctl.errors import ClusterError

GPU = "nvidia.com/gpu"
log = logging.getLogger(__name__)


def _quantity(value) -> int:
    """Whole units of an extended resource such as nvidia.com/gpu ("2", 2)."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def pod_gpus(pod: dict) -> int:
    """GPUs a pod holds: the sum over containers, or the largest init container if larger."""
    spec = pod.get("spec") or {}

    def req(container: dict) -> int:
        resources = container.get("resources") or {}
        return _quantity((resources.get("requests") or {}).get(GPU) or (resources.get("limits") or {}).get(GPU) or 0)

    main = sum(req(c) for c in spec.get("containers") or [])
    init = max((req(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _ready(node: dict) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def free_gpus(nodes: Iterable[dict], pods: Iterable[dict]) -> dict[str, int]:
    """Node name → GPUs not requested by any non-terminated pod bound to it."""
    free = {
        n["metadata"]["name"]: _quantity(((n.get("status") or {}).get("allocatable") or {}).get(GPU, 0))
        for n in nodes
        if _ready(n)
    }
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in free and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            free[node] -= pod_gpus(pod)
    return {name: max(0, gpus) for name, gpus in free.items()}


def gangs_fit(free: dict[str, int], shape: list[int], limit: int = 10_000) -> int:
    """How many whole gangs of `shape` (GPUs per pod) the free GPUs could place.

    Places pods largest first, each on the node with the least room that still takes it
    (best fit), which is what a bin-packing scheduler does; stops at the first gang that
    does not fit whole.
    """
    pods = sorted((g for g in shape if g > 0), reverse=True)
    if not pods:
        return limit  # a gang that needs no GPU is never blocked by GPUs
    room = sorted(v for v in free.values() if v > 0)
    gangs = 0
    while gangs < limit:
        trial = list(room)
        for need in pods:
            fits = [i for i, r in enumerate(trial) if r >= need]
            if not fits:
                return gangs
            best = min(fits, key=lambda i: trial[i])
            trial[best] -= need
        room = sorted(r for r in trial if r > 0)
        gangs += 1
    return gangs


def pending_demand(pods: Iterable[dict]) -> list[int]:
    """GPUs asked for by pods that are waiting for a node (created, not yet bound)."""
    return [
        g
        for pod in pods
        if not (pod.get("spec") or {}).get("nodeName")
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
        and (g := pod_gpus(pod)) > 0
    ]


GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # which PodGroup a pod belongs to (Volcano)


def _group_key(pod: dict) -> tuple[str, str | None]:
    meta = pod.get("metadata") or {}
    return meta.get("namespace", ""), (meta.get("annotations") or {}).get(GROUP_ANNOTATION)


def queued_demand(groups: Iterable[dict], pods: Iterable[dict]) -> list[int]:
    """GPUs per pod of the gangs Volcano has queued but whose pods do not exist yet.

    A gang admitted a moment ago by another launcher is a PodGroup (Pending, or Inqueue
    before the job controller creates its pods) long before it is a pending pod; its
    `minMember` pods with `minResources` GPUs between them will take GPUs as soon as they
    free up. Pods that exist are left out here: bound ones are in the free GPUs already,
    unbound ones in `pending_demand`.
    """
    return [per_pod for _, missing, per_pod in _queued_missing(groups, pods) for _ in range(missing)]


def _queued_missing(groups: Iterable[dict], pods: Iterable[dict]):
    """(key, pods of its gang not created yet, GPUs per pod) of each gang Volcano
    has queued (Pending or Inqueue) with GPU pods still to create."""
    existing: dict[tuple[str, str], int] = {}
    for pod in pods:
        key = _group_key(pod)
        if key[1]:
            existing[key] = existing.get(key, 0) + 1
    for pg in groups:
        if ((pg.get("status") or {}).get("phase") or "Pending") not in ("Pending", "Inqueue"):
            continue
        key, spec = _pg_key(pg), pg.get("spec") or {}
        members = int(spec.get("minMember") or 0)
        gpus = _quantity((spec.get("minResources") or {}).get(GPU, 0))
        missing = members - existing.get(key, 0)
        if members > 0 and gpus > 0 and missing > 0:
            yield key, missing, -(-gpus // members)


def _pg_key(pg: dict) -> tuple[str, str]:
    meta = pg.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


@dataclass(frozen=True)
class Precedence:
    """A gang of higher priority than the study's, waiting for GPUs it could be given."""

    gang: str  # namespace/name of its PodGroup
    gpus: int
    priority_class: str
    priority: int = 0  # the class's value

    def __str__(self) -> str:
        return f"{self.gang} ({self.gpus} GPUs, {self.priority_class})"

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name) of its PodGroup, as pods and groups are keyed here."""
        namespace, _, name = self.gang.partition("/")
        return namespace, name


def priority_values(classes: Iterable[dict]) -> tuple[dict[str, int], int]:
    """PriorityClass name → value, and the value of pods that name none (the global default)."""
    values, default = {}, 0
    for pc in classes:
        values[(pc.get("metadata") or {}).get("name", "")] = int(pc.get("value") or 0)
        if pc.get("globalDefault"):
            default = int(pc.get("value") or 0)
    return values, default


def higher_priority_waiting(groups: Iterable[dict], nodes: Iterable[dict], pods: Iterable[dict],
                            own_priority: int, values: dict[str, int], default: int,
                            queue: str | None = None) -> list[Precedence]:
    """Gangs that outrank the study and wait (PodGroup Pending or Inqueue) for GPUs they
    would get if lower-priority work stepped aside, largest first.

    Volcano places a big gang only once enough GPUs are free at the same moment, and
    enqueues smaller gangs into every GPU that frees meanwhile, so a launcher that keeps
    refilling freed GPUs starves a production job of higher priority indefinitely. A gang
    that could not fit even with every lower-priority pod gone (larger than the cluster,
    or blocked by work of its own rank) is left out: waiting for it would stall the study
    for nothing.
    """
    nodes, pods = list(nodes), list(pods)
    waiting = []
    for pg in groups:
        spec, meta = pg.get("spec") or {}, pg.get("metadata") or {}
        if ((pg.get("status") or {}).get("phase") or "Pending") not in ("Pending", "Inqueue"):
            continue
        cls = spec.get("priorityClassName")
        rank = values.get(cls, default) if cls else default
        gpus = _quantity((spec.get("minResources") or {}).get(GPU, 0))
        if rank <= own_priority or gpus <= 0 or (queue and (spec.get("queue") or "default") != queue):
            continue
        own = (meta.get("namespace", ""), meta.get("name", ""))
        # GPUs that stay taken whatever lower-priority work does: pods of at least its rank
        kept = [p for p in pods if int((p.get("spec") or {}).get("priority") or 0) >= rank and _group_key(p) != own]
        if gpus <= sum(free_gpus(nodes, kept).values()):
            waiting.append(Precedence(f"{own[0]}/{own[1]}", gpus, cls or "default priority", rank))
    return sorted(waiting, key=lambda w: -w.gpus)


def expected_end(pod: dict) -> float:
    """When a running pod is expected to end (seconds since the epoch): its start plus the
    `expected-seconds` annotation stratctl stamps on trial pods; infinity for pods that do
    not say (another workload, a study without a stated duration)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    try:
        seconds = float((meta.get("annotations") or {})[labels.EXPECTED_SECONDS])
        started = datetime.fromisoformat(status["startTime"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return math.inf
    return started + seconds


def shadow_time(nodes: Iterable[dict], pods: Iterable[dict], ahead: Precedence, now: float) -> float | None:
    """Seconds from `now` until the waiting higher-priority gang can start, if nothing new
    takes its GPUs: the moment the free GPUs plus those released by lower-priority pods, in
    the order they are expected to end, reach what it asks for (the "shadow time" of EASY
    backfilling). None when that depends on a pod with no expected end. GPUs are counted
    cluster-wide, which is exact for gangs of one-GPU pods and optimistic for larger pods."""
    pods = list(pods)
    free = sum(free_gpus(nodes, pods).values())
    releases = sorted(
        (expected_end(p), pod_gpus(p)) for p in pods
        if (p.get("spec") or {}).get("nodeName") and pod_gpus(p) > 0
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and int((p.get("spec") or {}).get("priority") or 0) < ahead.priority
    )
    at = now
    for end, gpus in releases:
        if free >= ahead.gpus:
            break
        free, at = free + gpus, end
    if free < ahead.gpus or math.isinf(at):
        return None
    return max(0.0, at - now)


def demand_besides(pods: list[dict], groups: Iterable[dict], left_out: set[tuple[str, str]]) -> list[int]:
    """The waiting pods' and queued gangs' GPU demand, the gangs in `left_out` aside."""
    others = [p for p in pods if _group_key(p) not in left_out]
    return pending_demand(others) + queued_demand([g for g in groups if _pg_key(g) not in left_out], others)


def blocked_above(groups: Iterable[dict], pods: Iterable[dict], free: int, own_priority: int,
                  values: dict[str, int], default: int) -> set[tuple[str, str]]:
    """Gangs that outrank the study and cannot start in the `free` GPUs there are now.

    Volcano places such a gang only once enough GPUs are free at the same moment, and places
    smaller gangs into the GPUs that free up meanwhile: its waiting pods take nothing yet.
    Whether the study leaves it those GPUs anyway is the yielding decision, not the free-GPU
    count's. A gang's rank is its PodGroup's class or, for pods whose PodGroup is not
    visible (another namespace), the pods' own priority."""
    pods, groups = list(pods), list(groups)
    need: dict[tuple[str, str], int] = {}
    rank: dict[tuple[str, str], int] = {}
    for pod in pods:
        key = _group_key(pod)
        if key[1] and not (pod.get("spec") or {}).get("nodeName") \
                and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            need[key] = need.get(key, 0) + pod_gpus(pod)
            rank[key] = max(rank.get(key, -math.inf), int((pod.get("spec") or {}).get("priority") or 0))
    for key, missing, per_pod in _queued_missing(groups, pods):
        need[key] = need.get(key, 0) + missing * per_pod
    for pg in groups:  # a queued gang's PodGroup class ranks it, when the PodGroup is visible
        if ((pg.get("status") or {}).get("phase") or "Pending") in ("Pending", "Inqueue"):
            cls = (pg.get("spec") or {}).get("priorityClassName")
            rank[_pg_key(pg)] = values.get(cls, default) if cls else default
    return {key for key, gpus in need.items() if rank.get(key, default) > own_priority and gpus > free}


def backfill_gangs(nodes: Iterable[dict], pods: Iterable[dict], groups: Iterable[dict],
                   ahead: Iterable[Precedence], shape: list[int]) -> int:
    """Whole gangs of `shape` the free GPUs hold until the gangs waiting ahead can start.
    Those gangs cannot start yet, so their pods waiting for a node take nothing from the
    free GPUs meanwhile; everyone else's waiting pods and queued gangs still do."""
    blocked = {w.key for w in ahead}
    pods = list(pods)
    free = after_demand(free_gpus(nodes, pods), demand_besides(pods, groups, blocked))
    return gangs_fit(free, shape)


def after_demand(free: dict[str, int], demand: list[int]) -> dict[str, int]:
    """Free GPUs left once the pods already waiting are placed (largest first, best fit).

    Other launchers' gangs that were admitted a moment ago are not on a node yet; without
    this, every launcher would count the same free GPUs and all of them would admit into
    them at once.
    """
    room = dict(free)
    for need in sorted(demand, reverse=True):
        fits = [n for n, r in room.items() if r >= need]
        if fits:
            best = min(fits, key=lambda n: room[n])
            room[best] -= need
        else:  # it will wait for GPUs to free up anywhere: count it against the largest hole
            largest = max(room, key=lambda n: room[n], default=None)
            if largest is not None:
                room[largest] = max(0, room[largest] - need)
    return room


def fragmentation(free: dict[str, int], shape: list[int]) -> float:
    """Share of free GPUs that cannot serve one more gang of `shape` (0: none wasted)."""
    total = sum(free.values())
    if total == 0:
        return 0.0
    usable = gangs_fit(free, shape) * sum(shape)
    return max(0.0, (total - min(total, usable)) / total)


def without_managed_fields(obj: dict) -> dict:
    """Drop `metadata.managedFields` (a third of a job's bytes; nothing here reads it)."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


class Mirror:
    """A list-then-watch cache of one kind of object, refreshed by a background thread.

    `transform` trims each object as it arrives (what client-go calls a transform), so a
    mirror of 10,000 jobs holds only what its reader needs.
    """

    def __init__(self, cluster: Cluster, kind: tuple[str, str], all_namespaces: bool = True,
                 label_selector: str | None = None, watch_timeout: int = 60, namespace: str | None = None,
                 transform=without_managed_fields):
        self.cluster = cluster
        self.kind = kind
        self.all_namespaces = all_namespaces
        self.namespace = namespace
        self.label_selector = label_selector
        self.watch_timeout = watch_timeout
        self.transform = transform
        self._objects: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._version = ""
        self.events = 0
        self.deletions = 0  # objects seen deleted, ever (relists included)
        self._changed = threading.Event()
        self.relists = 0

    def _key(self, obj: dict) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def relist(self) -> None:
        items, version = self.cluster.list(self.kind, self.namespace, label_selector=self.label_selector,
                                           all_namespaces=self.all_namespaces)
        with self._lock:
            fresh = {self._key(o): self.transform(o) for o in items}
            self.deletions += len(self._objects.keys() - fresh.keys())
            self._objects = fresh
            self._version = version
        self.relists += 1
        self._changed.set()

    def start(self) -> Mirror:
        self.relist()
        self._thread = threading.Thread(target=self._run, name=f"mirror-{self.kind[1]}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for kind, obj in self.cluster.watch(self.kind, self._version, namespace=self.namespace,
                                                   label_selector=self.label_selector,
                                                   timeout_seconds=self.watch_timeout,
                                                   all_namespaces=self.all_namespaces):
                    if self._stop.is_set():
                        return
                    self._apply(kind, obj)
            except ClusterError as exc:
                if self._stop.is_set():
                    return
                log.debug("watch %s ended: %s; relisting", self.kind[1], exc)
                self._stop.wait(1.0)
                try:
                    self.relist()
                except ClusterError:
                    continue

    def _apply(self, kind: str, obj: dict) -> None:
        version = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if version:
                self._version = version
            if kind == "BOOKMARK":
                return
            self.events += 1
            self._changed.set()
            if kind == "DELETED":
                self._objects.pop(self._key(obj), None)
                self.deletions += 1
            else:
                self._objects[self._key(obj)] = self.transform(obj)

    def add(self, obj: dict) -> None:
        """Read your own writes: an object this process just created, unless the watch
        already brought it (then what is here is at least as new)."""
        with self._lock:
            self._objects.setdefault(self._key(obj), self.transform(obj))

    def wait(self, timeout: float) -> bool:
        """Block until an object changed since the last call (True) or `timeout` passed."""
        fired = self._changed.wait(timeout)
        self._changed.clear()
        return fired

    def items(self) -> list[dict]:
        with self._lock:
            return list(self._objects.values())

    def snapshot(self) -> tuple[list[dict], int]:
        """The objects and the deletion count they reflect, read together."""
        with self._lock:
            return list(self._objects.values()), self.deletions

    def stop(self) -> None:
        self._stop.set()


@dataclass(frozen=True)
class Capacity:
    free_gpus: int
    gangs_fit: int
    fragmentation: float
    nodes: int
    precedence: Precedence | None = None  # the largest higher-priority gang waiting, if any
    shadow: float | None = None  # seconds until it can start by the expected ends of the pods below it
    backfill_fit: int | None = None  # whole gangs the free GPUs hold now, that gang's own demand aside


class ClusterSignals:
    """GPU capacity from mirrored nodes and pods, and API health from the client's own requests."""

    def __init__(self, cluster: Cluster, shape: list[int], namespace: str | None = None,
                 priority_class: str | None = None, yield_to_higher: bool = True, queue: str | None = None):
        self.cluster = cluster
        self.shape = shape
        self.priority_class = priority_class
        self.yield_to_higher = yield_to_higher
        self.queue = queue
        self._priorities: tuple[dict[str, int], int] | None = None
        self.nodes = Mirror(cluster, NODE)
        self.pods = Mirror(cluster, POD, label_selector=None)
        # gangs queued in the study's namespace (where submit may read PodGroups); other
        # namespaces' queued gangs show up once their pods exist
        self.groups = Mirror(cluster, PODGROUP, all_namespaces=False, namespace=namespace) if namespace else None
        self._seen_429 = 0

    def start(self) -> ClusterSignals:
        self.nodes.start()
        self.pods.start()
        if self.groups is not None:
            self.groups.start()
        self._priorities = self._read_priorities()
        return self

    def _read_priorities(self) -> tuple[dict[str, int], int] | None:
        """Priority classes, read once: they are few and rarely change. Without the right to
        list them the study cannot tell who outranks it, and never yields."""
        try:
            classes, _ = self.cluster.list(PRIORITY_CLASS, all_namespaces=True)
        except ClusterError as exc:
            log.warning("cannot list priority classes (%s): not yielding to higher-priority gangs, and counting "
                        "their waiting pods against the free GPUs", exc)
            return None
        return priority_values(classes)

    def stop(self) -> None:
        self.nodes.stop()
        self.pods.stop()
        if self.groups is not None:
            self.groups.stop()

    def capacity(self, now: float | None = None) -> Capacity:
        """`now`: the wall clock (seconds since the epoch), for the shadow time."""
        nodes, pods = self.nodes.items(), self.pods.items()
        groups = self.groups.items() if self.groups is not None else []
        free = free_gpus(nodes, pods)
        precedence = shadow = backfill_fit = None
        ahead: list[Precedence] = []
        left_out: set[tuple[str, str]] = set()
        if self._priorities is not None:
            values, default = self._priorities
            own = values.get(self.priority_class, default) if self.priority_class else default
            if self.yield_to_higher:
                ahead = higher_priority_waiting(groups, nodes, pods, own, values, default, self.queue)
                precedence = ahead[0] if ahead else None
            # higher-priority gangs that cannot start now take none of the free GPUs, unless
            # the study yields to them (then the policy holds while they gather)
            waited_for = {w.key for w in ahead}
            left_out = blocked_above(groups, pods, sum(free.values()), own, values, default) - waited_for
        after = after_demand(free, demand_besides(pods, groups, left_out))
        if precedence is not None and now is not None:
            shadow = shadow_time(nodes, pods, precedence, now)
            backfill_fit = backfill_gangs(nodes, pods, groups, ahead, self.shape)
        return Capacity(sum(after.values()), gangs_fit(after, self.shape), fragmentation(after, self.shape), len(nodes),
                        precedence, shadow, backfill_fit)

    def new_429s(self, total: int) -> int:
        """429s since the previous call, from a running total (the throttle's count)."""
        fresh, self._seen_429 = max(0, total - self._seen_429), total
        return fresh

    def latency_p90(self) -> float | None:
        return self.cluster.metrics.latency_quantile(0.9)

