"""Exceptions raised by fuseplanner. Each message is one line that says what is wrong and what to do."""

from __future__ import annotations


class FusePlannerError(Exception):
    """Base class of every error fuseplanner raises on purpose."""


class ModelError(FusePlannerError, ValueError):
    """The model file or ModelProto cannot be read or lacks what planning needs."""


class SpecError(FusePlannerError, ValueError):
    """A GPU spec is missing or invalid."""


class PlanError(FusePlannerError, ValueError):
    """Planning options are invalid or a plan cannot be built."""


class DeviceError(FusePlannerError, RuntimeError):
    """No usable CUDA device, or a device call failed."""


class TileError(FusePlannerError, ValueError):
    """A tile is infeasible for a kernel; the message is the cost model's reason."""


class ModelNote(UserWarning):
    """A choice made for the user that changes the answer (e.g. a dynamic batch set to 1); the CLI
    prints it as one `note:` line."""


class AnalysisError(FusePlannerError, ValueError):
    """Saved validation runs cannot be analysed as asked (a missing file, nothing to analyse)."""


class RecordsError(FusePlannerError, ValueError):
    """A measurement-record file cannot be read: unreadable, not a record file, or another schema version."""
