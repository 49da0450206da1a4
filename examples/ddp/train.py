"""A PyTorch DDP trial for stratctl: a small model trained on synthetic data by one process
per node, which resumes from its latest checkpoint and saves one when it is preempted.

Every process of the trial runs this script. It reads stratctl's rendezvous contract
(`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`: `init_method="env://"`, as torchrun
would), uses NCCL on a GPU and gloo on the CPU where there is none, and with
`stratctl.trial`:

- resumes: rank 0 loads the latest checkpoint and sends it to every rank, so training goes
  on from the step it reached (the checkpoint directory need only be rank 0's);
- saves atomically every `--save-every` steps (rank 0; the last 3 are kept);
- on SIGTERM (a preemption, a drain): every rank stops at the same step boundary, rank 0
  saves that step, and the processes exit 143 within the grace period. A rank whose peer
  vanished (killed before it could agree) saves what it had and exits too;
- writes the final metrics with `result()`, where the backend reads them.

The data and the model's start are drawn from `--seed`, each step's batches from the seed,
the step and the rank: a run preempted and resumed ends with the same weights as a run that
never stopped (gloo on the CPU sums in a fixed order).

    python train.py [--steps 3000] [--lr 0.05] [--hidden 64] [--batch-size 64] [--save-every 200]

Run by hand, outside a study, it is one process of rank 0 (on 127.0.0.1:29500).
Needs `torch>=2.0` and stratctl where the trial runs: `pip install 'stratctl[ddp]'`.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import signal
import sys
import time
from datetime import timedelta

try:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
except ImportError:
    sys.exit(
        f"{sys.argv[0]}: PyTorch is not installed in {sys.executable}: "
        "pip install 'stratctl[ddp]' (or torch>=2.0) where the trial runs"
    )
try:
    from stratctl import trial
except ImportError:
    sys.exit(
        f"{sys.argv[0]}: stratctl is not installed in {sys.executable}: "
        "pip install 'stratctl[ddp]' where the trial runs"
    )

FEATURES = 16
EVAL_SIZE = 2048


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps of the whole run (all attempts)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--hidden", type=int, default=64, help="width of the hidden layers")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per rank and step")
    parser.add_argument("--save-every", type=int, default=200, help="steps between checkpoints")
    parser.add_argument("--log-every", type=int, default=100, help="steps between progress lines and reports")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for the other ranks (rendezvous, each collective)"
    )
    return parser.parse_args(argv)


def teacher(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The function to learn: a random two-layer network, the same on every rank."""
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(FEATURES, 8, generator=g) / math.sqrt(FEATURES), torch.randn(8, 1, generator=g)


def batch(seed: int, step: int, rank: int, size: int, truth: tuple[torch.Tensor, torch.Tensor]):
    """The batch of `rank` at `step`: a function of those alone, so a resumed run sees the data
    the uninterrupted one would have."""
    g = torch.Generator().manual_seed(((seed * 1_000_003 + step) * 4099 + rank) % 2**63)
    x = torch.randn(size, FEATURES, generator=g)
    w1, w2 = truth
    return x, torch.tanh(x @ w1) @ w2 + 0.01 * torch.randn(size, 1, generator=g)


def model(hidden: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1)
    )


def snapshot(step: int, net: nn.Module, opt: torch.optim.Optimizer) -> bytes:
    buffer = io.BytesIO()
    torch.save({"step": step, "model": net.state_dict(), "optimizer": opt.state_dict()}, buffer)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    c = trial.contract()
    # by hand there is no contract in the environment: one process of rank 0, as trial.contract() says
    for name, value in (
        ("MASTER_ADDR", c.master_addr),
        ("MASTER_PORT", str(c.master_port)),
        ("WORLD_SIZE", str(c.num_nodes)),
        ("RANK", str(c.rank)),
    ):
        os.environ.setdefault(name, value)
    # SIGTERM only raises a flag: the ranks agree at a step boundary, where the weights and the
    # step count go together, rather than saving whatever a signal interrupted
    trial.on_preempt(exit=False)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")  # one process per node: its first GPU
    began = time.monotonic()
    dist.init_process_group("nccl" if cuda else "gloo", init_method="env://", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert (rank, world) == (c.rank, c.num_nodes), (
        f"torch says rank {rank} of {world}, stratctl {c.rank} of {c.num_nodes}"
    )
    met = time.monotonic() - began

    net = model(args.hidden, args.seed).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    # rank 0 reads the latest checkpoint; every rank gets it from rank 0
    state = [None]
    if rank == 0:
        last = trial.latest()
        if last is not None:
            state[0] = torch.load(io.BytesIO(last.read()), map_location="cpu", weights_only=True)
    dist.broadcast_object_list(state, src=0, device=device if cuda else None)
    start = 0
    if state[0] is not None:
        net.load_state_dict(state[0]["model"])
        opt.load_state_dict(state[0]["optimizer"])
        start = state[0]["step"]
    ddp = DistributedDataParallel(net, device_ids=[0] if cuda else None)
    loss_fn = nn.MSELoss()
    truth = tuple(t.to(device) for t in teacher(args.seed))
    say = print if rank == 0 else (lambda *a, **k: None)
    say(
        f"rank {rank} of {world} ({c.task} {c.task_index}), {'nccl on ' + str(device) if cuda else 'gloo on the CPU'}, "
        f"master {c.master_addr}:{c.master_port}, met in {met:.1f}s; "
        f"{f'resuming at step {start}' if start else 'from step 0'} "
        f"(attempt {os.environ.get('STRATCTL_ATTEMPT', '-')}, "
        f"STRATCTL_RESUME={os.environ.get('STRATCTL_RESUME', '-')})",
        flush=True,
    )

    step, saved, loss = start, start, float("nan")

    def save() -> None:
        nonlocal saved
        if rank == 0 and step > saved:
            where = trial.save(snapshot(step, net, opt), step)
            saved = step
            print(f"saved step {step}: {where.path}", flush=True)

    try:
        while step < args.steps:
            stop = torch.tensor([1.0 if trial.preempted() else 0.0], device=device)
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # any rank told to stop: all stop here
            if stop.item():
                save()
                say(f"preempted at step {step}: stopping", flush=True)
                dist.destroy_process_group()
                return 128 + signal.SIGTERM  # 143, what the signal itself would have ended it with
            x, y = (t.to(device) for t in batch(args.seed, step, rank, args.batch_size, truth))
            opt.zero_grad(set_to_none=True)
            out = loss_fn(ddp(x), y)
            out.backward()  # the gradients' all-reduce
            opt.step()
            step += 1  # only now: the weights are those of `step` steps
            if step % args.log_every == 0 or step == args.steps:
                loss = out.item()
                say(f"step {step}/{args.steps} loss {loss:.5f}", flush=True)
                if rank == 0:
                    trial.report(step, loss=loss)
            if step % args.save_every == 0:
                save()
    except Exception:
        # a peer gone (killed before it could agree) breaks the collective: what this rank
        # has is the whole step before it, worth keeping for the next attempt
        save()
        raise

    with torch.no_grad():
        g = torch.Generator().manual_seed(args.seed + 2)
        x = torch.randn(EVAL_SIZE, FEATURES, generator=g).to(device)
        w1, w2 = truth
        eval_loss = loss_fn(net(x), torch.tanh(x @ w1) @ w2).item()
    save()
    if rank == 0:
        where = trial.result(
            loss=eval_loss,
            train_loss=loss,
            steps=step,
            resumed_from=start,
            world_size=world,
            seconds=round(time.monotonic() - began, 1),
        )
        print(
            f"done: eval loss {eval_loss:.6f} after {step} steps (resumed from {start}); result: {where or 'stderr'}",
            flush=True,
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
