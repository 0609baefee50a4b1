"""`selector completion bash`: a bash completion script for the commands, their options and the
override keys (each preset group with its presets, every `layer.*`, `platform.*` and
`policy.*` key with its values where they are a closed set).

    eval "$(python -m selector completion bash)"        # this shell
    python -m selector completion bash > ~/.local/share/bash-completion/completions/selector

The script is generated from the argument parser and the config tree of the run that prints it
(a `--config-dir` given to `completion` adds its presets), so it never names an option or a
preset the program lacks. It completes `selector ...` and `python -m selector ...`.
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
from typing import Dict, List, Sequence

SHELLS = ("bash",)
GROUPS = ("platform", "stack", "layer", "policy", "engine")


def _subparsers(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subcommands here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser) -> Dict[str, Dict[str, List[str]]]:
    """command -> {option: its choices ([] : a free value; ['-'] : a flag)}."""
    out: Dict[str, Dict[str, List[str]]] = {}
    for name, sub in _subparsers(parser).items():
        opts: Dict[str, List[str]] = {}
        for a in sub._actions:
            for o in a.option_strings:
                if o in ("-h",):
                    continue
                opts[o] = [str(c) for c in a.choices] if a.choices else \
                    (["-"] if a.nargs == 0 else [])
        out[name] = opts
    return out


def override_words(config_dirs: Sequence[str] = ()) -> Dict[str, List[str]]:
    """Every override key (as `key=`) -> its values where they are a closed set."""
    from selector.config.catalogues import discover
    from selector.core import schema
    from selector.core.model import Policy
    from selector.core.schema import Layer
    tree = discover(list(config_dirs))
    words: Dict[str, List[str]] = {g: tree.group_options(g) for g in GROUPS}
    backends = {op: sorted(n for (o, n) in tree.backend_files if o == op) for op in schema.OPS}
    for f in dataclasses.fields(Layer):
        words[f"layer.{f.name}"] = []
    words["layer.op"] = list(schema.OPS)
    words["layer.quant"] = list(schema.QUANTS)
    words["layer.activation"] = list(schema.ACTIVATIONS)
    words["layer.dtype"] = list(schema.DTYPES)
    words["layer.act_and_mul"] = ["true", "false"]
    words["platform.capability"] = []
    words["platform.cuda"] = []
    for p in sorted(set(schema.CORE_PACKAGES)):
        words[f"platform.packages.{p}"] = []
    for f in dataclasses.fields(Policy):
        words[f"policy.{f.name}"] = []
    words["policy.moe_backend"] = ["auto"] + backends["moe"]
    words["policy.linear_backend"] = ["auto"] + backends["linear"]
    words["policy.strict"] = ["true", "false"]
    words["policy.preference"] = ["auto", "static", "measured"]
    for k in ("parallel.tp", "parallel.dp", "parallel.ep"):
        words[k] = []
    words["probe"] = list(schema.PROBE_MODES)
    return words


# The script: filled in by bash() with the commands, each one's options and their choices, and
# the override keys and their values (str.format fields; doubled braces are the script's own).
_BASH = """# bash completion for selector (python -m selector completion bash)
_selector_complete() {{
  local cur prev cmd i start opts choices values
  # the word under the cursor split on blanks only: bash also splits `key=value` at `=`
  # (COMP_WORDBREAKS), and then replaces only what follows the `=`
  cur="${{COMP_LINE:0:COMP_POINT}}"
  cur="${{cur##*[[:blank:]]}}"
  prev=""
  [ "$COMP_CWORD" -gt 0 ] && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  [ "${{COMP_WORDS[COMP_CWORD]}}" = "$cur" ] || [ "$prev" != "=" ] || prev="$cur"
  start=1
  if [ "${{COMP_WORDS[1]}}" = "-m" ] && [ "${{COMP_WORDS[2]}}" = "selector" ]; then start=3; fi
  cmd=""
  for ((i=start; i<COMP_CWORD; i++)); do
    case "${{COMP_WORDS[i]}}" in -*) ;; *) cmd="${{COMP_WORDS[i]}}"; break ;; esac
  done
  case "${{COMP_WORDS[0]}}" in
    python*) [ "$start" = 3 ] || {{ COMPREPLY=( $(compgen -f -- "$cur") ); return 0; }} ;;
  esac
  if [ -z "$cmd" ]; then
    COMPREPLY=( $(compgen -W {commands} -- "$cur") )
    return 0
  fi
  opts=""
  case "$cmd" in
{cases}
  esac
  choices=""
  case "$cmd:$prev" in
{choice_cases}
  esac
  if [ -n "$choices" ]; then
    COMPREPLY=( $(compgen -W "$choices" -- "$cur") )
    return 0
  fi
  case "$prev" in
    --model|--config-dir|--out) COMPREPLY=( $(compgen -d -- "$cur") ); return 0 ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
    return 0
  fi
  if [[ "$cur" == *=* ]]; then
    local key="${{cur%%=*}}" val="${{cur#*=}}"
    values=""
    case "${{key#+}}" in
{value_cases}
    esac
    if [[ "$COMP_WORDBREAKS" == *=* ]]; then
      COMPREPLY=( $(compgen -W "$values" -- "$val") )
    else
      COMPREPLY=( $(compgen -P "$key=" -W "$values" -- "$val") )
    fi
    return 0
  fi
  case "$cmd" in
    explain|list|matrix|audit|tune|check|doctor|fleet)
      compopt -o nospace 2>/dev/null
      COMPREPLY=( $(compgen -W {key_words} -- "$cur") $(compgen -f -- "$cur") ) ;;
    *) COMPREPLY=( $(compgen -f -- "$cur") ) ;;
  esac
  return 0
}}
complete -F _selector_complete selector
# for `python -m selector ...` too (this replaces python's own completion in this shell):
#   complete -F _selector_complete python
"""


def bash(parser: argparse.ArgumentParser, config_dirs: Sequence[str] = ()) -> str:
    opts = options(parser)
    keys = override_words(config_dirs)
    q = shlex.quote
    cases = []
    for cmd, o in sorted(opts.items()):
        cases.append(f"    {cmd}) opts={q(' '.join(sorted(o)))} ;;")
    choice_cases = []
    for cmd, o in sorted(opts.items()):
        for opt, choices in sorted(o.items()):
            if choices and choices != ["-"]:
                choice_cases.append(f"    {cmd}:{opt}) choices={q(' '.join(choices))} ;;")
    value_cases = [f"    {k}) values={q(' '.join(v))} ;;" for k, v in sorted(keys.items()) if v]
    key_words = " ".join(f"{k}=" for k in sorted(keys))
    commands = " ".join(sorted(opts))
    return _BASH.format(commands=q(commands + " --help"), cases="\n".join(cases),
                        choice_cases="\n".join(choice_cases),
                        value_cases="\n".join(value_cases), key_words=q(key_words))


def run_completion(shell: str, config_dirs: Sequence[str], parser: argparse.ArgumentParser) -> int:
    """Print `shell`'s completion script for `parser` (the CLI's own, passed by cli.py)."""
    import sys

    sys.stdout.write(bash(parser, config_dirs))
    return 0
