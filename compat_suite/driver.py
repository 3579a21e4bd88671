"""The client process of one deployment: imports the project, runs scenarios, writes JSON.

Run by :meth:`compat_suite.deployment.Deployment.run_driver` with the deployment's project
(unchanged or swapped) first on ``sys.path``, so ``proj`` and ``scenarios`` are that copy.
Output: ``{"identity": ..., "scenarios": {name: {"outcome", "error", "seconds"}}}``.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from typing import Any


def run(names: list[str], worker: str, cli: list[str], timeout: float, pool: str = "prefork",
        django: bool = False) -> dict[str, Any]:
    import proj
    from proj import effects
    from proj.tasks.reports import whoami
    from scenarios import SCENARIOS, Context

    app = proj.celery_app
    ctx = Context(app=app, worker=worker, cli=tuple(cli), timeout=timeout, pool=pool,
                  django=django)
    observed: dict[str, Any] = {
        "identity": {
            "client_app": f"{type(app).__module__}.{type(app).__qualname__}",
            "worker": whoami.delay().get(timeout=timeout),
        },
        "scenarios": {},
    }
    for name in names or list(SCENARIOS):
        reason = SCENARIOS[name].not_applicable(ctx)
        if reason is not None:
            observed["scenarios"][name] = {"outcome": None, "error": None,
                                           "not_applicable": reason, "seconds": 0}
            continue
        effects.clear()
        start = time.monotonic()
        outcome: Any = None
        error = None
        try:
            outcome = SCENARIOS[name].run(ctx)
            json.dumps(outcome)
        except Exception as exc:  # a scenario's failure is its observed outcome
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}"
            outcome = None
        observed["scenarios"][name] = {"outcome": outcome, "error": error,
                                       "seconds": round(time.monotonic() - start, 2)}
    app.close()
    return observed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m compat_suite.driver")
    parser.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--worker", required=True, help="node name of the deployment's worker")
    parser.add_argument("--cli", required=True, help="the deployment's CLI, as a JSON list")
    parser.add_argument("--out", required=True, help="where to write the JSON observations")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--pool", default="prefork", help="the worker's pool")
    parser.add_argument("--django", action="store_true", help="a Django deployment")
    args = parser.parse_args(argv)
    observed = run(args.scenarios, args.worker, json.loads(args.cli), args.timeout,
                   args.pool, args.django)
    with open(args.out, "w") as out:
        json.dump(observed, out, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
