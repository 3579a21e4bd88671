"""celery-plus against the queues Python users pick instead (issue #29).

    python -m benchmarks.peers [--jobs 3000] [--rounds 3] [--systems plus,huey,...]


One module a job: :mod:`.systems` names each system, its worker settings and its guarantee;
``*_app`` are the peers' apps (the same counted no-op as ``benchmarks.bench_app``);
:mod:`.send` times enqueue in a fresh process; :mod:`.servers` gives each run its own Redis
servers and PostgreSQL schema; :mod:`.rounds` runs the interleaved rounds; :mod:`.report`
prints the medians and the ratios.
"""
