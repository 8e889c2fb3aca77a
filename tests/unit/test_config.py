"""--config FILE.toml (leveller.config) and `leveller config check`, on the real commands' parsers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from leveller.cli import main
from leveller.commands.config import _parser
from leveller.config import load, option_actions
from leveller.errors import UserError
from tests.helpers.cli import parsed

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "config"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_every_example_passes_check(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(example), "--for", example.stem]) == 0
    assert f"valid for `leveller {example.stem}`" in capsys.readouterr().out


def test_examples_exist_for_the_three_commands() -> None:
    assert {p.stem for p in EXAMPLES.glob("*.toml")} == {"controller", "agent", "sdn"}


def test_file_values_apply_and_flags_win(tmp_path: Path) -> None:
    f = write(tmp_path, 'tau = 0.5\nlevels = 4\npolicy = "fair"\non_iteration = true\n'
                        'job_weight = ["a=2", "b=3"]\n[tls]\ncert = "c.pem"\n')
    args = parsed(["controller", "--config", str(f), "--tau", "0.25", "--job-weight", "c=5"])
    assert args.tau == 0.25  # the flag
    assert args.levels == 4 and args.policy == "fair" and args.on_iteration is True  # the file
    assert args.job_weight == ["c=5"]  # a repeatable flag replaces the file's list, not appended to it
    assert args.tls_cert == "c.pem"  # nested table
    assert parsed(["controller"]).tau == 1.0  # no file: the defaults
    assert parsed(["controller", "--config", str(f)]).job_weight == ["a=2", "b=3"]


def test_dashes_and_boolean_optional(tmp_path: Path) -> None:
    f = write(tmp_path, 'metrics-port = 9109\nverify = false\n')
    args = parsed(["controller", "--config", str(f)])
    assert args.metrics_port == 9109 and args.verify is False
    assert parsed(["controller", "--config", str(f), "--verify"]).verify is True


@pytest.mark.parametrize("text, command, message", [
    ('tau = "fast"\n', "controller", "tau = 'fast': expected a number (the flag --tau)"),
    ('levels = 2.5\n', "controller", "levels = 2.5: expected an integer"),
    ('levels = true\n', "controller", "levels = True: expected an integer"),
    ('policy = "lifo"\n', "controller", "policy = 'lifo': expected one of 'fair', 'crux', 'leveller', 'cassini'"),
    ('on_iteration = "yes"\n', "controller", "on_iteration = 'yes': expected true or false"),
    ('taux = 1\n', "controller", "unknown key 'taux' for `leveller controller` (did you mean 'tau'?)"),
    ('job_weight = [1.5, {a = 1}]\n', "controller", "job_weight[1] = {'a': 1}: expected a list of strings"),
    ('queue_mode = "fast"\n', "sdn", "queue_mode = 'fast': expected one of 'set_queue', 'tc'"),
    ('no_push = 1\n', "agent", "no_push = 1: expected true or false"),
    ('tau = \n', "controller", "not valid TOML"),
])
def test_bad_files_name_key_value_and_what_is_allowed(tmp_path: Path, text: str, command: str,
                                                      message: str) -> None:
    with pytest.raises(UserError) as exc:
        load(write(tmp_path, text), _parser(command), command)
    assert message in str(exc.value)


def test_cli_reports_a_bad_file_before_starting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path, 'of_port = "x"\n')
    assert main(["sdn", "--config", str(f), "--topology", "dumbbell"]) == 2
    assert "of_port = 'x': expected an integer" in capsys.readouterr().err
    assert main(["config", "check", str(tmp_path / "missing.toml"), "--for", "agent"]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_check_without_for_names_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(write(tmp_path, "of_port = 6653\n"))]) == 0
    assert "valid for `leveller sdn`" in capsys.readouterr().out
    assert main(["config", "check", str(write(tmp_path, "bogus = 1\n"))]) == 2
    assert "valid for none of controller, agent, sdn" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["controller", "agent", "sdn"])
def test_every_flag_has_a_key_with_help(command: str) -> None:
    parser = _parser(command)
    keys = option_actions(parser)
    flags = {a.dest for a in parser._actions if a.option_strings} - {"help", "config"}
    assert set(keys) == flags
    assert "--config" in parser.format_help() and "examples/config/" in parser.format_help()


def test_agent_without_controller_says_where_to_give_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--log", str(tmp_path / "j.log")]) == 2
    assert "--controller: give the controller's HOST:PORT" in capsys.readouterr().err
    f = write(tmp_path, 'controller = "127.0.0.1:1"\nhost = "h9"\n')
    assert parsed(["agent", "--config", str(f)]).controller == "127.0.0.1:1"


# --- config check validates exactly what the command validates (issue 26, finding 13) ---------------------------

@pytest.mark.parametrize(("text", "word"), [
    ("tau = -1\n", "--tau -1"),
    ("tau = inf\n", "--tau inf"),
    ("lease = -5\n", "--lease -5"),
    ("lease = inf\n", "--lease inf"),
    ("metrics_port = 99999999999\n", "--metrics-port 99999999999"),
    ("metrics_port = -1\n", "--metrics-port -1"),
    ("levels = 9\n", "--levels 9"),
    ("rate_window = 0.5\ntau = 1\n", "--rate-window"),
    ("verify_window = 7200\n", "--verify-window"),
])
def test_config_check_runs_the_controllers_checks(tmp_path: Path, text: str, word: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.toml"
    f.write_text(text)
    assert main(["config", "check", str(f), "--for", "controller"]) == 2
    err = capsys.readouterr().err
    assert word in err and str(f) in err


def test_config_check_runs_the_sdn_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "s.toml"
    f.write_text('of_port = 70000\n')
    assert main(["config", "check", str(f), "--for", "sdn"]) == 2
    assert "--of-port = 70000" in capsys.readouterr().err


def test_two_spellings_of_one_key_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.toml"
    f.write_text("metrics_port = 9109\nmetrics-port = 9110\n")
    assert main(["config", "check", str(f), "--for", "controller"]) == 2
    err = capsys.readouterr().err
    assert "'metrics_port' and 'metrics-port'" in err


# --- /dev/zero, FIFOs and huge files (issue 26, finding 12) ---------------------------------------------------------

def test_config_check_refuses_a_device(capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/null stands for every device: refused by its type, before any read (/dev/zero was read until
    memory ran out: 2.4 GB, and this test would have taken the machine with it)."""
    assert main(["config", "check", "/dev/null", "--for", "controller"]) == 2
    assert "character device" in capsys.readouterr().err


def test_config_fifo_does_not_hang(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(main(["config", "check", str(fifo), "--for", "sdn"])),
                         daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # unblock the reader of the code before the fix, then fail
        with open(fifo, "w"):
            pass
        t.join(5)
        pytest.fail("config check of a FIFO blocked")
    assert done == [2] and "a FIFO" in capsys.readouterr().err


def test_huge_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "c.toml"
    f.write_text("# " + "x" * (2 << 20) + "\n")
    assert main(["config", "check", str(f), "--for", "controller"]) == 2
    assert "larger than" in capsys.readouterr().err
