"""``python -m compat_suite.run``: deploy the project per configuration, run every scenario on
each, compare with plain Celery, print the table (and write ``--report``).

Every configuration is one deployment (one worker — prefork with two processes unless a
``--pool`` says otherwise — and one beat, started once and shared by all scenarios);
deployments run side by side. ``--pool`` (repeatable) runs each configuration on each pool,
and ``--django`` adds each as a Django project: every such variant is compared with plain
Celery deployed the same way (``celery-redis/gevent``, ``celery-redis/django``). Exit status
1 if any cell differs from its reference without an explanation, errors, or unexpectedly
passes.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .compare import NOT_APPLICABLE, Cell, compare
from .configs import CONFIGS, POOLS, REFERENCE, Config, Servers
from .deployment import PROJECT, Deployment
from .report import REFERENCE_MARK, Run, text, write

#: Expected identity of each kind of deployment (what its worker and client really run).
PLAIN_APP, PLUS_APP = "celery.app.base.Celery", "celery_plus.app.Celery"


def _is_scenario(decorator: object) -> bool:
    import ast

    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Name) and target.id == "scenario"


def scenario_docs() -> dict[str, str]:
    """Scenario name -> first docstring line, read from the project's source (no import)."""
    import ast

    docs: dict[str, str] = {}
    for path in sorted((PROJECT / "scenarios").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                    _is_scenario(d) for d in node.decorator_list):
                docs[node.name] = (ast.get_docstring(node) or "").split("\n")[0]
    return docs


def dimensions(pools: list[str], django: bool, plain: bool = True) -> list[tuple[str, bool]]:
    """The (pool, django) variants a run deploys every configuration as (``plain`` False:
    only the Django ones)."""
    chosen = pools or ["prefork"]
    return ([(pool, False) for pool in chosen] if plain or not django else []) + (
        [(pool, True) for pool in chosen] if django else [])


def identity_problem(config: Config, identity: dict[str, Any]) -> str | None:
    """Why the deployment is not running what ``config`` says (None if it is)."""
    expected = PLUS_APP if config.plus else PLAIN_APP
    worker = identity.get("worker") or {}
    plus_tasks = "celery_plus" in worker.get("task_bases", [])
    if identity.get("client_app") != expected or worker.get("app") != expected:
        return f"expected {expected} in client and worker, got {identity}"
    if plus_tasks != config.plus:
        return f"task base classes {worker.get('task_bases')} for {config.name}"
    return None


def deploy_and_observe(config: Config, servers: Servers, scenarios: list[str],
                       timeout: float, logs: Path | None = None) -> dict[str, Any]:
    """Deploy ``config``, run the scenarios, tear down; the driver's observations + timing.

    ``logs``: a directory to keep the deployment's worker and beat logs in.
    """
    started = time.monotonic()
    deployment = Deployment(config, servers)
    try:
        deployment.start(beat=not scenarios or "beat" in scenarios)
        observed = deployment.run_driver(scenarios, timeout=timeout)
        problem = identity_problem(config, observed["identity"])
        if problem:
            raise RuntimeError(problem)
        observed["swapped_files"] = [str(p.relative_to(deployment.root))
                                     for p in deployment.swapped]
    except Exception as exc:
        worker_log = deployment.logs().get("worker", "")
        tail = "\n".join(worker_log.splitlines()[-30:])
        observed = {"error": f"{type(exc).__name__}: {exc}\n--- worker log (tail) ---\n{tail}"}
    finally:
        deployment.kill()
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            for name, content in deployment.logs().items():
                (logs / f"{config.name.replace('/', '@')}.{name}.log").write_text(content)
        deployment.close()
    observed["seconds"] = time.monotonic() - started
    return observed


def run(names: list[str], scenarios: list[str], servers: Servers, jobs: int,
        deadline: float = 600.0, logs: Path | None = None, pools: list[str] | None = None,
        django: bool = False, plain: bool = True) -> Run:
    """Run the scenarios on the reference and on ``names``, per pool / Django variant; compare
    each with plain Celery deployed the same way."""
    groups = []
    for pool, as_django in dimensions(pools or [], django, plain):
        reference = REFERENCE.variant(pool, as_django)
        candidates = [CONFIGS[n].variant(pool, as_django) for n in names if n != REFERENCE.name]
        groups.append((reference, candidates))
    configs = [c for reference, candidates in groups for c in (reference, *candidates)]
    docs = scenario_docs()
    unknown = [s for s in scenarios if s not in docs]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {', '.join(docs)}")
    chosen = scenarios or list(docs)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as executor:
        futures = {c.name: executor.submit(deploy_and_observe, c, servers, scenarios,
                                           deadline, logs) for c in configs}
        observed = {name: future.result() for name, future in futures.items()}
    result = Run(reference=groups[0][0].name, configs={}, scenarios={s: docs[s] for s in chosen},
                 references=[reference.name for reference, _ in groups])
    for config in configs:
        obs = observed[config.name]
        result.configs[config.name] = {
            "doc": config.doc, "seconds": round(obs["seconds"], 1), "error": obs.get("error"),
            "identity": obs.get("identity"), "swapped_files": obs.get("swapped_files", [])}
    for reference, candidates in groups:
        ref = observed[reference.name]
        for scenario in chosen:
            ref_cell = _observation(ref, scenario)
            status = ("error" if ref_cell.get("error") else
                      NOT_APPLICABLE if ref_cell.get("not_applicable") else REFERENCE_MARK)
            result.cells.append(Cell(scenario, reference.name, status,
                                     error=ref_cell.get("error"),
                                     seconds=ref_cell.get("seconds")))
            for config in candidates:
                result.cells.append(compare(scenario, config.name, ref_cell,
                                            _observation(observed[config.name], scenario)))
    result.seconds = time.monotonic() - started
    return result


def _observation(observed: dict[str, Any], scenario: str) -> dict[str, Any]:
    if observed.get("error"):
        return {"error": f"deployment failed: {observed['error']}"}
    found: dict[str, Any] = observed["scenarios"].get(scenario) or {"error": "not run"}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m compat_suite.run",
        description="Run the compatibility scenarios on plain Celery and celery-plus.")
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS), default=[],
                        help="configuration to compare with the reference (repeatable; "
                        "default: all); the reference, celery-redis, always runs")
    parser.add_argument("--scenario", action="append", default=[],
                        help="run only this scenario (repeatable; default: all)")
    parser.add_argument("--report", type=Path, help="also write the report (.md or .json)")
    parser.add_argument("--logs", type=Path,
                        help="keep each deployment's worker and beat logs in this directory")
    parser.add_argument("--pool", action="append", choices=POOLS, default=[],
                        help="run every configuration on this worker pool (repeatable; "
                        "default: prefork), each compared with plain Celery on that pool")
    parser.add_argument("--django", action="store_true",
                        help="also deploy every configuration as a Django project")
    parser.add_argument("--django-only", action="store_true",
                        help="deploy every configuration as a Django project only")
    parser.add_argument("--jobs", type=int, default=0,
                        help="deployments run at once (default: all)")
    parser.add_argument("--redis", default=Servers.redis, help="Redis server URL (no db)")
    parser.add_argument("--postgres", default=Servers.postgres, help="PostgreSQL URL")
    args = parser.parse_args(argv)
    names = args.config or list(CONFIGS)
    django, plain = args.django or args.django_only, not args.django_only
    deployments = (len(names) + 1) * len(dimensions(args.pool, django, plain))
    result = run(names, args.scenario, Servers(redis=args.redis, postgres=args.postgres),
                 jobs=args.jobs or deployments, logs=args.logs, pools=args.pool,
                 django=django, plain=plain)
    print(text(result))
    if args.report:
        write(result, args.report)
        print(f"report written to {args.report}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
