"""What a run would spend and reach before it starts: `orchestrate estimate` (estimate.py, with
what earlier runs say in earlier.py), the spend and latency forecast by phase for a budget
(run.py), and the fixed costs every run pays whatever its budget (overheads.py), which a
session also reserves for its end."""
