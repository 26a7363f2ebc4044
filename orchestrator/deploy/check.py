"""The output check: a build's outputs against onnxruntime's on the same samples. NaN must be
NaN, +Inf +Inf and -Inf -Inf at the same places, the rest within a relative error; an output
that onnxruntime gives as NaN everywhere proves nothing, so it makes the check "not checkable"
rather than passed."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..model.functions import opset_of
from ..model.loading import OnnxModel
from ..model.upgrade import OLDEST
from .library import onnxruntime_session, run_onnxruntime, run_vm
from .samples import Samples, integer_inputs

MATCHED = "matched"  # every output within rtol, NaN and Inf where onnxruntime's are
DIFFERS = "differs"  # an output differs: a shape, a NaN or Inf place, or beyond rtol
FAILED = "failed"  # the build failed when run (raised, or took the server down with it)
NOT_CHECKABLE = "not checkable"  # no difference found, but an output is NaN everywhere
UNCHECKED = "unchecked"  # nothing ran it: the RPC fleet could not be reached
SKIPPED = "skipped"  # it ran, its outputs not compared: [check] outputs = false (--no-check)
STATUSES = (MATCHED, DIFFERS, FAILED, NOT_CHECKABLE, UNCHECKED, SKIPPED)
_OK = {MATCHED: True, DIFFERS: False, FAILED: False}
# onnxruntime's errors that no other samples would avoid, as what it does to the model
_REFUSALS = {"NOT_IMPLEMENTED": "has no CPU kernel for an operator of", "INVALID_GRAPH": "refuses"}
# Copies of each sample, nudged (nudged()), that a model rounding to integers as it
# runs is also checked on. A value at a rounding boundary lands a step apart in two right
# computations (float sums in another order), and later layers carry the step: a TFLite int8
# EfficientNet-B0 was 0.07-0.37 from onnxruntime on 9 of 24 random inputs. Such a coincidence
# does not outlive a nudge (each of those 9 matched on a copy); a wrong build differs on all.
NUDGES = 5
NUDGE = 2.0**-12  # relative: values near the top of an 8-bit range move by 1/32 of a step
OFF = "the comparison with onnxruntime is turned off ([check] outputs = false, --no-check)"
# Why a run stops before tuning where the untuned build differs (`stop` untuned-differs), and
# what to do: schedules change how the operators run, not what they compute.
UNTUNED_DIFFERS_WHY = (
    "tuning changes how the operators run, not what they compute, so no tuned build would match"
)
UNTUNED_DIFFERS_FIX = (
    "where that is rounding, loosen the [check] tolerance it names; --check-inputs gives the "
    "check real samples; --no-check tunes and ships unchecked"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Check:
    """One build's output check: its status, the largest relative error over every output and
    sample (None where nothing was compared), and the reason where it did not match."""

    status: str
    rtol: float
    max_rel_error: float | None = None
    outputs: int = 0
    samples: int = 0
    inputs: str | None = None  # where the samples came from
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(
                f"status must be one of {', '.join(STATUSES)} but got {self.status!r}."
            )

    @property
    def ok(self) -> bool | None:
        """True: matched; False: differs or failed to run; None: not known either way."""
        return _OK.get(self.status)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


def status_of(check: Mapping[str, Any] | None) -> str | None:
    """The status of a check as the journal holds it (None: no check; earlier sessions wrote
    `ok` alone)."""
    if not check:
        return None
    if "status" in check:
        return check["status"]
    return MATCHED if check.get("ok") else DIFFERS


def compare(
    ours: Sequence[Sequence[np.ndarray]],
    reference: Sequence[Sequence[np.ndarray]],
    *,
    rtol: float,
    names: Sequence[str] = (),
    rtol_name: str = "rtol",
    first: int = 0,
) -> Check:
    """Each sample's outputs against onnxruntime's: max |ours - ref| / max |ref| over the finite
    places of each output, after the shapes and the NaN and Inf places were found equal
    (`rtol_name`: the [check] setting `rtol` came from, for the reason; `first`: the number
    of the first sample, for the reason)."""
    worst, where = 0.0, ""
    for k, (mine, theirs) in enumerate(zip(ours, reference, strict=True), start=first):
        if len(mine) != len(theirs):
            why = f"{len(mine)} outputs where onnxruntime gives {len(theirs)}"
            return _differs(why, rtol=rtol, reference=reference)
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            name = names[i] if i < len(names) else f"#{i}"
            pieces, why = _pieces(name, a, b)
            if why is not None:
                return _differs(
                    f"output {name!r}, sample {k}: {why}", rtol=rtol, reference=reference
                )
            for label, x, y in pieces:
                why = _unlike(x, y)
                if why is not None:
                    return _differs(
                        f"output {label!r}, sample {k}: {why}", rtol=rtol, reference=reference
                    )
                error = _rel_error(x, y)
                if error > worst:
                    worst, where = error, f"output {label!r}, sample {k}"
    outputs = len(reference[0]) if reference else 0
    counts = {"rtol": rtol, "outputs": outputs, "samples": len(reference)}
    if worst > rtol:
        why = f"max relative error {worst:.2e} > {rtol_name} {rtol:g} ({where})"
        return Check(status=DIFFERS, max_rel_error=worst, reason=why, **counts)
    why = nan_everywhere(reference, names)
    if why is not None:
        return Check(status=NOT_CHECKABLE, max_rel_error=worst, reason=why, **counts)
    return Check(status=MATCHED, max_rel_error=worst, **counts)


def nan_everywhere(reference: Sequence[Sequence[Any]], names: Sequence[str] = ()) -> str | None:
    """Why onnxruntime's outputs `reference` prove nothing: an output NaN everywhere on every
    sample, so no value of it can be compared (None: every output has a number)."""
    blank = []
    for i in range(len(reference[0]) if reference else 0):
        name = names[i] if i < len(names) else f"#{i}"
        pieces = [piece for sample in reference for piece in _pieces(name, sample[i], sample[i])[0]]
        if pieces and all(_nan_only(y) for *_, y in pieces):
            blank.append(name)
    if not blank:
        return None
    return (
        f"onnxruntime gives output {', '.join(map(repr, blank))} as NaN everywhere on every "
        "sample, so no value can be compared; give --check-inputs with samples on which it is "
        "a number"
    )


def _pieces(
    name: str, a: Any, b: Any
) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], str | None]:
    """An output's arrays, ours beside onnxruntime's: the output itself, or each item of a
    sequence output (a list), named name[j]; and why they cannot be paired (None: they can)."""
    if not isinstance(a, list) and not isinstance(b, list):
        return [(name, np.asarray(a), np.asarray(b))], None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = zip(a, b, strict=True)
        return [
            (f"{name}[{j}]", np.asarray(x), np.asarray(y)) for j, (x, y) in enumerate(pairs)
        ], None
    ours, theirs = (
        f"a sequence of {len(v)}" if isinstance(v, list) else "a tensor" for v in (a, b)
    )
    return [], f"{ours} where onnxruntime's is {theirs}"


def _nan_only(b: np.ndarray) -> bool:
    return b.size > 0 and bool(np.isnan(b.astype(np.float64)).all())


def _differs(why: str, *, rtol: float, reference: Sequence[Sequence[np.ndarray]]) -> Check:
    outputs = len(reference[0]) if reference else 0
    return Check(
        status=DIFFERS,
        max_rel_error=float("inf"),
        rtol=rtol,
        outputs=outputs,
        samples=len(reference),
        reason=why,
    )


def _unlike(a: np.ndarray, b: np.ndarray) -> str | None:
    """How `a` differs from `b` in kind: its shape, or where NaN, +Inf or -Inf are."""
    if a.shape != b.shape:
        return f"shape {a.shape} where onnxruntime's is {b.shape}"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for word, where in (
        ("NaN", np.isnan),
        ("+Inf", np.isposinf),
        ("-Inf", np.isneginf),
    ):
        differ = int(np.count_nonzero(where(a64) != where(b64)))
        if differ:
            return f"{word} at {differ} place(s) where onnxruntime's is not, or the other way"
    return None


def _changes(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    """Whether `a` is another value than `b`: another shape, NaN or Inf places, or beyond
    `rtol`."""
    return _unlike(a, b) is not None or _rel_error(a, b) > rtol


def _rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| over the places where `b` is finite (0 where it is nowhere)."""
    a64, b64 = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    finite = np.isfinite(b64)
    if not finite.any():
        return 0.0
    scale = max(float(np.max(np.abs(b64[finite]))), 1e-12)
    return float(np.max(np.abs(a64[finite] - b64[finite]))) / scale


class Checker:
    """The check's samples, onnxruntime's outputs for them (computed once), and the comparison
    of a build's outputs against those."""

    def __init__(
        self,
        model: OnnxModel,
        *,
        samples: Samples,
        rtol: float,
        rtol_name: str = "rtol",
        compares: bool = True,
        nudges: int = 0,
    ) -> None:
        """`compares` False: builds are run on the samples (a build that fails when run still
        fails its check) but their outputs are not compared (SKIPPED). `nudges`: copies of each
        sample, nudged (nudged()); a sample whose outputs differ passes where
        those on one of its copies match."""
        self.model = model
        self.samples = samples
        self.rtol = rtol
        self.rtol_name = rtol_name
        self.compares = compares
        self.nudges = nudges if any(_nudgeable(a) for a in samples.arrays[0]) else 0
        self.runs = [nudged(x, j) for x in samples.arrays for j in range(1 + self.nudges)]
        self._reference: list[list[np.ndarray]] | None = None
        self._no_reference: str | None = None

    @property
    def inputs(self) -> tuple[np.ndarray, ...]:
        """The first sample: what the model is timed on."""
        return self.samples.arrays[0]

    @classmethod
    def for_model(cls, model: OnnxModel, *, samples: Samples, settings: Any) -> Checker:
        """The check by `settings` ([check]): within `rtol`; within `rtol_half` for a model
        that computes in 16-bit floats, whose outputs carry three decimal digits and which TVM
        accumulates in them where onnxruntime's CPU kernels accumulate in 32 bits; within
        `rtol_quantized` for one that rounds to integers as it runs (the looser of the two for
        a model that does both); none at all with `outputs` false."""
        looser = [
            (getattr(settings, name), name)
            for name, applies in (
                ("rtol_half", model.half_precision),
                ("rtol_quantized", model.quantized),
            )
            if applies
        ]
        rtol, name = max(looser) if looser else (settings.rtol, "rtol")
        nudges = NUDGES if model.quantized else 0
        return cls(
            model, samples=samples, rtol=rtol, rtol_name=name, compares=settings.outputs,
            nudges=nudges,
        )  # fmt: skip

    def outputs(self, vm: Any, dev: Any) -> list[list[np.ndarray]]:
        """The build's outputs on every sample and nudged copy (its own failures raised)."""
        outputs = len(self.model.outputs)
        return [run_vm(vm, dev, sample, outputs) for sample in self.runs]

    def compare(self, outputs: Sequence[Sequence[np.ndarray]]) -> Check:
        if not self.compares:
            return self.verdict(SKIPPED, OFF)
        reference = self._references()
        if reference is None:
            return self.verdict(NOT_CHECKABLE, self._no_reference)
        per = 1 + self.nudges
        check = self._compare(outputs[::per], reference[::per])
        if check.status == DIFFERS and self.nudges:
            check = self._nudged(outputs, reference, check)
        caveat = self.reference_caveat() if check.status == MATCHED else None
        if caveat is not None:
            reason = "; ".join(filter(None, [check.reason, caveat]))
            check = dataclasses.replace(check, reason=reason)
        return dataclasses.replace(check, inputs=self.samples.source)

    def reference_caveat(self) -> str | None:
        """Why a match on these samples proves less than it seems: onnxruntime gives every
        output the same on each of them (within the check's rtol: an untrained model's zeroed
        head, a layer that saturates), so a build that ignored its inputs would match too
        (None: an output changes with the inputs, or one sample, or nothing compared)."""
        reference = self._references() if self.compares else None
        if not reference or len(self.samples.arrays) < 2:
            return None
        first, *others = reference[:: 1 + self.nudges]
        for i, name in enumerate(self.model.outputs):
            for sample in others:
                pieces, why = _pieces(name, sample[i], first[i])
                if why is not None or any(_changes(x, y, self.rtol) for _, x, y in pieces):
                    return None
        zeros = all(not isinstance(out, list) and not np.any(out) for out in first)
        return (
            f"onnxruntime gives every output {'zero everywhere' if zeros else 'the same'} on "
            f"all {len(self.samples.arrays)} samples, so a build that ignored its inputs would "
            "match too; give --check-inputs with samples whose outputs differ"
        )

    def _compare(self, outputs: Sequence[Any], reference: Sequence[Any], first: int = 0) -> Check:
        names, rtol_name = self.model.outputs, self.rtol_name
        return compare(
            outputs, reference, rtol=self.rtol, names=names, rtol_name=rtol_name, first=first
        )

    def _nudged(self, outputs: Sequence[Any], reference: Sequence[Any], found: Check) -> Check:
        """`found`, the samples' check, after each sample that differs had its nudged copies
        compared: MATCHED where one copy of every such sample matched, else the first sample
        whose copies differ too."""
        per, worst, saved = 1 + self.nudges, 0.0, []
        for k in range(len(self.samples.arrays)):
            runs = range(k * per, (k + 1) * per)
            base, *copies = (self._compare([outputs[i]], [reference[i]], first=k) for i in runs)
            passed = base if base.status != DIFFERS else None
            passed = passed or next((c for c in copies if c.status == MATCHED), None)
            if passed is None:
                why = f"{base.reason}, and on the {self.nudges} nudged copies of it"
                return dataclasses.replace(base, samples=found.samples, reason=why)
            saved += [] if passed is base else [str(k)]
            worst = max(worst, passed.max_rel_error or 0.0)
        why = (
            f"sample {', '.join(saved)} matched on a nudged copy (a value at a rounding boundary "
            "lands a step apart in TVM and onnxruntime, later layers carry the step)"
        )
        return dataclasses.replace(found, status=MATCHED, max_rel_error=worst, reason=why)

    def check(self, vm: Any, dev: Any) -> Check:
        return self.compare(self.outputs(vm, dev))

    def verdict(self, status: str, reason: str | None) -> Check:
        """A check that compared nothing: FAILED, NOT_CHECKABLE, UNCHECKED or SKIPPED, and
        why."""
        return Check(
            status=status,
            rtol=self.rtol,
            samples=len(self.samples.arrays),
            inputs=self.samples.source,
            reason=reason,
        )

    def _references(self) -> list[list[np.ndarray]] | None:
        """onnxruntime's outputs on every sample; None (and why) where it cannot run them."""
        if self._reference is None and self._no_reference is None:
            try:
                session = onnxruntime_session(self.model)
                self._reference = [
                    run_onnxruntime(self.model, sample, session=session) for sample in self.runs
                ]
            except Exception as exc:  # nothing to compare with
                self._no_reference = self._why_no_reference(exc)
        return self._reference

    def reference_problem(self) -> str | None:
        """Why no build of the model can be checked on these samples, known before any is
        made: onnxruntime cannot run the model on them, or gives an output as NaN everywhere
        (None: it gives numbers to compare with, or nothing is compared). Its outputs are kept
        for the checks."""
        if not self.compares:
            return None
        reference = self._references()
        if reference is None:
            return self._no_reference
        return nan_everywhere(reference, self.model.outputs)

    def _why_no_reference(self, exc: Exception) -> str:
        """Why onnxruntime gave no outputs, and what would let it: other inputs, a later opset
        (it runs none before 7), or nothing (it has no CPU kernel for an operator of the
        model)."""
        how = next((how for code, how in _REFUSALS.items() if code in str(exc)), None)
        if how is not None:
            opset = opset_of(self.model.proto)
            older = (
                f"; the model is of opset {opset} and onnxruntime runs opset {OLDEST} and later:"
                " convert it (onnx.version_converter)"
                if opset < OLDEST
                else ""
            )
            return (
                f"onnxruntime {how} the model ({one_line(exc)}), so there is nothing to compare "
                f"the outputs with{older}"
            )
        fix = (
            "set [check] int_min and int_max to the values it takes, or give --check-inputs"
            if integer_inputs(self.model) and not self.samples.given
            else "give --check-inputs with samples it takes"
        )
        return f"onnxruntime cannot run the model on the check's inputs ({one_line(exc)}); {fix}"


def nudged(sample: tuple[np.ndarray, ...], times: int) -> tuple[np.ndarray, ...]:
    """`sample`, or (times > 0) a copy of it nudged: a different input, close enough to compute
    the same things, far enough that a few values round the other way. Float arrays scaled by
    1 + times * NUDGE, or times the dtype's own step where that is coarser (float16's is 4x
    NUDGE: a NUDGE rounds away); in integer ones, one value in 64 (drawn by seed `times`)
    moved by one within the array's own range; booleans as they are."""
    if times == 0:
        return sample
    return tuple(_nudge(array, times) for array in sample)


def _nudge(array: np.ndarray, times: int) -> np.ndarray:
    if np.dtype(array.dtype).kind == "f":
        step = max(NUDGE, float(np.finfo(array.dtype).eps))
        return (array.astype(np.float64) * (1 + times * step)).astype(array.dtype)
    if not _nudgeable(array):
        return array
    rng = np.random.default_rng(times)
    step = rng.choice([-1, 1], size=array.shape) * (rng.random(array.shape) < 1 / 64)
    moved = np.clip(array.astype(np.int64) + step, array.min(), array.max())
    return moved.astype(array.dtype)


def _nudgeable(array: np.ndarray) -> bool:
    """Whether nudged() changes the array: floats and integers (of more than one value)."""
    kind = np.dtype(array.dtype).kind
    return kind == "f" or (kind in "iu" and array.size > 1 and array.min() < array.max())


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
