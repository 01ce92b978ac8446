"""Benchmarks run by ``scripts/bench.sh NAME``: each NAME is a module here with ``main(argv)``
that prints and writes JSON. Benchmarks are commands, never timed tests."""
