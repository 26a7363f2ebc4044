"""Exit codes of `orchestrate`, also in --help, the README, docs/report.md and the `finished`
event (tests/test_exits.py holds them to agreeing)."""

OK = 0  # tuned (or compiled, with --build-only), checked, report written
INTERNAL = 1  # a bug or a broken environment: the message and traceback are on stderr (a full
# disk, or a folder removed while the command wrote in it: one line; a run in which no candidate
# built and ran, stop "nothing-ran": one line, model.so is the untuned build)
INPUT = 2  # bad input or configuration: one line on stderr, nothing was changed (a model the
# output check cannot run on is refused so, before any work, unless --no-check)
BUDGET_TOO_SMALL = 3  # the budget ran out before a single candidate was measured
CHECK_FAILED = 4  # the tuned build failed its output check (its outputs differ, or it failed
# when run): it did not ship; model.so is the untuned build where that matched, else absent
UNCHECKED = 5  # the tuned build could not be checked (the RPC fleet unreachable): it did not
# ship; model.so is the untuned build where that matched, else absent
# SIGINT / SIGTERM / SIGHUP, or stdout's reader went away: the round finished, the report is
# written; resumable
INTERRUPTED = 130

HELP = (
    "Exit codes: 0 done; 1 internal error; 2 bad input or configuration; 3 budget too small "
    "to tune anything; 4 the tuned model failed its output check (its outputs differ from "
    "onnxruntime's, or it failed when run); 5 the tuned model could not be checked (the RPC "
    "fleet unreachable); after 4 or 5 model.so is the untuned "
    "build where that passed its check, else absent; 130 interrupted (SIGINT/SIGTERM/SIGHUP, "
    "or the reader of stdout went away: the round finishes and the report is written; resume "
    "with the same --out)."
)
