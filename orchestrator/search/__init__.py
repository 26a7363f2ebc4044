"""The search side of the loop: driving TVM's strategy per task, the proposal pool, and the
learned model that guides both the search and the filter."""

from .cost_model import SharedCostModel, feature_rows, make_cost_model
from .pool import ProposalPool
from .strategy import SearchTimes, TaskSearch

__all__ = [
    "ProposalPool",
    "SearchTimes",
    "SharedCostModel",
    "TaskSearch",
    "feature_rows",
    "make_cost_model",
]
