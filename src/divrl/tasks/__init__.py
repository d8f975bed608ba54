"""The tasks shipped with divrl, and what they add to the generic verbs: plain tables of names and import paths, so
that `divrl --help` and recipe parsing import no task module (nor torch) until one is used.

The generic verbs (`divrl train`, `divrl sft`, `divrl eval task`, the `divrl` command itself) read these tables and
ask a task for the rest through its hooks (`divrl.task`), so a task of your own gets the same treatment.
"""

from __future__ import annotations

# Task name -> "module:factory", imported on first use by `divrl.task.build_task`.
TASKS: dict[str, str] = {
    "hypospace-causal": "divrl.tasks.hypospace.causal:CausalTask",
    "hypospace-voxel": "divrl.tasks.hypospace.voxel:VoxelTask",
    "hypospace-boolean": "divrl.tasks.hypospace.boolean:BooleanTask",
    "molecules": "divrl.tasks.molecules.task:MoleculeTask",
    "ideas": "divrl.tasks.ideas:IdeasTask",
    "dataset": "divrl.tasks.dataset:DatasetTask",
    "countdown": "divrl.tasks.countdown:CountdownTask",
}

# The task a recipe trains when it names none.
DEFAULT_TASK = "hypospace-voxel"

# The tasks' own `divrl` subcommands: name -> module with `register(subparsers)` (as in `divrl.cli.COMMANDS`).
TASK_COMMANDS: dict[str, str] = {
    "hypospace": "divrl.tasks.hypospace.cli",
    "pretrain-clm": "divrl.tasks.molecules.pretrain",
}

# The tasks' own evaluators, `divrl eval NAME`: name -> module with `register(subparsers)`.
TASK_EVAL_COMMANDS: dict[str, str] = {
    "recovery": "divrl.tasks.hypospace.recovery_cli",
    "molecules": "divrl.tasks.molecules.cli",
}
