"""`DivRLConfig`'s own fields that belong to no method (the methods' field helpers: `divrl.methods._fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from divrl.methods._fields import _help

CONSOLE_LOGS = ("trl", "compact")


@dataclass
class RunFields:
    """divrl's own fields of `DivRLConfig` that belong to no method (light: `divrl train --help` lists them without
    importing TRL)."""

    # --- Where a completion ends (divrl) ---
    stop_strings: list[str] | None = field(default=None, metadata=_help(
        "Strings that end a completion, as EOS does: generation stops at the first one (transformers "
        "`stop_strings`, vLLM `stop`), the tokens after it are masked out of the loss, and the reward functions "
        "read the text up to and including it. None = the task's `stop_strings` (HypoSpace: the END line that "
        "closes each worked example of its base prompts); [] = none. divrl choice. Default None."))

    # --- Console (divrl) ---
    console_log: str = field(default="trl", metadata=_help(
        "What the console shows at each logging step: 'trl' = transformers' progress bar and the full metric dict "
        "(TRL's behaviour); 'compact' = one line (step, validity, distinct valid answers per group (the mean over "
        "groups), entropy, seconds) at each logged step and at the first and last, with "
        "every metric appended to <output_dir>/metrics.jsonl as it is logged. divrl choice. Default 'trl'."))
