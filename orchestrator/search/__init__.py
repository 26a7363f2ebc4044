"""The search side of the loop: driving TVM's strategy per task, the proposal pool, and the
learned model that guides both the search and the filter."""

from .cost_model import SharedCostModel, candidate_features, make_cost_model
from .pool import ProposalPool
from .proposer import Proposer, TopUp
from .sisters import Sisters
from .strategy import SearchTimes, TaskSearch

__all__ = [
    "ProposalPool",
    "Proposer",
    "SearchTimes",
    "SharedCostModel",
    "Sisters",
    "TaskSearch",
    "TopUp",
    "candidate_features",
    "make_cost_model",
]
