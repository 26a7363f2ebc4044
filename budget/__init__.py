"""Budgets, spend and the rules that stop a run."""

from .base import GO, AnyOf, Decision, StoppingRule, TaskProgress
from .grammar import Budget, BudgetError, Limit, parse_budget
from .ledger import Ledger, Spend
from .limits import BudgetLimits, check_applicable
from .units import fmt_amount, fmt_duration, fmt_latency

__all__ = [
    "GO",
    "AnyOf",
    "Budget",
    "BudgetError",
    "BudgetLimits",
    "Decision",
    "Ledger",
    "Limit",
    "Spend",
    "StoppingRule",
    "TaskProgress",
    "check_applicable",
    "fmt_amount",
    "fmt_duration",
    "fmt_latency",
    "parse_budget",
]
