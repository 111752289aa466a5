"""Design spaces: schedule rules, space generators, sampling of candidates."""

from .add_rfactor import AddRFactor
from .auto_inline import AutoInline
from .low_reuse_dot import LowReuseDot
from .multi_level_tiling import MultiLevelTiling
from .outer_reduction import OuterReduction
from .parallel_vectorize_unroll import ParallelVectorizeUnroll
from .random_compute_location import RandomComputeLocation
from .replay_cache import ReplayCache
from .schedule_rule import ScheduleRule
from .space_generator import PostOrderApply, Postproc, ScheduleFn, SpaceGenerator, sample
from .tiled_transpose import TiledTranspose
from .verify_register_tile import VerifyRegisterTile

__all__ = ["AddRFactor", "AutoInline", "LowReuseDot", "MultiLevelTiling", "OuterReduction",
           "ParallelVectorizeUnroll",
           "PostOrderApply", "Postproc", "RandomComputeLocation", "ReplayCache",
           "ScheduleFn", "ScheduleRule", "SpaceGenerator", "TiledTranspose", "VerifyRegisterTile",
           "sample"]
