"""Deprecated location: `RecoveryEvalCallback` now lives beside the HypoSpace task, in
`divrl.tasks.hypospace.recovery_callback`. This module re-exports it for one release."""

import warnings

from divrl.tasks.hypospace.recovery_callback import RecoveryEvalCallback

warnings.warn("divrl.trainers.recovery_callback moved to divrl.tasks.hypospace.recovery_callback", DeprecationWarning,
              stacklevel=2)

__all__ = ["RecoveryEvalCallback"]
