"""A trial of a closed-loop search example: "training" that converges on a 2-D bowl,
f(x, y) = (x - 1)^2 + (y + 2)^2, its minimum 0 at (1, -2).

It reports its loss at each step (`stratctl.trial.report`, which the study's pruner reads)
and its final loss as its result (`stratctl.trial.result`). Run it by hand to see both on
stderr: `python bowl.py --x 0.5 --y -1 --steps 3`."""

import argparse
import time

from stratctl import trial


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--x", type=float, required=True)
    parser.add_argument("--y", type=float, required=True)
    parser.add_argument("--steps", type=int, default=0, help="steps reported before the result")
    parser.add_argument("--step-seconds", type=float, default=0.5)
    args = parser.parse_args()
    loss = (args.x - 1) ** 2 + (args.y + 2) ** 2
    for step in range(args.steps):  # the loss falls towards its final value; a bad point stays bad
        trial.report(step, loss=loss + (args.steps - step) * 0.5)
        print(f"step {step}: loss {loss + (args.steps - step) * 0.5:.4f}", flush=True)
        time.sleep(args.step_seconds)
    trial.result(loss=loss, x=args.x, y=args.y)
    print(f"done: loss {loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
