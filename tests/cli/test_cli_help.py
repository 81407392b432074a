"""Every option of every command says what it does, and says only what is true of that command."""

from __future__ import annotations

import click

from trtllm_spec.cli import main


def _commands(cmd=main, path=()):
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def test_every_option_has_help():
    missing = [f"{path} {p.opts[0]}" for path, cmd in _commands() for p in cmd.params
               if isinstance(p, click.Option) and p.name != "help" and not (p.help or "").strip()]
    assert not missing, f"options without help: {missing}"


def test_help_mentions_a_recipe_only_where_the_command_reads_one():
    """e.g. doctor's --device once said 'Default: the recipe's field' though doctor takes no recipe."""
    wrong = []
    for path, cmd in _commands():
        reads_recipe = any(p.name in ("recipe", "recipe_file") for p in cmd.params)
        for p in cmd.params:
            if isinstance(p, click.Option) and "the recipe's" in (p.help or "") and not reads_recipe:
                wrong.append(f"{path} {p.opts[0]}")
    assert not wrong, wrong


def test_measure_help_names_no_other_subcommand_options(cli):
    """The bugs of the one-command measure: --bundle 'With --engine trtllm' (read by a report too), --drafter
    'EAGLE-1/MTP head', '--global-pool-size ... (default 64)' without saying whose default."""
    text = "\n".join(cli("measure", name, "--help").output for name in main.commands["measure"].commands)
    assert "--engine" not in text and "EAGLE-1" not in text
    assert "max(64, max batch size)" in cli("measure", "reference", "--help").output
    assert "'trtllm-spec build' folder the engine ran" in cli("measure", "from-bench", "--help").output


def test_verbose_is_on_the_root_and_on_the_commands_that_train():
    for path in ("build", "train"):
        cmd = dict(_commands())[path]
        assert any("--verbose" in p.opts for p in cmd.params), path
    assert any("--verbose" in p.opts for p in main.params)
