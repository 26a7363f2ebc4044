import re
import tomllib

import pytest
from click.testing import CliRunner

from tune_orchestrator.cli.commands import main
from tune_orchestrator.config import Settings
from tune_orchestrator.errors import InputError


def test_defaults_come_from_default_toml():
    settings = Settings.load()
    assert settings.tune.budget == "10min"
    assert settings.tune.target == "auto"
    assert settings.search.population == 0  # sized to the round
    assert settings.measure.cpu_cache_flush is False


def test_file_then_overrides_take_precedence(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[tune]\nbudget = "3min"\nseed = 7\n[search]\npopulation = 32\n')
    settings = Settings.load(path, {"tune.seed": 9})
    assert settings.tune.budget == "3min"  # from the file
    assert settings.tune.seed == 9  # an override beats the file
    assert settings.search.population == 32
    assert settings.search.eps_greedy == 0.05  # untouched defaults stay


@pytest.mark.parametrize(
    "text, message",
    [
        ("[tunes]\nseed = 1\n", "unknown section [tunes]"),
        ("[tune]\nsed = 1\n", "unknown key [tune] sed; known keys: budget"),
        (
            '[tune]\nseed = "one"\n',
            "[tune] seed must be int but got str 'one'; write seed as a number",
        ),
        (
            "[measure]\ncpu_cache_flush = 1\n",
            "cpu_cache_flush must be bool but got int 1; write cpu",
        ),
        (
            "[tune]\nbudget = 5\n",
            'budget must be str but got int 5; write it in quotes, with its unit: budget = "5min"',
        ),
        (
            "[tune]\ntarget = 5\n",
            'target must be str but got int 5; write it in quotes: target = "5"',
        ),
        ("[search]\npopulation = 1\n", "population must be 0 (sized to the round) or at least 2"),
        ("[search]\neps_greedy = 1.5\n", "eps_greedy must be within [0, 1] but got 1.5"),
        ("[tune]\nseed = true\n", "[tune] seed must be int but got bool"),
        # TVM's search takes a 64-bit seed: every task failed, and an untuned model shipped
        ("[tune]\nseed = 99999999999999999999\n", "seed must be at most 4294967295"),
        ("tune = 3\n", "[tune] must be a table"),
        ("[tune\n", "is not valid TOML"),
    ],
)
def test_bad_config_files_name_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=None) as info:
        Settings.load(path)
    assert message in str(info.value)


def test_missing_config_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist; check the --config path"):
        Settings.load(tmp_path / "nope.toml")
    variable = {"ORCHESTRATE_CONFIG": str(tmp_path / "nope.toml")}
    with pytest.raises(InputError, match=r"does not exist; check \$ORCHESTRATE_CONFIG"):
        Settings.load(env=variable)  # a user who gave no --config is not told to check it
    quoted = {"ORCHESTRATE_CONFIG": "~/nope.toml"}  # export ORCHESTRATE_CONFIG="~/..."
    with pytest.raises(InputError, match="~ is a shell's, not expanded inside quotes: give /"):
        Settings.load(env=quoted)


def test_floats_accept_integers():
    assert Settings.load(overrides={"check.latency_max_s": 30}).check.latency_max_s == 30


@pytest.mark.parametrize("key", ["rtol", "rtol_half", "rtol_quantized"])
@pytest.mark.parametrize("value", ["inf", "nan", "0", "1.5", "-1e-3"])
def test_an_output_tolerance_outside_0_1_is_refused_from_a_file_or_the_environment(
    tmp_path, key, value
):
    """inf and NaN would pass any output, a shape mismatch included; 0 none, 1.5 nearly any."""
    path = tmp_path / "c.toml"
    path.write_text(f"[check]\n{key} = {value}\n")
    refused = rf"\[check\] {key} must be a relative tolerance in \(0, 1\)"
    with pytest.raises(InputError, match=refused):
        Settings.load(path)
    with pytest.raises(InputError, match=refused):
        Settings.load(env={f"ORCHESTRATE_CHECK_{key.upper()}": value})


@pytest.mark.parametrize(
    "key, value, refused",
    [
        ("CHECK_LATENCY_MAX_S", "nan", r"\[check\] latency_max_s must be positive"),
        ("BUILD_TIMEOUT_S", "inf", r"\[build\] timeout_s must be a finite number"),
        ("MEASURE_RACE_MARGIN", "inf", r"\[measure\] race_margin must be a finite number"),
        ("DOP_OUTLIER_Z", "inf", r"\[dop\] outlier_z must be positive and finite"),
    ],
)
def test_nan_and_inf_are_refused_where_a_number_is_a_limit(key, value, refused):
    """inf ran, but wrote Infinity into config.json and report.json, which strict JSON readers
    (a pipeline's) refuse."""
    with pytest.raises(InputError, match=refused + f" but got {value}"):
        Settings.load(env={f"ORCHESTRATE_{key}": value})


def test_a_shrunk_first_round_larger_than_the_first_round_is_refused():
    with pytest.raises(InputError, match=r"least_first_round \(32\) must not exceed first_round"):
        Settings.load(env={"ORCHESTRATE_SCHEDULER_LEAST_FIRST_ROUND": "32"})


def test_the_integer_range_of_the_check_comes_from_the_file_or_the_environment(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[check]\nint_min = -3\nint_max = 40\n")
    check = Settings.load(path, env={"ORCHESTRATE_CHECK_INT_MAX": "5"}).check
    assert (check.int_min, check.int_max) == (-3, 5)
    with pytest.raises(InputError, match=r"\[check\] needs int_min <= int_max but got 6, 5"):
        Settings.load(env={"ORCHESTRATE_CHECK_INT_MIN": "6", "ORCHESTRATE_CHECK_INT_MAX": "5"})


def test_config_command_prints_toml_that_loads_back(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[tune]\nbudget = "2h"\n')
    result = CliRunner().invoke(main, ["config", "--config", str(path)])
    assert result.exit_code == 0, result.output
    printed = tomllib.loads(result.stdout)
    assert printed == Settings.load(path).to_dict()
    assert printed["tune"]["budget"] == "2h"


@pytest.mark.parametrize(
    "variable, value, message",
    [
        (
            "ORCHESTRATE_TUNE_BUDGET",
            "garbage",
            r"ORCHESTRATE_TUNE_BUDGET: \[tune\] budget 'garbage'",
        ),
        ("ORCHESTRATE_TUNE_FILTER", "xgbb", r"\[tune\] filter: unknown filter 'xgbb'"),
    ],
)
def test_config_command_refuses_what_tune_would_refuse(monkeypatch, variable, value, message):
    """It printed a budget or filter that every tune then refused, and exit 0."""
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(main, ["config"])
    assert result.exit_code == 2
    assert re.search(message, result.stderr), result.stderr


def test_a_config_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Notepad's UTF-8 begins with one: it was "not valid TOML ... (at line 1, column 1)"."""
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xef\xbb\xbf[tune]\r\nseed = 3\r\n")
    assert Settings.load(path).tune.seed == 3


def test_a_value_out_of_range_is_named_by_the_file_or_variable_it_came_from(tmp_path):
    """It read "configuration: [stopping] min_gain must be in (0, 1)" wherever it was set."""
    path = tmp_path / "c.toml"
    path.write_text("[stopping]\nmin_gain = 2.0\n")
    with pytest.raises(InputError, match=rf"^{path}: \[stopping\] min_gain must be in \(0, 1\)"):
        Settings.load(path)
    env = {"ORCHESTRATE_STOPPING_MIN_GAIN": "2"}
    with pytest.raises(InputError, match=r"^environment: ORCHESTRATE_STOPPING_MIN_GAIN: \["):
        Settings.load(env=env)
    with pytest.raises(InputError, match=r"^options: \[stopping\] min_gain must be in"):
        Settings.load(path, overrides={"stopping.min_gain": float("nan")}, env=env)
