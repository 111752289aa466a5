"""Schedules: primitives over the loop IR, sampling instructions, and replayable traces."""

from ..errors import ScheduleError
from .index_map import IndexMap
from .schedule import ROOT, Schedule
from .trace import BlockRV, ExprRV, Instruction, LoopRV, RootRV, Trace

__all__ = ["ROOT", "BlockRV", "ExprRV", "IndexMap", "Instruction", "LoopRV", "RootRV",
           "Schedule", "ScheduleError", "Trace"]
