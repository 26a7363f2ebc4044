"""The search side of the loop: driving TVM's strategy per task, the proposal pool, and the
learned model that guides both the search and the filter."""

from .cost_model import SharedCostModel, feature_rows, make_cost_model
from .pool import ProposalPool
from .proposer import Proposer, TopUp
from .strategy import SearchTimes, TaskSearch

__all__ = [
    "ProposalPool",
    "Proposer",
    "SearchTimes",
    "SharedCostModel",
    "TaskSearch",
    "TopUp",
    "feature_rows",
    "make_cost_model",
]
