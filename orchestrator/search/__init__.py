"""The search side of the loop: driving TVM's strategy per task and the proposal pool."""

from .pool import ProposalPool
from .strategy import TaskSearch

__all__ = ["ProposalPool", "TaskSearch"]
