"""Quick tier: in-process tests, no launcher, no job (python -m pytest -q tests/unit)."""
