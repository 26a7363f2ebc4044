"""The prior: a learned model shipped with the package, for a run that has learned nothing yet.

A run's search ranks its candidates with the shared predictor (search/cost_model.py). With
records in the tuning library, or a --warm-start, the predictor starts trained on them; a cold
run (an empty library, or --no-library) would score its first rounds at random, and a task's
search then climbs from whatever its first random round held. The prior fills that gap: the
same kind of predictor (`packsum` on MetaSchedule's per-store features), trained on other
models' measurements on an x86-64 CPU (priors/llvm-x86_64.about.json says which models, how
many records, on which CPU, with which TVM). It scores the search's schedules alone until the
run's own predictor is ready (`[search] cost_model_warmup` measurements), then beside it,
weighted as `[search] prior_weight` measurements against the run's (search/cost_model.py); the
filter never ranks with it.

It is used on x86-64 CPU targets when nothing else starts the predictor (`[search] prior`).
`benchmarks/train_prior.py` trains it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .model.targets import host_arch
from .predictor import Fitted, Predictor, feature_width

PRIORS = Path(__file__).parent / "priors"


def prior_for(target: Any) -> Path | None:
    """The shipped prior for a resolved target (model.targets.ResolvedTarget): one learned on
    a CPU of this host's architecture, or None (GPU targets, architectures without one)."""
    if target.device_type != "cpu" or target.simulated:
        return None
    path = PRIORS / f"llvm-{host_arch()}.json"
    return path if path.is_file() else None


def load_prior(path: Path) -> Fitted:
    """A shipped prior, ready to score (ValueError where this TVM's features are of another
    width than it learned: a prior of another TVM version)."""
    predictor = Predictor()
    predictor.load(path, width=feature_width())
    return predictor.fitted


def about(path: Path) -> dict[str, Any]:
    """What a shipped prior was trained on (its .about.json beside it; {} if there is none)."""
    try:
        return json.loads(path.with_suffix(".about.json").read_text())
    except (OSError, ValueError):
        return {}
