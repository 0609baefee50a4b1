"""`python -m selector explain|list|check|doctor|matrix|tune|audit|fleet|completion [...]`.

Exit codes (docs/interface.md): 0 a backend was selected (or the command found nothing wrong);
1 nothing selectable, an explicit backend refused under strict, or doctor found a problem;
2 bad input, reported as one message without a traceback.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from typing import TYPE_CHECKING, Any, List, NoReturn, Optional, Sequence

from selector.core.errors import SelectorError
from selector.core.text import printable

if TYPE_CHECKING:  # pragma: no cover
    from selector.api import Selector

COMMANDS = ("explain", "list", "check", "doctor")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's own usage errors are bad input too: exit 2
        self.print_usage(sys.stderr)
        print(f"selector: error: {message}", file=sys.stderr)
        raise SystemExit(2)


#: every command, in the order `selector --help` lists them
ALL_COMMANDS = (*COMMANDS, "tune", "matrix", "audit", "fleet", "completion")


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line's parser; with `only` (a command of ALL_COMMANDS), that command's
    subparser alone: what parse_args needs once the first word names the command (argparse
    builds a help formatter for every option it adds, a tenth of a cold `explain`)."""
    p = _Parser(prog="selector", description="Which quantized kernel backend runs this layer on "
                "this machine, and why not the others.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    helps = {"explain": "decide for one layer and say why",
             "list": "the catalogue: every backend and its rules, with sources",
             "check": "validate a config tree (the packaged one and --config-dir ones)",
             "doctor": "detect this machine: GPU, CUDA, packages, what could run here"}
    for name in ALL_COMMANDS:
        if only is not None and name != only:
            continue
        if name in helps:
            _add_command(sub.add_parser(name, help=helps[name], description=helps[name]), name)
        elif name == "tune":
            from selector.commands.tune import add_arguments as tune_arguments  # docs/tuning.md
            tune_arguments(sub.add_parser(
                "tune", help="time each verified backend here; write a profile",
                description="time each verified backend here; write a profile"))
        else:
            {"matrix": _add_matrix, "audit": _add_audit, "fleet": _add_fleet,
             "completion": _add_completion}[name](sub)
    return p


def _add_command(s: argparse.ArgumentParser, name: str) -> None:
    """explain, list, check and doctor: --format, --config-dir, the overrides, and each one's
    own options."""
    s.add_argument("--format", choices=("text", "json", "line") if name == "explain"
                   else ("text", "json"), default="text",
                   help="line: one line per decision (explain only)" if name == "explain"
                   else None)
    s.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                   help="an extra config directory (backend/<op>/*.yaml, platform/, layer/...)")
    s.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="Hydra overrides: key=value, group=option, +key=value, ~key")
    if name == "explain":
        s.add_argument("--model", metavar="DIR", help="a checkpoint directory: explain "
                       "every quantized layer kind its config.json describes")
        s.add_argument("--why", metavar="BACKEND", help="only this backend's verdict and "
                       "every reason for it")
        s.add_argument("--write-config", metavar="FILE", help="with --model and "
                       "engine=trtllm: write the plan's extra_llm_api_options YAML to FILE")
    if name == "list":
        s.add_argument("--presets", action="store_true", help="every preset of every group "
                       "(platform, stack with the versions it holds, layer, policy)")
    if name == "doctor":
        s.add_argument("--deep", action="store_true",
                       help="import the kernel libraries in a child process and probe them")
        s.add_argument("--timeout", default=None, metavar="SECONDS",
                       help="seconds each deep probe process may take (default: "
                       "SELECTOR_PROBE_TIMEOUT, else 120)")
        s.add_argument("--probe", action="append", default=[], metavar="NAME",
                       help="run only this deep probe (repeatable; implies --deep)")
        s.add_argument("--verify", action="store_true",
                       help="run each usable backend on small NVFP4 and FP8 problems (a child "
                       "process each, --timeout) and compare it with the reference")
        s.add_argument("--op", action="append", choices=("moe", "linear"), default=[],
                       help="verify only this op (repeatable; implies --verify)")
        s.add_argument("--no-cache", dest="verify_cache", action="store_false",
                       help="verify again instead of reusing this machine's cached results")


def _add_matrix(sub: Any) -> None:
    m = sub.add_parser("matrix", help="every backend on every platform preset, as a grid",
                       description="every backend on every platform preset, as a grid")
    m.add_argument("--op", choices=("moe", "linear"), action="append", default=[],
                   help="only this op (default: both, or the op of the layer given)")
    m.add_argument("--quant", action="append", default=[], metavar="SCHEME",
                   help="only this quant scheme (repeatable; default: every scheme some "
                   "backend of the op implements; with a layer override, the layer's)")
    m.add_argument("--stack", metavar="NAME", help="the software stack preset for every "
                   "platform (default: the stack preset marked `stack: {default: true}`)")
    m.add_argument("--format", choices=("text", "markdown", "html", "json"), default="text")
    m.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                   help="an extra config directory")
    m.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="layer and policy overrides (layer=nemotron_moe, layer.ep_size=8)")


def _add_audit(sub: Any) -> None:
    a = sub.add_parser("audit", help="an engine's start-up log against the plan: agree, differ, "
                       "not in the log", description="compare what a running engine chose "
                       "(its start-up log) with the plan for the same checkpoint and platform")
    a.add_argument("log", metavar="LOG", help="the engine's start-up log (vLLM, SGLang, "
                   "TensorRT-LLM)")
    a.add_argument("--model", metavar="DIR", help="the checkpoint directory the engine ran")
    a.add_argument("--format", choices=("text", "json"), default="text")
    a.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                   help="an extra config directory")
    a.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="the overrides of explain --model (platform=..., stack=..., engine=...)")


def _add_fleet(sub: Any) -> None:
    f = sub.add_parser("fleet", help="every model on every machine under every engine: one "
                       "table of plans", description="plan every checkpoint of a fleet file on "
                       "every machine under every engine (docs/interface.md)")
    f.add_argument("fleet", metavar="FLEET", help="the fleet YAML: machines, models, engines")
    f.add_argument("--format", choices=("text", "markdown", "html", "json"), default="text")
    f.add_argument("--what-if", nargs="+", default=[], metavar="OVERRIDE",
                   help="plan every cell again with these overrides (stack=vllm_0_33) and list "
                   "the cells that change backend or start failing")
    f.add_argument("--fail-on", choices=("error", "warning"), default=None,
                   help="exit 1 when a cell refuses (error, the default) or also warns")
    f.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                   help="an extra config directory")


def _add_completion(sub: Any) -> None:
    c = sub.add_parser("completion", help="print a shell completion script",
                       description="print a completion script for the commands, their options "
                       "and the override keys: eval \"$(python -m selector completion bash)\"")
    c.add_argument("shell", choices=("bash",))
    c.add_argument("--config-dir", action="append", default=[], metavar="DIR",
                   help="an extra config directory (its presets are completed too)")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line, with overrides anywhere after the command: `explain --why X
    platform=b200 --format json layer.ep_size=2` (argparse alone takes one run of positionals,
    so later `key=value` words come back unparsed; they join the overrides, in order)."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words and words[0] in ALL_COMMANDS else None)
    args, extra = parser.parse_known_args(words)
    unknown = [w for w in extra if w.startswith("-") or not hasattr(args, "overrides")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    if sys.stdout is None:  # started with stdout closed (`>&-`)
        return _output_failed("standard output is closed")
    args = parse_args(argv)
    if args.command is None:
        build_parser().print_help(sys.stderr)
        return 2
    if _detects(args):  # NVML's child runs while the API imports (inspect/environment.py)
        from selector.inspect.gpu_probe import start_gpu_probe
        start_gpu_probe()
    from selector.config import catalogues
    catalogues.WARN = _warning
    try:
        rc = _run(args)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not at exit
        return rc
    except SelectorError as exc:
        print(f"selector: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in _OUTPUT_ERRNOS:
            raise
        return _output_failed(exc.strerror or str(exc), exc.errno == errno.EPIPE)


def _detects(args: argparse.Namespace) -> bool:
    """Whether the command will detect this machine: explain, doctor and tune under
    platform=auto (no `platform=` override naming a preset)."""
    if args.command not in ("explain", "doctor", "tune"):
        return False
    for o in getattr(args, "overrides", None) or ():
        key, _, value = str(o).lstrip("+~").partition("=")
        if key.strip() == "platform" and value.strip() not in ("", "auto"):
            return False
    return True


def _warning(message: str) -> None:
    print(f"selector: warning: {message}", file=sys.stderr)


_OUTPUT_ERRNOS = (errno.EPIPE, errno.ENOSPC, errno.EBADF, errno.EIO, errno.EFBIG,
                  errno.EDQUOT, errno.EINVAL)


def _output_failed(why: str, quiet: bool = False) -> int:
    """Writing the answer failed: say so on stderr (not for a reader that stopped reading,
    such as `| head`), exit 2, and point stdout at /dev/null so that the interpreter's
    final flush does not fail again with a traceback."""
    if not quiet:
        print(f"selector: error: cannot write the output: {why}", file=sys.stderr)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
    return 2


def _run(args: argparse.Namespace) -> int:
    from selector.api import load
    if args.command == "doctor":
        from selector.commands.doctor import run_doctor
        return run_doctor(args.overrides, args.config_dir, deep=args.deep, timeout=args.timeout,
                          fmt=args.format, probes=args.probe, verify=args.verify,
                          verify_ops=args.op, verify_cache=args.verify_cache)
    if args.command == "matrix":
        from selector.commands.matrix import run_matrix
        return run_matrix(args.op, args.stack, args.overrides, args.config_dir, args.format,
                          args.quant)
    if args.command == "audit":
        from selector.commands.audit import run_audit
        return run_audit(args.log, args.model, args.overrides, args.config_dir, args.format)
    if args.command == "completion":
        from selector.commands.completion import run_completion
        return run_completion(args.shell, args.config_dir, build_parser())
    if args.command == "fleet":
        from selector.commands.fleet import run_fleet
        return run_fleet(args.fleet, args.format, args.what_if, args.fail_on, args.config_dir)
    if args.command == "tune":
        from selector.commands.tune import run_tune
        return run_tune(args)
    if args.command == "check":
        from selector.commands.check import run_check
        return run_check(args.overrides, args.config_dir, fmt=args.format)
    sel = load(args.overrides, config_dirs=args.config_dir)
    if args.command == "list":
        return _list(sel, args)
    if getattr(args, "write_config", None) is not None and (
            args.model is None or not sel.run_config.engine.name == "trtllm"):
        raise SelectorError(f"--write-config: {args.write_config!r} needs --model DIR and "
                            "engine=trtllm (TensorRT-LLM reads its backends from an "
                            "extra_llm_api_options YAML; vLLM and SGLang take flags, which "
                            "the plan prints)", key="--write-config")
    if args.model is not None and sel.run_config.engine.name != "none":
        return _explain_launch(sel, args)
    if args.model is not None:
        return _explain_model(sel, args)
    return _explain_layer(sel, args)


def _list(sel: Selector, args: argparse.Namespace) -> int:
    """`list`: the catalogue, or with --presets every preset of every group."""
    if args.presets:
        from selector.commands.preset_list import presets_dict, presets_text
        assert sel.tree is not None  # load() always records the tree it composed
        _emit(presets_dict(sel.tree) if args.format == "json" else presets_text(sel.tree),
              args.format)
        return 0
    from selector.commands.listing import catalogue_dict, catalogue_text
    _emit(catalogue_dict(sel.catalogue) if args.format == "json" else
          catalogue_text(sel.catalogue), args.format)
    return 0


def _explain_launch(sel: Selector, args: argparse.Namespace) -> int:
    """`explain --model DIR engine=NAME`: the plan and the launch plan under the engine."""
    lp = sel.launch_plan(args.model)
    if args.write_config is not None:
        return _write_config(lp, args.write_config, args.format)
    if args.why is not None:  # the verdicts of the per-GPU layers the launch plan decided
        return _plan_why(lp.plan, args.why, args.format)
    if args.format == "line":  # one line per per-GPU layer group, and why it won
        from selector.checkpoint.beat import beat_text
        from selector.config.catalogues import marked_line
        _emit("\n".join(marked_line(sel.catalogue, d, d.log_line()) +
                        (f" | why: {printable(w)}" if (w := beat_text(d)) else "")
                        for d in lp.plan.decisions()), "line")
        return 0 if lp.runs else 1
    if args.format == "json":
        _emit({**lp.plan.to_dict(), "launch": lp.to_dict()}, "json")
    else:
        _emit(f"{lp.plan}\n\n{lp}", "text")
    return 0 if lp.runs else 1


def _explain_model(sel: Selector, args: argparse.Namespace) -> int:
    """`explain --model DIR`: every quantized layer kind of the checkpoint, decided."""
    from selector.checkpoint.plan import CHECKPOINT_KEYS
    for o in args.overrides:  # what the checkpoint fixes is never silently overridden
        key = o.lstrip("+~").split("=", 1)[0].strip()
        if key == "layer" or key.removeprefix("layer.") in CHECKPOINT_KEYS and \
                key.startswith("layer."):
            raise SelectorError(f"{key}: {o!r} cannot be combined with --model: the "
                                "checkpoint fixes each layer's op, quant, activation and "
                                "sizes (layer.ep_size, layer.tp_size, layer.num_tokens, "
                                "layer.all2all and layer.dtype apply)", key=key)
    p = sel.plan(args.model)
    if args.why is not None:
        return _plan_why(p, args.why, args.format)
    # the version guard once (each decision's JSON notes carry it too)
    guard = next((d.guard for d in p.decisions() if d.guard), "")
    if args.format == "line":
        from selector.config.catalogues import marked_line
        if guard:
            print(f"selector: note: {guard}", file=sys.stderr)
        _emit("\n".join(marked_line(sel.catalogue, d, d.log_line()) for d in p.decisions()),
              "line")
    else:
        _emit(p.to_dict() if args.format == "json" else
              (f"!! {guard}\n" if guard else "") + str(p), args.format)
    return 0 if p.ok else 1


def _explain_layer(sel: Selector, args: argparse.Namespace) -> int:
    """`explain`: the one layer the overrides describe."""
    d = sel.default()
    if args.why is not None:
        from selector.commands.why import why
        out, usable = why(d, args.why, args.format)
        _emit(out, args.format)
        return 0 if usable else 1
    if args.format == "line":
        if d.guard:  # stdout stays one line per decision
            print(f"selector: note: {d.guard}", file=sys.stderr)
        if d.hint:
            print(f"selector: note: {d.hint}", file=sys.stderr)
        from selector.config.catalogues import marked_line  # a backend from a plugin says so
        _emit(marked_line(sel.catalogue, d, d.log_line()), "line")
        return 0 if d.selected else 1
    from selector.config.catalogues import explained
    _emit(explained(sel.catalogue, d, args.format), args.format)
    return 0 if d.selected else 1


def _write_config(lp: Any, path: str, fmt: str) -> int:
    """`--write-config FILE`: the launch plan's config file (TensorRT-LLM's
    extra_llm_api_options) written to FILE; the plan is printed as without it, and the command
    to run names FILE. A plan with no answer writes nothing (exit 1)."""
    files = lp.files()
    ok = lp.runs
    if ok and len(files) == 1:
        text = next(iter(files.values()))
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise SelectorError(f"--write-config: cannot write {path!r}: "
                                f"{exc.strerror or exc}", key="--write-config") from None
    if fmt == "json":
        _emit({**lp.plan.to_dict(), "launch": lp.to_dict()}, "json")
    else:
        _emit(f"{lp.plan}\n\n{lp}", "text")
    if not ok:
        print(f"selector: note: --write-config: nothing written to {path}: the plan has no "
              "answer for every layer", file=sys.stderr)
        return 1
    if len(files) != 1:
        raise SelectorError(f"--write-config: this plan has {len(files)} config files, not one",
                            key="--write-config")
    name = next(iter(files))
    print(f"selector: wrote {path} ({name}); run: "
          f"{lp.command().replace(name, path)}", file=sys.stderr)
    return 0


def _plan_why(p: Any, backend: str, fmt: str) -> int:
    """--why with --model: the backend's verdict for each layer kind of its op that some backend
    implements (a scheme none implements is the engine's)."""
    from selector.checkpoint.plan_text import planned
    from selector.commands.why import why
    from selector.core.errors import bad_value
    name = backend.strip().replace("-", "_").lower()
    rows = [(k, s) for k in p.kinds if k.quant for s in k.shapes if planned(s.decision)
            and any(c.backend == name for c in s.decision.candidates)]
    if not rows:
        names = {c.backend for d in p.decisions() for c in d.candidates}
        raise bad_value("--why", backend, names, what="backend")
    outs: List[Any] = []
    usable = True
    for k, s in rows:
        out, ok = why(s.decision, backend, "json" if fmt == "json" else "line")
        usable = usable and ok
        if fmt == "json":
            outs.append({"kind": k.component, "projections": list(s.projections),
                         **json.loads(out)})
        else:
            outs.append(f"{k.component} {'/'.join(s.projections)}: {out}")
    _emit(json.dumps(outs, indent=2) if fmt == "json" else
          "\n".join(printable(str(x)) for x in outs), "text")
    return 0 if usable else 1


def _emit(obj: Any, fmt: str) -> None:
    if fmt == "json" and not isinstance(obj, str):
        sys.stdout.write(json.dumps(obj, indent=2) + "\n")
    else:
        sys.stdout.write(obj.rstrip("\n") + "\n")
