"""Measured kernel tables as the step model's GPU work: NVIDIA AIConfigurator, run in a venv of its own
(``aic.py`` starts ``aic_runner.py`` there; ``scripts/setup_aic.sh`` installs it), for ``planner.work:
aiconfigurator``. Nothing here imports AIConfigurator."""
