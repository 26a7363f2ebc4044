"""Exit codes of `orchestrate`, also in --help, the README and the `finished` event."""

OK = 0  # tuned (or compiled, with --build-only), checked, report written
INTERNAL = 1  # a bug or a broken environment: the message and traceback are on stderr
INPUT = 2  # bad input or configuration: one line on stderr, nothing was changed
BUDGET_TOO_SMALL = 3  # the budget ran out before a single candidate was measured
CHECK_FAILED = 4  # the tuned model's outputs differ from onnxruntime's: it is kept aside,
# model.so is the untuned build (whose outputs match), or absent where those differ too
INTERRUPTED = 130  # SIGINT / SIGTERM: the round finished, the report is written; resumable

HELP = (
    "Exit codes: 0 done; 1 internal error; 2 bad input or configuration; "
    "3 budget too small to tune anything; 4 tuned model's outputs differ from onnxruntime "
    "(model.so is then the untuned build, or absent if its outputs differ too); "
    "130 interrupted (SIGINT/SIGTERM; resume with the same --out)."
)
